"""Label-only attacks (Choquette-Choo, Tramer, Carlini & Papernot 2021, "Label-Only Membership
Inference Attacks", ICML): the data-augmentation attack (Sec. 4.1) and the boundary-distance
attack (Sec. 4.2).

Both read only query columns that release labels (:mod:`miaudit.queries.labels`): ``label``
columns hold one-hot predicted labels, ``boundary`` columns a distance found with label queries
only. An attack given any other column refuses it, so a label-only defense is audited with
exactly what it releases.
"""

from __future__ import annotations

import numpy as np

from miaudit.attacks._base import Attack, AttackInput, AttackResult
from miaudit.attacks._common import check_models, query_option
from miaudit.queries.labels import boundary_distances, is_label_only, query_name
from miaudit.registry import ATTACKS


def label_columns(data: AttackInput, queries: list[str] | None, kind: str,
                  attack: str) -> np.ndarray:
    """Indices of the ``kind`` ("label" / "boundary") query columns the attack reads: the
    named ones (each must be of that kind), or every such column."""
    return data.query_index(label_queries(data.query_names, queries, kind, attack))


def label_queries(query_names: list[str], queries: list[str] | None, kind: str,
                  attack: str) -> list[str]:
    """The ``kind`` query specs the attack reads among the audit's ``query_names``; a
    ValueError naming the query to add when there is none."""
    if queries is None:
        queries = [n for n in query_names if is_label_only(n) and query_name(n) == kind]
        if not queries:
            raise ValueError(f"{attack} needs '{kind}' queries (label-only outputs), but the "
                             f"audit collects {query_names}; add e.g. "
                             f"{'labels18' if kind == 'label' else 'boundary:budget=1000'} "
                             "to queries")
    wrong = [q for q in queries if not (is_label_only(q) and query_name(q) == kind)]
    if wrong:
        raise ValueError(f"{attack} reads labels only: queries {wrong} are not '{kind}' "
                         "queries")
    return queries


def calibrate(values: np.ndarray, data: AttackInput, target: int, references: np.ndarray,
              attack: str) -> tuple[np.ndarray, dict]:
    """values[target] - mean over each sample's OUT references (Watson et al. 2022's
    difficulty calibration, the reference-model calibration the label-only paper's Sec. 4
    leaves optional). ``values`` is (M, N). A sample that is IN for every reference keeps its
    uncalibrated value (counted in the info)."""
    refs = check_models(data, target, references, attack, minimum=1)
    out = ~data.keep[refs]
    counts = out.sum(axis=0)
    total = (values[refs] * out).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_out = np.where(counts > 0, total / np.maximum(counts, 1), 0.0)
    return values[target] - mean_out, {"samples_without_out_refs": int((counts == 0).sum())}


class _LabelOnlyAttack(Attack):
    """Shared by the two label-only attacks: their options and the optional calibration.
    Subclasses define ``name`` and ``values(data, models) -> (M, N)``."""

    min_references = 0
    name = ""
    kind = ""  # the label-only query kind it reads: "label" or "boundary"

    def check_queries(self, query_names: list[str]) -> None:
        super().check_queries(query_names)
        label_queries(query_names, self.queries, self.kind, self.name)

    def __init__(self, queries: list[str] | None = None, calibrate: bool = False):
        if not isinstance(calibrate, bool):
            raise ValueError(f"option 'calibrate' must be a boolean, got {calibrate!r}")
        self.queries = query_option(queries)
        self.calibrate = calibrate
        self.min_references = 1 if calibrate else 0

    def values(self, data: AttackInput, models: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def evaluate(self, data: AttackInput, target: int, references: np.ndarray) -> AttackResult:
        refs = check_models(data, target, references, self.name, self.min_references)
        if not self.calibrate:
            return AttackResult(self.values(data, np.array([target]))[target])
        values = self.values(data, np.r_[target, refs])
        scores, info = calibrate(values, data, target, refs, self.name)
        return AttackResult(scores, info)


@ATTACKS.register("label_augmentation")
class LabelAugmentation(_LabelOnlyAttack):
    """Data-augmentation label-only attack (Choquette-Choo et al. 2021, Sec. 4.1): query the
    target's label on N augmentations of x (flips, shifts) and count how many are correct,
    score(x) = (1/N) sum_i 1[f(aug_i(x)) = y] (the paper's counting attack on the
    correctness vector; members stay correctly classified under their augmentations more
    often).

    Options:
      queries (list[str] | None): ``label`` query specs; default every ``label`` column (use
        the ``labels18`` preset: the paper's flips x shifts by up to 1 pixel).
      calibrate (bool, False): subtract the mean correctness of x over its OUT reference
        models (difficulty calibration); needs at least one reference.
    """

    name = "label_augmentation"
    kind = "label"

    def values(self, data: AttackInput, models: np.ndarray) -> np.ndarray:
        """(len(models), N) fraction of the label columns whose label is the true one."""
        qidx = label_columns(data, self.queries, "label", "label_augmentation")
        values = np.zeros((data.num_models, len(data.labels)))
        for model in models:  # a loop over models: each (N, Q', C) slice at a time
            predicted = data.logits[model][:, qidx].argmax(-1)
            values[model] = (predicted == data.labels[:, None]).mean(axis=1)
        return values


@ATTACKS.register("boundary_distance")
class BoundaryDistance(_LabelOnlyAttack):
    """Boundary-distance label-only attack (Choquette-Choo et al. 2021, Sec. 4.2): the L2
    distance from x to the target's decision boundary, found by the decision-based HopSkipJump
    attack under the query budget stated in the ``boundary`` query spec (the query stage runs
    it: it has the model). Members lie farther from the boundary. score(x) = dist(x) when the
    target classifies x correctly, and 0 otherwise (the paper's convention: a misclassified
    point is on the wrong side of the boundary already); with several ``boundary`` columns the
    mean distance.

    Options:
      queries (list[str] | None): ``boundary`` query specs; default every ``boundary`` column.
      calibrate (bool, False): subtract the mean score of x over its OUT reference models.
    """

    name = "boundary_distance"
    kind = "boundary"

    def values(self, data: AttackInput, models: np.ndarray) -> np.ndarray:
        qidx = label_columns(data, self.queries, "boundary", "boundary_distance")
        values = np.zeros((data.num_models, len(data.labels)))
        for model in models:
            outputs = data.logits[model][:, qidx]
            correct = outputs.argmax(-1) == data.labels[:, None]
            values[model] = np.where(correct, boundary_distances(outputs), 0.0).mean(axis=1)
        return values
