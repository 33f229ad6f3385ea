"""Input-dropout query selection (spiking-network MI study): pick the dropout setting (p, n)
by attacking a reference model, then attack the target with it."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from miaudit.attacks._base import Attack, AttackInput, AttackResult
from miaudit.attacks._common import check_models
from miaudit.registry import ATTACKS, parse_spec


@ATTACKS.register("dropout_search")
class DropoutSearch(Attack):
    """Grid search over input-dropout query columns (the spiking-network study's procedure):
    the first reference model is attacked with the remaining references by the inner attack
    restricted to one column at a time; the column with the best AUC is then used by the
    inner attack on the real target with all references.

    Options:
      attack (str | dict, "attack_r"): the inner attack spec, e.g. "rmia_simple" or
        {"name": "rmia", "gamma": 1}; it must not set ``queries``.
      grid (list[str] | None): the candidate query columns (each a collected query spec such
        as "dropout:p=0.01,n=10"); None = every collected column named "dropout...".
    ``info``: the chosen column, every column's tuning AUC, the tuning model, and the inner
    attack's own info on the target. Needs one reference more than the inner attack (the
    tuning model is attacked with the others), and at least two; needs population data when
    the inner attack does.
    """

    def __init__(self, attack: str | dict[str, Any] = "attack_r",
                 grid: list[str] | None = None):
        name, options = parse_spec(attack)
        if "queries" in options:
            raise ValueError("option 'attack' must not set 'queries': the search chooses them")
        if name == "dropout_search":
            raise ValueError("option 'attack' cannot be dropout_search itself")
        # unknown inner attack or bad inner options: fail at construction, naming the valid ones
        template = ATTACKS.build(name, **options)
        self.min_references = max(2, template.min_references + 1)
        self.needs_population = template.needs_population
        if grid is not None and (isinstance(grid, str) or not grid
                                 or not all(isinstance(g, str) for g in grid)):
            raise ValueError(f"option 'grid' must be a non-empty list of query specs, got {grid}")
        self.inner_name, self.inner_options = name, options
        self.grid = None if grid is None else list(grid)

    def candidates(self, data: AttackInput) -> list[str]:
        grid = self.grid or [q for q in data.query_names if q.startswith("dropout")]
        if not grid:
            raise ValueError("dropout_search: no 'grid' given and no dropout query columns were "
                             f"collected (have {data.query_names})")
        data.query_index(grid)  # every candidate must have been collected
        return grid

    def inner(self, column: str) -> Attack:
        return ATTACKS.build(self.inner_name, **self.inner_options, queries=[column])

    def evaluate(self, data: AttackInput, target: int, references: np.ndarray) -> AttackResult:
        refs = check_models(data, target, references, "dropout_search", self.min_references)
        grid = self.candidates(data)
        tuning, others = int(refs[0]), refs[1:]
        truth = data.keep[tuning]
        aucs = {column: float(roc_auc_score(truth, self.inner(column).score(data, tuning, others)))
                for column in grid}
        chosen = max(grid, key=lambda column: aucs[column])  # first of the best on ties
        result = self.inner(chosen).evaluate(data, target, refs)
        return AttackResult(result.scores, {"chosen_query": chosen, "grid_auc": aucs,
                                            "tuning_model": tuning, "inner_info": result.info})
