"""Membership-inference metrics: exact ROC, low-FPR TPR with confidence intervals, aggregates.

Conventions (Carlini et al. 2022, "Membership Inference Attacks From First Principles"):

* Scores: higher = more likely a member. ``is_member`` is the ground truth.
* ROC: exact, every distinct score is a threshold; tied scores form one ROC point
  (scikit-learn's ``roc_curve`` with ``drop_intermediate=False``).
* TPR at FPR level: interpolation-free, the largest TPR among thresholds whose FPR does not
  exceed the level. ``tpr@<level>_measurable`` is False where the level cannot be measured:
  below 1/n with n non-members (the TPR there is a TPR at zero FPR), or where only the
  "nobody" threshold is within budget (the top tie group alone exceeds it, so a TPR of 0 is
  forced by ties). Readers show such a cell as n/m (``Results.metric`` returns None).
* Balanced ("inference") accuracy: the best threshold's (TPR + TNR) / 2, as in LiRA's code.
* Confidence intervals on TPR@FPR here: exact Clopper-Pearson 95% intervals for the member
  count above the chosen threshold, conditional on that threshold and on the trained models
  (the score stage keeps them as ``tpr@<level>_ci_conditional``; its ``tpr@<level>_ci`` is the
  crossed bootstrap of :mod:`miaudit.stats.intervals`, which covers a rerun).
  ``summarize(..., bootstrap=B)`` adds ``*_ci_boot``: percentile intervals
  from B stratified bootstrap resamples of members and non-members, which re-choose the
  threshold each time and so include both sources of noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import betaincinv

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


def _descending(scores: np.ndarray, is_member: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-scores, kind="stable")
    return scores[order], is_member[order]


def _roc_of_sorted(scores: np.ndarray,
                   is_member: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact ROC of scores already sorted in decreasing order.

    Hand-written rather than scikit-learn's ``roc_curve`` (whose output it reproduces exactly,
    pinned in the tests) because an audit computes ~450 ROCs and sklearn's input validation
    cost more than the ROCs themselves; and because ``per_class`` reuses one sort for every
    class (a class's rows, taken in the pooled order, are already sorted).
    """
    last_of_tie = np.r_[np.flatnonzero(np.diff(scores)), len(scores) - 1]
    true_pos = np.cumsum(is_member)[last_of_tie]
    false_pos = last_of_tie + 1 - true_pos
    fpr = np.r_[0, false_pos] / false_pos[-1]
    tpr = np.r_[0, true_pos] / true_pos[-1]
    return fpr, tpr, np.r_[np.inf, scores[last_of_tie]]


