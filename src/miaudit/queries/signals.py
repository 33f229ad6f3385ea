"""Per-(model, sample, query) membership signals computed stably from logits.

All functions take logits of shape (..., C) and labels broadcastable to (...), and return
float64 arrays of shape (...). Stability: everything goes through log-softmax in float64.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp


def log_softmax(logits: np.ndarray) -> np.ndarray:
    logits = np.asarray(logits, dtype=np.float64)
    return logits - logsumexp(logits, axis=-1, keepdims=True)


def _true_class(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """values[..., labels] with labels broadcast over the leading axes."""
    labels = np.broadcast_to(np.asarray(labels)[..., None], values.shape[:-1] + (1,))
    return np.take_along_axis(values, labels, axis=-1)[..., 0]


def true_class_log_prob(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """log p_y."""
    return _true_class(log_softmax(logits), labels)


def true_class_prob(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """p_y, the confidence on the true class (Attack-P/R, RMIA)."""
    return np.exp(true_class_log_prob(logits, labels))


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """-log p_y (LOSS attack, Yeom et al. 2018; Watson et al. 2022)."""
    return -true_class_log_prob(logits, labels)


def logit_scaled_confidence(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """phi = log p_y - log(1 - p_y) = z_y - logsumexp_{j != y} z_j (LiRA, Carlini et al. 2022,
    Sec. 4.2), exact even when p_y rounds to 1."""
    logits = np.asarray(logits, dtype=np.float64)
    true_logit = _true_class(logits, labels)
    labels_b = np.broadcast_to(np.asarray(labels)[..., None], logits.shape[:-1] + (1,))
    others = logits.copy()
    np.put_along_axis(others, labels_b, -np.inf, axis=-1)
    return true_logit - logsumexp(others, axis=-1)


SIGNALS = {
    "logit_conf": logit_scaled_confidence,
    "prob": true_class_prob,
    "log_prob": true_class_log_prob,
    "loss": cross_entropy,
}


# -- text (causal LM) outputs -------------------------------------------------------------------
# A causal_lm model's stored output per sample is (4 * L) numbers: per scored token j, log p(t_j
# | t_<j), then mu_j, sigma_j (Min-K%++) and next-token correctness, NaN where padded (see
# miaudit.models.causal_lm). The sequence-level signals below let every attack written for
# per-sample probabilities (LOSS, LiRA, RMIA, Attack-P/R) run on text unchanged: a text's
# "probability" is its per-token geometric mean p = exp(mean_j log p(t_j | t_<j)), i.e. the
# inverse perplexity, in (0, 1).
TEXT_STATS = ("log_prob", "mu", "sigma", "correct")


def token_view(outputs: np.ndarray) -> np.ndarray:
    """(..., 4 * L) stored text outputs as (..., 4, L) (a view): index with TEXT_STATS."""
    outputs = np.asarray(outputs)
    if outputs.shape[-1] % len(TEXT_STATS):
        raise ValueError(f"text outputs need 4 values per token, got a last axis of "
                         f"{outputs.shape[-1]}")
    return outputs.reshape(*outputs.shape[:-1], len(TEXT_STATS), -1)


def text_mean_log_prob(outputs: np.ndarray, labels: np.ndarray | None = None) -> np.ndarray:
    """mean_j log p(t_j | t_<j) over the real tokens = log of the geometric-mean token
    probability = -log perplexity. ``labels`` are unused (text has none)."""
    token = token_view(outputs)[..., 0, :].astype(np.float64)
    real = np.isfinite(token)
    return np.where(real, token, 0.0).sum(-1) / np.maximum(real.sum(-1), 1)


def text_log_prob_logit(outputs: np.ndarray, labels: np.ndarray | None = None) -> np.ndarray:
    """log p - log(1 - p) of the geometric-mean token probability p (LiRA's logit scaling,
    Carlini et al. 2022 Sec. 4.2, applied to the text's p); log(1 - p) = log(-expm1(log p))."""
    mean = text_mean_log_prob(outputs)
    with np.errstate(divide="ignore"):
        return mean - np.log(-np.expm1(np.minimum(mean, -1e-300)))


TEXT_SIGNALS = {
    "logit_conf": text_log_prob_logit,
    "prob": lambda outputs, labels=None: np.exp(text_mean_log_prob(outputs)),
    "log_prob": text_mean_log_prob,
    "loss": lambda outputs, labels=None: -text_mean_log_prob(outputs),
}
