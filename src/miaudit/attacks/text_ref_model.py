"""Reference-model attack on language models: the target's likelihood relative to reference
models that did not train on the text (Carlini et al. 2021, Sec. 5.2, "Comparing to other
neural language models"; Mireshghallah et al. 2022, "Quantifying Privacy Risks of Masked
Language Models Using Membership Inference Attacks", Eq. 1, the likelihood ratio test)."""

from __future__ import annotations

import numpy as np

from miaudit.attacks._base import Attack, AttackInput, AttackResult
from miaudit.attacks._common import check_models, positive_int
from miaudit.attacks._text import require_text
from miaudit.registry import ATTACKS


def first_out_mean(signal: np.ndarray, keep: np.ndarray, refs: np.ndarray,
                   limit: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(N,) mean of ``signal[r, i]`` over the first ``limit`` references r (in ``refs``
    order) that did not train on sample i, and (N,) how many were used."""
    out = ~keep[refs]  # (R, N)
    used = out & (np.cumsum(out, axis=0) <= (limit or len(refs)))
    counts = used.sum(0)
    sums = np.where(used, signal[refs], 0.0).sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts, counts


@ATTACKS.register("ref_model")
class ReferenceModel(Attack):
    """ref_model (Carlini et al. 2021 Sec. 5.2; Mireshghallah et al. 2022 Eq. 1): score =
    log p_target(x) - log p_ref(x), per token: the target's mean token log-likelihood minus
    the reference's, i.e. the log of the ratio of the reference's perplexity to the
    target's. The reference log-likelihood is the mean over the first ``max_references``
    (default all) of the audit's reference models that did not train on x (1 = a single
    reference language model, as in the papers); a text that every reference trained on is
    left at the target's own value minus the mean over all references (counted in the info).
    """

    modalities = ("text",)

    def __init__(self, max_references: int | None = None):
        self.max_references = positive_int(max_references, "max_references", allow_none=True)

    def evaluate(self, data: AttackInput, target: int, references: np.ndarray) -> AttackResult:
        refs = check_models(data, target, references, "ref_model")
        require_text(data, "ref_model")
        log_p = data.signal("log_prob")[:, :, 0]
        reference, counts = first_out_mean(log_p, data.keep, refs, self.max_references)
        missing = counts == 0
        reference[missing] = log_p[refs][:, missing].mean(0)
        return AttackResult(log_p[target] - reference,
                            {"samples_without_out_refs": int(missing.sum())})
