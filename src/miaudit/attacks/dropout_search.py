"""Input-dropout query selection (spiking-network MI study): pick the dropout setting (p, N)
by attacking the reference models, never the target, then attack the target with it."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from miaudit.attacks._base import Attack, AttackInput, AttackResult
from miaudit.attacks._common import check_models
from miaudit.registry import ATTACKS, parse_spec

TUNING = ("all", "first")


@ATTACKS.register("dropout_search")
class DropoutSearch(Attack):
    """Grid search over input-dropout query columns, (p, N) each (the spiking-network study's
    procedure, issue 79): every reference model in turn is attacked with the remaining
    references by the inner attack restricted to one column at a time; the column with the
    best mean AUC over those references is then used by the inner attack on the target with
    all references. The plain query (p = 0) is a candidate, so on the references the search
    cannot do worse than no dropout; ties go to it.

    The selection reads the references' memberships only, never the target's: the target's
    scores are out of sample for it (its optimism is paid for), and since each target is
    selected for anew, a bootstrap over targets carries the selection's variability.

    Options:
      attack (str | dict, "attack_r"): the inner attack spec, e.g. "rmia_simple" or
        {"name": "rmia", "gamma": 1}; it must not set ``queries``.
      grid (list[str] | None): the candidate query columns (each a collected query spec such
        as "dropout:p=0.01,n=10"); None = every collected column named "dropout...".
      plain (str | None, "identity"): the no-dropout column (p = 0) added to the grid; it must
        have been collected. None leaves it out (the search before issue 79).
      tuning ("all" | "first", "all"): tune on every reference (leave one out) or on the
        first only (the search before issue 79).
    ``info``: the chosen column, every column's mean tuning AUC (and per reference), the
    tuning models, and the inner attack's own info on the target. Needs one reference more
    than the inner attack, and at least two; needs population data when the inner attack does.
    """

    def __init__(self, attack: str | dict[str, Any] = "attack_r",
                 grid: list[str] | None = None, plain: str | None = "identity",
                 tuning: str = "all"):
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
        if plain is not None and not isinstance(plain, str):
            raise ValueError(f"option 'plain' must be a query spec or null, got {plain!r}")
        if tuning not in TUNING:
            raise ValueError(f"option 'tuning' must be one of {TUNING}, got {tuning!r}")
        self.inner_name, self.inner_options = name, options
        self.grid = None if grid is None else list(grid)
        self.plain, self.tuning = plain, tuning

    def candidates(self, data: AttackInput) -> list[str]:
        """The plain column first (it wins ties), then the grid's, each once."""
        grid = self.grid or [q for q in data.query_names if q.startswith("dropout")]
        if not grid:
            raise ValueError("dropout_search: no 'grid' given and no dropout query columns were "
                             f"collected (have {data.query_names})")
        if self.plain is not None:
            if self.plain not in data.query_names:
                raise ValueError(f"dropout_search: the plain query {self.plain!r} (p = 0) was "
                                 f"not collected (have {data.query_names}); add it to queries "
                                 "or set plain: null")
            grid = [self.plain, *grid]
        grid = list(dict.fromkeys(grid))
        data.query_index(grid)  # every candidate must have been collected
        return grid

    def inner(self, column: str) -> Attack:
        return ATTACKS.build(self.inner_name, **self.inner_options, queries=[column])

    def tuning_aucs(self, data: AttackInput, refs: np.ndarray, grid: list[str]
                    ) -> tuple[list[int], dict[str, list[float]]]:
        """(tuning models, AUC of each column on each): each tuning reference attacked with
        the other references (the target is not among them)."""
        tuning = [int(r) for r in (refs if self.tuning == "all" else refs[:1])]
        aucs = {column: [] for column in grid}
        scored = data.evaluated_mask()  # the population's samples are no one's members
        for model in tuning:
            others = refs[refs != model]
            truth = data.keep[model][scored]
            for column in grid:
                scores = self.inner(column).score(data, model, others)
                aucs[column].append(float(roc_auc_score(truth, scores[scored])))
        return tuning, aucs

    def evaluate(self, data: AttackInput, target: int, references: np.ndarray) -> AttackResult:
        refs = check_models(data, target, references, "dropout_search", self.min_references)
        grid = self.candidates(data)
        tuning, aucs = self.tuning_aucs(data, np.asarray(refs), grid)
        mean = {column: float(np.mean(values)) for column, values in aucs.items()}
        chosen = max(grid, key=lambda column: mean[column])  # first of the best: plain on ties
        result = self.inner(chosen).evaluate(data, target, refs)
        return AttackResult(result.scores, {
            "chosen_query": chosen, "grid_auc": mean, "grid_auc_per_reference": aucs,
            "tuning_models": tuning, "inner_info": result.info})
