"""Input-dropout query selection (spiking-network MI study): pick the dropout setting (p, n)
by attacking a reference model, then attack the target with it."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from miaudit.attacks._base import Attack, AttackInput
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
    ``last_info``: the chosen column, every column's tuning AUC, the tuning model, and the
    inner attack's own info.
    """

    def __init__(self, attack: str | dict[str, Any] = "attack_r",
                 grid: list[str] | None = None):
        name, options = parse_spec(attack)
        if "queries" in options:
            raise ValueError("option 'attack' must not set 'queries': the search chooses them")
        if name == "dropout_search":
            raise ValueError("option 'attack' cannot be dropout_search itself")
        ATTACKS.get(name)  # unknown inner attack: fail at construction, naming the valid ones
        if grid is not None and (isinstance(grid, str) or not grid
                                 or not all(isinstance(g, str) for g in grid)):
            raise ValueError(f"option 'grid' must be a non-empty list of query specs, got {grid}")
        self.inner_name, self.inner_options = name, options
        self.grid = None if grid is None else list(grid)
        self.last_info: dict = {}

    def candidates(self, data: AttackInput) -> list[str]:
        grid = self.grid or [q for q in data.query_names if q.startswith("dropout")]
        if not grid:
            raise ValueError("dropout_search: no 'grid' given and no dropout query columns were "
                             f"collected (have {data.query_names})")
        data.query_index(grid)  # every candidate must have been collected
        return grid

    def inner(self, column: str) -> Attack:
        return ATTACKS.build(self.inner_name, **self.inner_options, queries=[column])

    def score(self, data: AttackInput, target: int, references: np.ndarray) -> np.ndarray:
        refs = check_models(data, target, references, "dropout_search", minimum=2)
        grid = self.candidates(data)
        tuning, others = int(refs[0]), refs[1:]
        truth = data.keep[tuning]
        aucs = {column: float(roc_auc_score(truth, self.inner(column).score(data, tuning, others)))
                for column in grid}
        chosen = max(grid, key=lambda column: aucs[column])  # first of the best on ties
        attack = self.inner(chosen)
        scores = attack.score(data, target, refs)
        self.last_info = {"chosen_query": chosen, "grid_auc": aucs, "tuning_model": tuning,
                          "inner_info": getattr(attack, "last_info", None)}
        return scores
