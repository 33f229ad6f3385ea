"""Dataset usage inference: how much of a candidate set did a model train on?

DUCI (Tong, Ye, Zarifzadeh & Shokri, ICLR 2025, "How much of my dataset did you use?
Quantitative data usage inference in machine learning"). A membership attack's binary guesses
m_i on the candidate set X are biased estimates of the memberships; debiased by the attack's
error rates,

    p_i = (m_i - P(m_i = 1 | m_i* = 0)) / (P(m_i = 1 | m_i* = 1) - P(m_i = 1 | m_i* = 0)),

each p_i is an unbiased estimate of record i's membership, and their mean over X,

    p = (1 / |X|) sum_i p_i,

estimates the fraction of X used (the paper's debiased estimator, Sec. 4; its documented form
in ML Privacy Meter's documentation/duci.md). As in the authors' reference implementation
(ML Privacy Meter, modules/duci), the error rates are measured on the **reference models**:
the attack's scores of the reference models (each scored as a target, its memberships known)
give one ROC; its threshold maximizing TPR - FPR (Youden) turns every score into a guess, and
that ROC point's TPR and FPR debias the target's guesses.

Here every model of a rotation audit is in turn the target, the others its references (their
stored scores are the attack's scores of each model as a target). A target's estimate is

    p_t = (mean_{i in X} [s_{t,i} >= theta_t] - FPR_t) / (TPR_t - FPR_t),

and the pooled estimate is the mean over targets, with a 95% interval from the crossed
bootstrap of :mod:`miaudit.intervals` (targets and samples resampled together; each replicate
recomputes the guess rate on X and the references' TPR and FPR at the fixed threshold theta_t
on the resampled samples). The threshold is not re-chosen in the replicates: a Youden
threshold moves little, and re-running one ROC per target per replicate would cost T x B sorts.

Known truth: candidate sets of chosen fractions built from each target's memberships
(:func:`evaluate_usage`) give the estimator's bias, its absolute error per target (what the
paper reports) and whether the pooled interval covers the truth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from miaudit import metrics
from miaudit.intervals import ROUNDS, Resamples, percentile_interval

FRACTIONS = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)
USAGE_FILE = "usage.json"


@dataclass
class Debiasing:
    """Per target: the Youden threshold on its references and that point's rates."""

    thresholds: np.ndarray  # (T,)
    tpr: np.ndarray  # (T,)
    fpr: np.ndarray  # (T,)


def youden_point(scores: np.ndarray, members: np.ndarray) -> tuple[float, float, float]:
    """(threshold, TPR, FPR) of the ROC point of ``scores`` / ``members`` (any shape) with the
    largest TPR - FPR (the first such point, i.e. the highest threshold, on ties)."""
    fpr, tpr, thresholds = metrics.roc_curve(np.ravel(scores), np.ravel(members))
    best = int(np.argmax(tpr - fpr))
    return float(thresholds[best]), float(tpr[best]), float(fpr[best])


def debiasing(scores: np.ndarray, members: np.ndarray) -> Debiasing:
    """Each target's threshold and rates from the other models (its references)."""
    scores = np.asarray(scores, dtype=np.float64)
    members = np.asarray(members, dtype=bool)
    num_targets = len(scores)
    if num_targets < 2:
        raise ValueError("dataset usage needs at least 2 models: the references measure the "
                         "attack's error rates")
    points = [youden_point(np.delete(scores, t, 0), np.delete(members, t, 0))
              for t in range(num_targets)]
    return Debiasing(*(np.array(column) for column in zip(*points, strict=True)))


def _candidate_mask(candidates: np.ndarray | Sequence[np.ndarray], shape: tuple[int, int]
                    ) -> np.ndarray:
    """(T, N) bool: the candidate set of each target (one set for all, or one per target)."""
    num_targets, num_samples = shape
    if isinstance(candidates, np.ndarray) and candidates.ndim == 1:
        candidates = [candidates] * num_targets
    mask = np.zeros(shape, dtype=bool)
    if len(candidates) != num_targets:
        raise ValueError(f"{len(candidates)} candidate sets for {num_targets} targets")
    for t, chosen in enumerate(candidates):
        chosen = np.asarray(chosen, dtype=np.int64)
        if chosen.size == 0 or chosen.min() < 0 or chosen.max() >= num_samples:
            raise ValueError(f"candidate set {t} must be non-empty positions in "
                             f"0..{num_samples - 1}")
        mask[t, chosen] = True
    return mask


