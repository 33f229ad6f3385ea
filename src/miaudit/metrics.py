"""Membership-inference metrics: exact ROC, low-FPR TPR with confidence intervals, aggregates.

Conventions (Carlini et al. 2022, "Membership Inference Attacks From First Principles"):

* Scores: higher = more likely a member. ``is_member`` is the ground truth.
* ROC: exact, every distinct score is a threshold; tied scores form one ROC point
  (scikit-learn's ``roc_curve`` with ``drop_intermediate=False``).
* TPR at FPR level: interpolation-free, the largest TPR among thresholds whose FPR does not
  exceed the level. With n non-members, a level below 1/n allows no false positive at all.
* Balanced ("inference") accuracy: the best threshold's (TPR + TNR) / 2, as in LiRA's code.
* Confidence intervals on TPR@FPR: exact Clopper-Pearson 95% intervals for the member count
  above the chosen threshold, conditional on that threshold (they do not include the noise of
  the FPR estimate). ``summarize(..., bootstrap=B)`` adds ``*_ci_boot``: percentile intervals
  from B stratified bootstrap resamples of members and non-members, which re-choose the
  threshold each time and so include both sources of noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import binomtest
from sklearn.metrics import auc as _trapezoid_auc
from sklearn.metrics import roc_curve as _sk_roc_curve

DEFAULT_FPR_LEVELS = (1e-5, 1e-3, 1e-2)
CONFIDENCE = 0.95


def _check(scores: Any, is_member: Any) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores, dtype=np.float64)
    is_member = np.asarray(is_member)
    if scores.ndim != 1 or is_member.shape != scores.shape:
        raise ValueError(f"scores {scores.shape} and is_member {is_member.shape} must be equal "
                         "1-D shapes")
    if is_member.dtype != bool:
        if not np.isin(is_member, (0, 1)).all():
            raise ValueError("is_member must be boolean (or 0/1)")
        is_member = is_member.astype(bool)
    if not np.isfinite(scores).all():
        raise ValueError(f"scores contain {int((~np.isfinite(scores)).sum())} NaN/inf values")
    if is_member.all() or not is_member.any():
        raise ValueError("is_member needs at least one member and one non-member")
    return scores, is_member


def roc_curve(scores: Any, is_member: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact ROC: (fpr, tpr, thresholds), one point per distinct score plus (0, 0) first.

    Point k predicts "member" for every score >= thresholds[k]. Intermediate collinear points
    are kept (``drop_intermediate=False``) because dropping them would change TPR@FPR.
    """
    scores, is_member = _check(scores, is_member)
    fpr, tpr, thresholds = _sk_roc_curve(is_member, scores, drop_intermediate=False)
    return fpr, tpr, thresholds


def tpr_at_fpr(fpr: np.ndarray, tpr: np.ndarray, level: float) -> float:
    """The largest TPR whose FPR does not exceed ``level`` (no interpolation)."""
    fpr, tpr = np.asarray(fpr), np.asarray(tpr)
    allowed = fpr <= level
    return float(tpr[allowed].max()) if allowed.any() else 0.0


def _level_index(fpr: np.ndarray, tpr: np.ndarray, level: float) -> int:
    """Index of the ROC point that ``tpr_at_fpr`` picks (first of the maximal ones)."""
    candidates = np.where(fpr <= level, tpr, -1.0)
    return int(np.argmax(candidates))


def level_name(level: float) -> str:
    """1e-3 -> "0.1%", 1e-5 -> "0.001%", 1e-2 -> "1%"."""
    return f"{level * 100:g}%"


def clopper_pearson(successes: int, trials: int, confidence: float = CONFIDENCE) -> list[float]:
    """Exact binomial interval for a proportion (scipy's ``binomtest``, method 'exact')."""
    interval = binomtest(int(successes), int(trials)).proportion_ci(
        confidence_level=confidence, method="exact")
    return [float(interval.low), float(interval.high)]


