"""What (epsilon, delta)-DP implies for membership inference, and what an attack implies for
epsilon.

Upper bound on any attack's ROC. A membership test on the output of an (epsilon, delta)-DP
mechanism is a hypothesis test between neighbouring datasets, so (Kairouz, Oh & Viswanath 2015,
Thm. 2.1; Dong, Roth & Su 2022, Sec. 2.3; the neural-ODE study's Figure 5)

    TPR <= min(e^eps FPR + delta, 1 - e^-eps (1 - delta - FPR))      (clipped to [0, 1]).

Lower bound on epsilon from an attack (Jagielski, Ullman & Oprea 2020; Nasr et al. 2021).
Rearranging the two constraints, any threshold with false-positive rate FPR and false-negative
rate FNR certifies

    eps >= max(log((1 - delta - FPR) / FNR), log((1 - delta - FNR) / FPR)).

Using one-sided Clopper-Pearson upper bounds for FPR and FNR makes each certificate hold with
probability >= 1 - alpha; with ``correction="bonferroni"`` (default) alpha is split over the
2 x (number of thresholds) intervals, so the maximum over thresholds holds simultaneously. The
literature often picks the best threshold on the same data without correction
(``correction="none"``), which is optimistic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.special import ndtr, ndtri

from miaudit._runtime.io import save_figure
from miaudit.errors import ConfigError
from miaudit.privacy.accounting import check_delta
from miaudit.privacy.auditing import certified_epsilon, flat_scores
from miaudit.stats.metrics import clopper_pearson_upper

CORRECTIONS = ("bonferroni", "none")


def _check_epsilon(epsilon: float) -> float:
    if not epsilon >= 0:
        raise ConfigError(f"option 'epsilon' must be >= 0; got {epsilon!r}")
    return float(epsilon)


def roc_bound(fpr: np.ndarray | float, epsilon: float, delta: float) -> np.ndarray:
    """Largest TPR an (epsilon, delta)-DP mechanism allows at false-positive rate ``fpr``."""
    _check_epsilon(epsilon)
    if not 0 <= delta < 1:
        raise ConfigError(f"option 'delta' must be in [0, 1); got {delta!r}")
    fpr = np.asarray(fpr, dtype=float)
    if np.any((fpr < 0) | (fpr > 1)):
        raise ConfigError("false-positive rates must lie in [0, 1]")
    if math.isfinite(epsilon):
        first = math.exp(epsilon) * fpr + delta
    else:  # e^inf * 0 is undefined; the bound is delta at FPR 0 and 1 elsewhere
        first = np.where(fpr > 0, 1.0, delta)
    second = 1 - math.exp(-epsilon) * (1 - delta - fpr)
    return np.clip(np.minimum(first, second), 0.0, 1.0)


def gaussian_roc(fpr: np.ndarray | float, mu: float) -> np.ndarray:
    """ROC of the optimal test against mu-GDP / a Gaussian mechanism with sensitivity / noise
    std = mu: TPR = Phi(Phi^-1(FPR) + mu) (Dong, Roth & Su 2022, Def. 2.5)."""
    return ndtr(ndtri(np.asarray(fpr, dtype=float)) + mu)


# -- empirical lower bound ----------------------------------------------------------------------
@dataclass(frozen=True)
class EpsilonAudit:
    """Empirical epsilon lower bound beside the claimed epsilon."""

    epsilon_lower: float
    threshold: float  # the threshold achieving it (score >= threshold -> "member")
    fpr: float  # point estimates at that threshold
    fnr: float
    fpr_upper: float  # Clopper-Pearson upper bounds used
    fnr_upper: float
    delta: float
    confidence: float
    correction: str
    thresholds_tried: int
    claimed_epsilon: float | None
    verdict: str | None  # "contradicted" | "consistent" | None (no claim)

    def as_dict(self) -> dict[str, float | str | None]:
        return dict(self.__dict__)


def _default_thresholds(scores: np.ndarray, count: int) -> np.ndarray:
    """``count`` score quantiles, plus one above the maximum (no one flagged)."""
    quantiles = np.quantile(scores, np.linspace(0, 1, count - 1)) if count > 1 else scores[:0]
    return np.unique(np.append(quantiles, np.nextafter(scores.max(), np.inf)))


def empirical_epsilon(scores: np.ndarray, labels: np.ndarray, delta: float = 1e-5, *,
                      claimed_epsilon: float | None = None,
                      thresholds: Sequence[float] | np.ndarray | None = None,
                      num_thresholds: int = 100, alpha: float = 0.05,
                      correction: str = "bonferroni") -> EpsilonAudit:
    """Lower-bound epsilon from attack ``scores`` (higher = member) and membership ``labels``
    (1/True = member), at confidence 1 - ``alpha``; see the module docstring.

    ``thresholds`` default to ``num_thresholds`` quantiles of the scores. Arrays of any shape
    are flattened (e.g. (models, samples) from an audit)."""
    scores, labels = flat_scores(scores, labels, "labels")
    n_in, n_out = int(labels.sum()), int((~labels).sum())
    if n_in == 0 or n_out == 0:
        raise ConfigError("labels need both members (1) and non-members (0)")
    if not 0 <= delta < 1:
        raise ConfigError(f"option 'delta' must be in [0, 1); got {delta!r}")
    if not 0 < alpha < 1:
        raise ConfigError(f"option 'alpha' must be in (0, 1); got {alpha!r}")
    if correction not in CORRECTIONS:
        raise ConfigError(f"option 'correction' must be one of {', '.join(CORRECTIONS)}; "
                         f"got {correction!r}")
    grid = (_default_thresholds(scores, num_thresholds) if thresholds is None
            else np.unique(np.asarray(thresholds, dtype=float)))
    if grid.size == 0:
        raise ConfigError("option 'thresholds' is empty")
    level = alpha / (2 * grid.size) if correction == "bonferroni" else alpha
    # Counts at every threshold from sorted scores (vectorized; "member" iff score >= t).
    members, others = np.sort(scores[labels]), np.sort(scores[~labels])
    false_neg = np.searchsorted(members, grid, side="left")  # members below t
    false_pos = n_out - np.searchsorted(others, grid, side="left")  # non-members at/above t
    fpr_up = clopper_pearson_upper(false_pos, n_out, level)
    fnr_up = clopper_pearson_upper(false_neg, n_in, level)
    certified = certified_epsilon(fpr_up, fnr_up, delta)
    best = int(np.argmax(certified))
    lower = max(0.0, float(certified[best]))
    verdict = None
    if claimed_epsilon is not None:
        verdict = "contradicted" if lower > _check_epsilon(claimed_epsilon) else "consistent"
    return EpsilonAudit(
        epsilon_lower=lower, threshold=float(grid[best]), fpr=float(false_pos[best] / n_out),
        fnr=float(false_neg[best] / n_in), fpr_upper=float(fpr_up[best]),
        fnr_upper=float(fnr_up[best]), delta=float(delta), confidence=1 - alpha,
        correction=correction, thresholds_tried=int(grid.size),
        claimed_epsilon=None if claimed_epsilon is None else float(claimed_epsilon),
        verdict=verdict)


# -- Figure 5: DP bounds over empirical ROCs ----------------------------------------------------
def plot_roc_bounds(curves: Mapping[str, tuple[np.ndarray, np.ndarray]],
                    epsilons: Sequence[float], delta: float, path: str | Path, *,
                    log_scale: bool = True, title: str | None = None) -> Path:
    """Empirical ROCs ``{name: (fpr, tpr)}`` under the (epsilon, ``delta``) bound curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    check_delta(delta)
    low = 1e-5 if log_scale else 0.0
    grid = np.logspace(-5, 0, 400) if log_scale else np.linspace(0, 1, 400)
    fig, axis = plt.subplots(figsize=(4.6, 4.2))
    for eps in epsilons:
        axis.plot(grid, roc_bound(grid, eps, delta), linestyle="--",
                  label=f"DP bound eps = {eps:g}")
    for name, (fpr, tpr) in curves.items():
        axis.plot(np.clip(fpr, low, 1), np.clip(tpr, low, 1), label=name)
    axis.plot([low, 1], [low, 1], color="grey", linewidth=0.8)
    if log_scale:
        axis.set_xscale("log")
        axis.set_yscale("log")
    axis.set_xlim(low, 1)
    axis.set_ylim(low, 1)
    axis.set_xlabel("false-positive rate")
    axis.set_ylabel("true-positive rate")
    axis.set_title(title or f"ROC under (eps, delta = {delta:g})-DP", fontsize=9)
    axis.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path, dpi=150)