def estimate_usage(scores: np.ndarray, members: np.ndarray,
                   candidates: np.ndarray | Sequence[np.ndarray], *,
                   rounds: int = ROUNDS, seed: int = 0,
                   rates: Debiasing | None = None) -> dict:
    """DUCI on (T, N) ``scores`` / ``members``: ``candidates`` are sample positions, one array
    for every target or one per target. Returns ``per_target`` estimates, ``true_fraction``
    per target (the audit knows the memberships), the pooled ``estimate`` (mean over targets),
    its crossed-bootstrap ``interval``, and the debiasing thresholds and rates."""
    scores = np.asarray(scores, dtype=np.float64)
    members = np.asarray(members, dtype=bool)
    rates = rates or debiasing(scores, members)
    mask = _candidate_mask(candidates, scores.shape)
    flags = scores >= rates.thresholds[:, None]  # row t: target t at its own threshold
    per_target = _debiased(mask.sum(1), (mask & flags).sum(1), rates.tpr, rates.fpr)
    truth = (mask & members).sum(1) / mask.sum(1)
    replicates = _replicates(scores, members, mask, rates, rounds, seed)
    return {
        "estimate": float(per_target.mean()), "interval": percentile_interval(replicates),
        "per_target": _listed(per_target), "true_fraction": truth.tolist(),
        "thresholds": rates.thresholds.tolist(), "tpr": rates.tpr.tolist(),
        "fpr": rates.fpr.tolist(), "candidates": int(mask.sum(1).max()),
    }


def _listed(values: np.ndarray) -> list[float | None]:
    """For JSON: NaN (no debiasing possible) as None."""
    return [float(v) if np.isfinite(v) else None for v in values]


def _debiased(size: np.ndarray, flagged: np.ndarray, tpr: np.ndarray,
              fpr: np.ndarray) -> np.ndarray:
    """The paper's debiased mean: (guess rate - FPR) / (TPR - FPR); NaN where TPR = FPR (the
    attack tells nothing apart: no debiasing exists)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tpr > fpr, (flagged / size - fpr) / (tpr - fpr), np.nan)


def _replicates(scores: np.ndarray, members: np.ndarray, mask: np.ndarray, rates: Debiasing,
                rounds: int, seed: int) -> np.ndarray:
    """(B,) pooled estimates of the crossed bootstrap: per replicate, the samples' weights
    reweigh each target's guess rate on its candidates and its references' TPR and FPR (at the
    fixed thresholds), and the targets' weights reweigh the mean over targets."""
    num_targets, num_samples = scores.shape
    resamples = Resamples.draw(num_targets, num_samples, rounds, seed)
    columns = []  # per target: candidates, flagged candidates, refs' IN, flagged IN, OUT, ...
    for t in range(num_targets):
        refs = np.arange(num_targets) != t
        flags = scores[refs] >= rates.thresholds[t]
        ins = members[refs]
        columns += [mask[t], mask[t] & (scores[t] >= rates.thresholds[t]), ins.sum(0),
                    (flags & ins).sum(0), (~ins).sum(0), (flags & ~ins).sum(0)]
    # one product: (B, N) sample weights x (N, 6T) per-sample counts
    sums = resamples.samples.astype(np.float64) @ np.array(columns, dtype=np.float64).T
    size, flagged, ins, flagged_in, outs, flagged_out = (
        sums[:, k::6] for k in range(6))
    with np.errstate(invalid="ignore", divide="ignore"):
        tpr, fpr = flagged_in / ins, flagged_out / outs
        per_target = np.where((tpr > fpr) & (size > 0), (flagged / size - fpr) / (tpr - fpr),
                              np.nan)
    weights = resamples.targets.astype(np.float64) * np.isfinite(per_target)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nansum(weights * np.nan_to_num(per_target), 1) / weights.sum(1)