def summarize(scores: Any, is_member: Any, fpr_levels: Sequence[float] = DEFAULT_FPR_LEVELS,
              bootstrap: int = 0, seed: int = 0) -> dict[str, Any]:
    """AUC, balanced accuracy, TPR at each FPR level with 95% intervals, and the counts.

    Keys: ``auc``, ``balanced_accuracy``, ``tpr@<level>``, ``tpr@<level>_ci`` ([lo, hi],
    exact Clopper-Pearson), ``fpr@<level>`` (the FPR actually reached at that threshold),
    ``n_members``, ``n_nonmembers``; with ``bootstrap > 0`` also ``tpr@<level>_ci_boot`` and
    ``auc_ci_boot`` (percentile intervals over stratified resamples). Plain Python types only.
    """
    scores, is_member = _check(scores, is_member)
    fpr, tpr, _ = roc_curve(scores, is_member)
    n_members, n_nonmembers = int(is_member.sum()), int((~is_member).sum())
    result: dict[str, Any] = {
        "auc": float(_trapezoid_auc(fpr, tpr)),
        "balanced_accuracy": float(np.max((tpr + 1.0 - fpr) / 2.0)),
    }
    for level in fpr_levels:
        key = f"tpr@{level_name(level)}"
        index = _level_index(fpr, tpr, level)
        result[key] = float(tpr[index])
        result[f"{key}_ci"] = clopper_pearson(round(tpr[index] * n_members), n_members)
        result[f"fpr@{level_name(level)}"] = float(fpr[index])
    if bootstrap > 0:
        result.update(_bootstrap(scores, is_member, fpr_levels, bootstrap, seed))
    result["n_members"] = n_members
    result["n_nonmembers"] = n_nonmembers
    return result


def _bootstrap(scores: np.ndarray, is_member: np.ndarray, fpr_levels: Sequence[float],
               rounds: int, seed: int) -> dict[str, list[float]]:
    """Stratified bootstrap (members and non-members resampled separately, sizes kept)."""
    rng = np.random.default_rng(seed)
    members, nonmembers = scores[is_member], scores[~is_member]
    labels = np.r_[np.ones(len(members), bool), np.zeros(len(nonmembers), bool)]
    draws: dict[str, list[float]] = {f"tpr@{level_name(lv)}": [] for lv in fpr_levels}
    draws["auc"] = []
    for _ in range(rounds):  # a loop over resamples; each resample is vectorized
        sample = np.r_[rng.choice(members, len(members)), rng.choice(nonmembers, len(nonmembers))]
        fpr, tpr, _ = _sk_roc_curve(labels, sample, drop_intermediate=False)
        draws["auc"].append(_trapezoid_auc(fpr, tpr))
        for level in fpr_levels:
            draws[f"tpr@{level_name(level)}"].append(tpr_at_fpr(fpr, tpr, level))
    tail = (1.0 - CONFIDENCE) / 2.0 * 100.0
    return {f"{key}_ci_boot": [float(v) for v in np.percentile(values, [tail, 100.0 - tail])]
            for key, values in draws.items()}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def aggregate(per_target: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean, sample standard deviation (ddof=1; 0 for one target), min and max over targets of
    every numeric key (the rotation protocol's spread). Non-numeric keys (intervals) are
    skipped; a key missing from some targets is aggregated over those that have it."""
    if not per_target:
        raise ValueError("aggregate needs at least one per-target summary")
    keys = [k for k in per_target[0] if _is_number(per_target[0][k])]
    stats: dict[str, dict[str, float]] = {"mean": {}, "std": {}, "min": {}, "max": {}}
    for key in keys:
        values = np.array([float(d[key]) for d in per_target if _is_number(d.get(key))])
        stats["mean"][key] = float(values.mean())
        stats["std"][key] = float(values.std(ddof=1)) if len(values) > 1 else 0.0
        stats["min"][key] = float(values.min())
        stats["max"][key] = float(values.max())
    return stats


def per_class(scores: Any, is_member: Any, labels: Any,
              fpr_levels: Sequence[float] = DEFAULT_FPR_LEVELS) -> dict[int, dict[str, Any]]:
    """``summarize`` restricted to each class. A class without members or without
    non-members has only its counts (no metric is defined there)."""
    scores = np.asarray(scores, dtype=np.float64)
    is_member = np.asarray(is_member).astype(bool)
    labels = np.asarray(labels)
    if labels.shape != scores.shape:
        raise ValueError(f"labels {labels.shape} do not match scores {scores.shape}")
    breakdown: dict[int, dict[str, Any]] = {}
    for label in np.unique(labels):  # loop over classes, each summary vectorized
        rows = labels == label
        members = is_member[rows]
        if members.all() or not members.any():
            breakdown[int(label)] = {"n_members": int(members.sum()),
                                     "n_nonmembers": int((~members).sum())}
        else:
            breakdown[int(label)] = summarize(scores[rows], members, fpr_levels)
    return breakdown
