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
