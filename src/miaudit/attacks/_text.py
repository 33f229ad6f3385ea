"""Per-token arrays of text audits (see :mod:`miaudit.queries.signals` for the stored layout)."""

from __future__ import annotations

import numpy as np

from miaudit.attacks._base import AttackInput
from miaudit.queries.signals import TEXT_STATS, token_view


def require_text(data: AttackInput, attack: str) -> None:
    if data.modality != "text":
        raise ValueError(f"{attack} attacks language models: it needs text outputs "
                         "(data set text, model causal_lm), not class logits")


def token_stat(data: AttackInput, model: int, name: str) -> np.ndarray:
    """(N, L) float64 per-token ``name`` (log_prob, mu, sigma) of ``model``, NaN where
    padded; text audits have one query column."""
    view = token_view(data.logits[model, :, 0])
    return view[:, TEXT_STATS.index(name)].astype(np.float64)


def lowest_fraction_mean(values: np.ndarray, k: float) -> np.ndarray:
    """(N,) mean of each row's ceil-free ``max(1, floor(k * T))`` smallest finite values, T the
    row's count of finite values (Shi et al. 2024's Min-K% set; at least one token, so short
    texts are scored). Rows without finite values give NaN."""
    real = np.isfinite(values)
    counts = real.sum(1)
    chosen = np.maximum(1, np.floor(k * counts + 1e-9)).astype(np.int64)
    ordered = np.sort(np.where(real, values, np.inf), axis=1)  # padding sorts last
    within = np.arange(values.shape[1])[None, :] < chosen[:, None]
    sums = np.where(within, ordered, 0.0).sum(1)
    with np.errstate(invalid="ignore"):
        return np.where(counts > 0, sums / chosen, np.nan)


def fraction_option(k: float) -> float:
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not 0 < k <= 1:
        raise ValueError(f"option 'k' is the fraction of tokens, in (0, 1], got {k!r}")
    return float(k)