def known_fraction_sets(members: np.ndarray, fraction: float, rng: np.random.Generator
                        ) -> list[np.ndarray]:
    """Per target, a candidate set of size min(#IN, #OUT) whose share of the target's members
    is ``fraction`` (rounded to whole records): the known truth for :func:`evaluate_usage`."""
    sets = []
    for row in np.asarray(members, dtype=bool):
        ins, outs = np.flatnonzero(row), np.flatnonzero(~row)
        size = min(len(ins), len(outs))
        used = int(round(fraction * size))
        sets.append(np.sort(np.r_[rng.choice(ins, used, replace=False),
                                  rng.choice(outs, size - used, replace=False)]))
    return sets


@dataclass
class UsageCheck:
    """DUCI on candidate sets of one known fraction."""

    fraction: float
    estimate: float
    interval: list[float]
    covered: bool
    bias: float  # pooled estimate - fraction
    mean_absolute_error: float  # over targets: |p_t - fraction|
    per_target: list[float]


def evaluate_usage(scores: np.ndarray, members: np.ndarray,
                   fractions: Sequence[float] = FRACTIONS, *, rounds: int = ROUNDS,
                   seed: int = 0) -> dict:
    """DUCI evaluated on candidate sets of known ``fractions`` built from each target's
    memberships: per fraction the pooled estimate, its interval, whether it covers the truth,
    the bias and the per-target mean absolute error; overall the MAE over targets and
    fractions and the share of fractions covered."""
    rates = debiasing(scores, members)
    rng = np.random.default_rng(seed)
    checks = []
    for k, fraction in enumerate(fractions):
        sets = known_fraction_sets(members, fraction, rng)
        found = estimate_usage(scores, members, sets, rounds=rounds, seed=seed + k, rates=rates)
        truth = np.array(found["true_fraction"])
        per_target = np.array(found["per_target"])
        low, high = found["interval"]
        checks.append(UsageCheck(
            float(fraction), found["estimate"], found["interval"],
            bool(low <= truth.mean() <= high), found["estimate"] - float(truth.mean()),
            float(np.nanmean(np.abs(per_target - truth))), _listed(per_target)))
    return {
        "method": "DUCI (Tong et al., ICLR 2025): references' Youden threshold, debiased by "
                  "their TPR and FPR; pooled over targets, crossed-bootstrap 95% interval",
        "thresholds": rates.thresholds.tolist(), "tpr": rates.tpr.tolist(),
        "fpr": rates.fpr.tolist(),
        "mean_absolute_error": float(np.mean([c.mean_absolute_error for c in checks])),
        "coverage": float(np.mean([c.covered for c in checks])),
        "fractions": [asdict(c) for c in checks],
    }


SELECTION_ROUNDS = 200  # bootstrap rounds while comparing attacks (the chosen one gets ROUNDS)


def usage_report(scores: dict[str, np.ndarray], members: np.ndarray,
                 fractions: Sequence[float] = FRACTIONS, *, seed: int = 0) -> dict:
    """DUCI with every attack of a run on the known-fraction candidate sets; the attack with
    the smallest mean absolute error is ``chosen`` and evaluated again with the full bootstrap
    (``evaluation``). The attacks differ a lot: an attack whose scores shift from model to
    model (e.g. RMIA's, which depend on how confident each model is overall) breaks the
    premise that the references' error rates are the target's."""
    members = np.asarray(members, dtype=bool)
    errors = {}
    for label, values in scores.items():
        if not np.isfinite(values).all():
            continue
        found = evaluate_usage(values, members, fractions, rounds=SELECTION_ROUNDS, seed=seed)
        errors[label] = {"mean_absolute_error": found["mean_absolute_error"],
                         "coverage": found["coverage"]}
    if not errors:
        raise ValueError("no attack has finite scores for every model")
    chosen = min(errors, key=lambda label: errors[label]["mean_absolute_error"])
    return {"chosen": chosen, "attacks": errors,
            "evaluation": evaluate_usage(scores[chosen], members, fractions, seed=seed)}
