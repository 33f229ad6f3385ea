"""LOSS attack (Yeom et al. 2018, "Privacy Risk in Machine Learning", Sec. 3.2)."""

from __future__ import annotations

import numpy as np

from miaudit.attacks._base import Attack, AttackInput
from miaudit.attacks._common import check_models, columns, query_option
from miaudit.registry import ATTACKS


@ATTACKS.register("loss")
class LossAttack(Attack):
    """LOSS (Yeom et al. 2018): score = -mean over queries of the target's cross-entropy.

    Options: ``queries`` (query specs to use; all by default). Members have lower loss, so
    the negated loss ranks them higher. Uses the cached ``log_prob`` signal, since
    -loss = log p_y exactly; no reference models.
    """

    modalities = ("classes", "text")  # reads per-sample signals only

    min_references = 0

    def __init__(self, queries: list[str] | None = None):
        self.queries = query_option(queries)

    def score(self, data: AttackInput, target: int, references: np.ndarray) -> np.ndarray:
        check_models(data, target, references, "loss", minimum=0)
        qidx = data.query_index(self.queries)
        return columns(data.signal("log_prob")[target], qidx).mean(axis=1)
