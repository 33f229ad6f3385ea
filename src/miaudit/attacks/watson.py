"""Difficulty calibration (Watson et al. 2022, "On the Importance of Difficulty Calibration in
Membership Inference Attacks", Sec. 3, Eq. 2)."""

from __future__ import annotations

import numpy as np

from miaudit.attacks._base import Attack, AttackInput, AttackResult
from miaudit.attacks._common import check_models, columns, out_mean_with_fallback, query_option
from miaudit.registry import ATTACKS


@ATTACKS.register("watson")
class Watson(Attack):
    """Calibrated loss (Watson et al. 2022): s(x) = loss_target(x) - mean loss of the reference
    models that did not train on x (offline); member when small, so score = -s(x), averaged
    over the ``queries`` columns (all by default; the paper averages over augmentation
    draws). Samples that are IN for every reference fall back to the mean over all
    references (counted in ``info``)."""

    def __init__(self, queries: list[str] | None = None):
        self.queries = query_option(queries)

    def evaluate(self, data: AttackInput, target: int, references: np.ndarray) -> AttackResult:
        refs = check_models(data, target, references, "watson")
        qidx = data.query_index(self.queries)
        log_prob = data.signal("log_prob")  # loss = -log p_y
        reference_log_prob, missing = out_mean_with_fallback(log_prob, data.keep, refs, qidx)
        return AttackResult((columns(log_prob[target], qidx) - reference_log_prob).mean(axis=1),
                            {"samples_without_out_refs": missing})
