"""Normal-approximation intervals for results that keep only per-target summaries, not the
scores (e.g. committed results.json files without kept scores): wider than the crossed
bootstrap of :mod:`miaudit.stats.intervals` by design; coverage measured beside it in
``benchmarks/interval_coverage.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from miaudit.stats.intervals import CONFIDENCE


def from_target_summaries(center: float, values: Sequence[float],
                          variances: Sequence[float],
                          confidence: float = CONFIDENCE) -> list[float]:
    """A normal interval around ``center`` (the pooled estimate) for results that keep only
    per-target summaries, not the scores (e.g. committed results.json files): the variance is
    the between-target variance of the per-target ``values`` over T (training randomness and
    each target's own sampling noise) plus the mean per-target sampling variance
    ``variances`` (binomial for a TPR, Hanley-McNeil for an AUC), counted in full as if the
    sample draw were shared perfectly by all targets. That last term is an upper bound on
    the shared-sample component, so the interval errs on the wide side; its coverage is
    measured beside the bootstrap's in ``benchmarks/interval_coverage.py``."""
    from scipy.stats import norm

    values = np.asarray(values, dtype=float)
    between = values.var(ddof=1) / len(values) if len(values) > 1 else 0.0
    half = norm.ppf(0.5 + confidence / 2.0) * np.sqrt(between + np.mean(variances))
    return [float(max(center - half, 0.0)), float(min(center + half, 1.0))]


def binomial_variance(rate: float, trials: int) -> float:
    """A rate's sampling variance over ``trials`` Bernoulli trials."""
    return rate * (1.0 - rate) / trials


def hanley_mcneil_variance(auc: float, positives: int, negatives: int) -> float:
    """The AUC's variance under sampling of members and non-members (Hanley & McNeil 1982,
    Radiology 143, Eq. 2)."""
    q1, q2 = auc / (2 - auc), 2 * auc ** 2 / (1 + auc)
    return max((auc * (1 - auc) + (positives - 1) * (q1 - auc ** 2)
                + (negatives - 1) * (q2 - auc ** 2)) / (positives * negatives), 0.0)


def target_summary_interval(pooled: dict, per_target: Sequence[dict], key: str,
                            confidence: float = CONFIDENCE) -> list[float]:
    """:func:`from_target_summaries` of ``key`` ("tpr@<level>" or "auc") from a results.json
    attack's pooled and per-target summaries."""
    values = [float(entry[key]) for entry in per_target]
    if key == "auc":
        variances = [hanley_mcneil_variance(e["auc"], e["n_members"], e["n_nonmembers"])
                     for e in per_target]
    else:
        variances = [binomial_variance(e[key], e["n_members"]) for e in per_target]
    return from_target_summaries(float(pooled[key]), values, variances, confidence)
