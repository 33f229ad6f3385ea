"""Attack-R, the reference-model attack (Ye et al. 2022, "Enhanced Membership Inference Attacks
against Machine Learning Models", Sec. 4.3)."""

from __future__ import annotations

import numpy as np

from miaudit.attacks._base import Attack, AttackInput
from miaudit.attacks._common import check_models, columns, query_option
from miaudit.registry import ATTACKS


@ATTACKS.register("attack_r")
class AttackR(Attack):
    """Attack-R (Ye et al. 2022): score = fraction of reference models that did not train on
    x (OUT) whose confidence on x is at most the target's, p_ref(x) <= p_target(x); per query
    column, then averaged over the ``queries`` columns (all by default). This is the
    percentile of the target's loss in x's own reference-loss distribution, whose
    alpha-threshold is the paper's per-sample test (without its linear interpolation).
    Samples that are IN for every reference are ranked among all references instead
    (counted in ``last_info``)."""

    def __init__(self, queries: list[str] | None = None):
        self.queries = query_option(queries)
        self.last_info: dict = {}

    def score(self, data: AttackInput, target: int, references: np.ndarray) -> np.ndarray:
        refs = check_models(data, target, references, "attack_r")
        qidx = data.query_index(self.queries)
        log_prob = data.signal("log_prob")  # same order as the confidence p_y
        target_values = columns(log_prob[target], qidx)
        samples = data.keep.shape[1]
        below = np.zeros(target_values.shape)
        below_all = np.zeros(target_values.shape)
        count = np.zeros(samples, dtype=np.int64)
        for model in refs:  # a loop over models; each step is vectorized over samples
            not_above = columns(log_prob[model], qidx) <= target_values
            out = ~data.keep[model]
            below += not_above & out[:, None]
            below_all += not_above
            count += out
        missing = count == 0
        fraction = np.where(missing[:, None], below_all / len(refs),
                            below / np.maximum(count, 1)[:, None])
        self.last_info = {"samples_without_out_refs": int(missing.sum())}
        return fraction.mean(axis=1)