def roc_curve(scores: Any, is_member: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact ROC: (fpr, tpr, thresholds), one point per distinct score plus (0, 0) first.

    Point k predicts "member" for every score >= thresholds[k] (thresholds[0] = inf: nobody).
    Intermediate collinear points are kept (as scikit-learn's ``drop_intermediate=False``)
    because dropping them would change TPR@FPR.
    """
    return _roc_of_sorted(*_descending(*_check(scores, is_member)))


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


@dataclass(frozen=True)
class MetricKeys:
    """The results keys of one metric (``"auc"``, ``"tpr@0.1%"``): the one place that spells
    the suffix grammar of results.json's ``pooled`` mappings. ``value``: the point estimate;
    ``ci``: its interval (what ``ci_method`` says it covers); ``conditional``: the exact interval
    conditional on the trained models; ``simultaneous``: the band over all attacks;
    ``measurable``: False when no threshold reaches the FPR level."""

    name: str

    @property
    def value(self) -> str:
        return self.name

    @property
    def ci(self) -> str:
        return f"{self.name}{CI_SUFFIX}"

    @property
    def conditional(self) -> str:
        return f"{self.ci}_conditional"

    @property
    def simultaneous(self) -> str:
        return f"{self.ci}_simultaneous"

    @property
    def measurable(self) -> str:
        return f"{self.name}{MEASURABLE_SUFFIX}"

    def interval(self, kind: str = "") -> str:
        """The key of the interval of ``kind``: "" (ci), "conditional" or "simultaneous"."""
        return {"": self.ci, "conditional": self.conditional,
                "simultaneous": self.simultaneous}[kind]

    @classmethod
    def of_interval(cls, key: str) -> MetricKeys | None:
        """The metric whose plain interval key is ``key`` (``"tpr@1%_ci"``), else None."""
        return cls(key.removesuffix(CI_SUFFIX)) if key.endswith(CI_SUFFIX) else None

    @classmethod
    def of_measurable(cls, key: str) -> MetricKeys | None:
        """The metric whose measurability key is ``key``, else None."""
        return cls(key.removesuffix(MEASURABLE_SUFFIX)) if key.endswith(MEASURABLE_SUFFIX) \
            else None


CI_SUFFIX = "_ci"
MEASURABLE_SUFFIX = "_measurable"


def is_measurable(pooled: dict[str, Any], key: str) -> bool:
    """Whether ``pooled`` measures ``key`` (a missing flag means measurable, as AUC)."""
    return pooled.get(MetricKeys(key).measurable) is not False


def tpr_key(level: float) -> str:
    """The results key of the TPR at an FPR level: 1e-3 -> "tpr@0.1%"."""
    return f"tpr@{level_name(level)}"


# The headline metrics: the simultaneous bands over attacks (the report's strongest attack) and
# the paired differences (of two attacks, or of two audits with the same memberships).
HEADLINE_KEYS = (tpr_key(1e-3), tpr_key(1e-2), "auc")


def clopper_pearson_upper(successes: Any, trials: Any, alpha: float) -> np.ndarray:
    """One-sided (1 - alpha) Clopper-Pearson upper bound of a binomial proportion, vectorized:
    the (1 - alpha) quantile of Beta(k + 1, n - k), and 1 when k = n (Clopper & Pearson 1934).
    The one definition the two-sided intervals below and the privacy bounds share."""
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    if np.any(n < 1):
        raise ValueError(f"need at least one trial; got {trials}")
    # b = 0 (k = n) is outside the beta family; those entries are 1
    upper = betaincinv(k + 1.0, np.maximum(n - k, 1.0), 1.0 - alpha)
    return np.where(k >= n, 1.0, upper)


def clopper_pearson_intervals(successes: Any, trials: Any,
                              confidence: float = CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """Exact (Clopper & Pearson 1934) two-sided intervals for binomial proportions, vectorized.

    Closed form via beta quantiles: lower = B^-1(alpha/2; k, n - k + 1) (0 when k = 0), upper
    = B^-1(1 - alpha/2; k + 1, n - k) (1 when k = n), alpha = 1 - confidence; the same
    interval as scipy's ``binomtest(k, n).proportion_ci(method="exact")`` (pinned in the
    tests), which finds it by root-finding at ~1 ms per call. ``betaincinv`` is the beta
    quantile function (``scipy.stats.beta.ppf`` without its per-call argument handling).
    """
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(trials, dtype=np.float64)
    if np.any(n < 1) or np.any(k < 0) or np.any(k > n):
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {k}, {n}")
    alpha = 1.0 - confidence
    # a = 0 (k = 0) is outside the beta family; those entries are 0
    lower = betaincinv(np.maximum(k, 1.0), n - k + 1.0, alpha / 2.0)
    return np.where(k == 0, 0.0, lower), clopper_pearson_upper(k, n, alpha / 2.0)


def clopper_pearson(successes: int, trials: int, confidence: float = CONFIDENCE) -> list[float]:
    """One exact binomial interval [lo, hi] (see :func:`clopper_pearson_intervals`)."""
    lower, upper = clopper_pearson_intervals(int(successes), int(trials), confidence)
    return [float(lower), float(upper)]


def summarize(scores: Any, is_member: Any, fpr_levels: Sequence[float] = DEFAULT_FPR_LEVELS,
              bootstrap: int = 0, seed: int = 0) -> dict[str, Any]:
    """AUC, balanced accuracy, TPR at each FPR level with 95% intervals, and the counts.

    Keys: ``auc``, ``balanced_accuracy``, ``tpr@<level>``, ``tpr@<level>_ci`` ([lo, hi],
    exact Clopper-Pearson), ``fpr@<level>`` (the FPR actually reached at that threshold),
    ``tpr@<level>_measurable`` (bool, see :func:`_summary_of_sorted`), ``n_members``,
    ``n_nonmembers``; with ``bootstrap > 0`` also ``tpr@<level>_ci_boot`` and
    ``auc_ci_boot`` (percentile intervals over stratified resamples). Plain Python types only.
    """
    scores, is_member = _check(scores, is_member)
    result = _summary_of_sorted(*_descending(scores, is_member), fpr_levels)
    if bootstrap > 0:
        counts = {key: result.pop(key) for key in ("n_members", "n_nonmembers")}
        result.update(_bootstrap(scores, is_member, fpr_levels, bootstrap, seed))
        result.update(counts)  # counts stay the last keys, as before
    return result


def _summary_of_sorted(scores: np.ndarray, is_member: np.ndarray,
                       fpr_levels: Sequence[float]) -> dict[str, Any]:
    """``summarize`` of scores sorted in decreasing order (no bootstrap).

    ``tpr@<level>_measurable`` is False when the first real ROC point (the top tie group:
    everyone holding the highest score) already exceeds the FPR level, so that the only
    threshold within budget is "nobody" and TPR = 0 says nothing about the attack: with
    scores taking few distinct values (Attack-R) the top group can hold many non-members. It
    is also False at every level below 1 / n_nonmembers, the sample-size limit of Carlini et
    al.'s low-FPR metric: no false positive is allowed there, so the TPR is one at zero FPR.
    The number itself stays in the summary (0.0, or that zero-FPR TPR) so that arrays of
    summaries keep their shape; every reader shows the cell as not measurable.
    """
    fpr, tpr, _ = _roc_of_sorted(scores, is_member)
    n_members = int(is_member.sum())
    n_nonmembers = int(len(is_member) - n_members)
    result: dict[str, Any] = {
        "auc": float(np.trapezoid(tpr, fpr)),
        "balanced_accuracy": float(np.max((tpr + 1.0 - fpr) / 2.0)),
    }
    picked = [_level_index(fpr, tpr, level) for level in fpr_levels]
    lower, upper = clopper_pearson_intervals(np.round(tpr[picked] * n_members), n_members)
    for position, (level, index) in enumerate(zip(fpr_levels, picked)):
        key = f"tpr@{level_name(level)}"
        result[key] = float(tpr[index])
        result[MetricKeys(key).ci] = [float(lower[position]), float(upper[position])]
        result[f"fpr@{level_name(level)}"] = float(fpr[index])
        result[MetricKeys(key).measurable] = bool(fpr[1] <= level and level * n_nonmembers >= 1)
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
        fpr, tpr, _ = _roc_of_sorted(*_descending(sample, labels))
        draws["auc"].append(np.trapezoid(tpr, fpr))
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
    skipped; a key missing from some targets is aggregated over those that have it; a TPR
    level not measurable for some target has no aggregate (a mean of zero-FPR TPRs would
    read as a TPR at that level)."""
    if not per_target:
        raise ValueError("aggregate needs at least one per-target summary")
    keys = [k for k in per_target[0] if _is_number(per_target[0][k])
            and all(is_measurable(d, k) for d in per_target)]
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
    non-members has only its counts (no metric is defined there).

    The scores are sorted once: a class's rows, taken in the pooled decreasing order, are
    already sorted, so each class's ROC needs no sort of its own."""
    scores = np.asarray(scores, dtype=np.float64)
    is_member = np.asarray(is_member).astype(bool)
    labels = np.asarray(labels)
    if labels.shape != scores.shape:
        raise ValueError(f"labels {labels.shape} do not match scores {scores.shape}")
    if not np.isfinite(scores).all():
        raise ValueError(f"scores contain {int((~np.isfinite(scores)).sum())} NaN/inf values")
    order = np.argsort(-scores, kind="stable")
    scores, is_member, labels = scores[order], is_member[order], labels[order]
    breakdown: dict[int, dict[str, Any]] = {}
    for label in np.unique(labels):  # loop over classes, each summary vectorized
        rows = labels == label
        members = is_member[rows]
        if members.all() or not members.any():
            breakdown[int(label)] = {"n_members": int(members.sum()),
                                     "n_nonmembers": int((~members).sum())}
        else:
            breakdown[int(label)] = _summary_of_sorted(scores[rows], members, fpr_levels)
    return breakdown
