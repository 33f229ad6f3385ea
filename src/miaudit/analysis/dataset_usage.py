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
bootstrap of :mod:`miaudit.stats.intervals` (targets and samples resampled together; each replicate
recomputes the guess rate on X and the references' TPR and FPR at the fixed threshold theta_t
on the resampled samples; the candidate sets of one evaluation share the replicates). The
threshold is not re-chosen in the replicates: a Youden threshold moves little, and re-running
one ROC per target per replicate would cost T x B sorts.

Known truth: candidate sets of chosen fractions built from each target's memberships
(:func:`evaluate_usage`) give the estimator's bias, its absolute error per target (what the
paper reports) and whether the pooled interval covers the truth.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from miaudit.stats import metrics
from miaudit.stats.intervals import ROUNDS, Resamples, percentile_interval

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
    """Each target's threshold and rates from the other models (its references): per target
    the :func:`youden_point` of the references' pooled scores. The cells are sorted once; a
    target's reference ROC is the cumulative member and non-member counts in that order with
    its own row left out (a value held by the target alone repeats the previous point, which
    the first-maximum rule never picks over it)."""
    scores = np.asarray(scores, dtype=np.float64)
    members = np.asarray(members, dtype=bool)
    num_targets, num_samples = scores.shape
    if num_targets < 2:
        raise ValueError("dataset usage needs at least 2 models: the references measure the "
                         "attack's error rates")
    if not np.isfinite(scores).all():
        raise ValueError("scores contain NaN/inf values")
    order = np.argsort(-scores.ravel(), kind="stable")
    ordered = scores.ravel()[order]
    row_of, is_member = order // num_samples, members.ravel()[order]
    last_of_tie = np.r_[np.flatnonzero(np.diff(ordered)), len(ordered) - 1]
    thresholds, tprs, fprs = (np.empty(num_targets) for _ in range(3))
    for target in range(num_targets):
        kept = row_of != target
        true_pos = np.r_[0, np.cumsum(is_member & kept)[last_of_tie]]
        false_pos = np.r_[0, np.cumsum(~is_member & kept)[last_of_tie]]
        tpr, fpr = true_pos / true_pos[-1], false_pos / false_pos[-1]
        best = int(np.argmax(tpr - fpr))
        thresholds[target] = np.inf if best == 0 else ordered[last_of_tie[best - 1]]
        tprs[target], fprs[target] = tpr[best], fpr[best]
    return Debiasing(thresholds, tprs, fprs)


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
                   rounds: int = ROUNDS, seed: int = 0, rates: Debiasing | None = None,
                   bootstrap: _Bootstrap | None = None) -> dict:
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
    bootstrap = bootstrap or _Bootstrap(scores, members, rates, rounds, seed)
    replicates = bootstrap.pooled(mask)
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


def _draw(num_targets: int, num_samples: int, rounds: int, seed: int) -> Resamples:
    """The crossed resampling counts of :class:`miaudit.stats.intervals.Resamples` (each row a
    uniform multinomial draw of N samples and of T targets), drawn as counts of uniform
    indices, a block of rows at a time: the same distribution as ``Resamples.draw`` in a
    sixth of its time for 60,000 samples x 1,000 rounds (numpy's multinomial walks every
    category of every row)."""
    rng = np.random.default_rng(seed)

    def counts(size: int) -> np.ndarray:
        out = np.empty((rounds, size), dtype=np.int32)
        block = max(1, (1 << 22) // size)  # rows per block: small temporaries stay in cache
        for start in range(0, rounds, block):
            rows = min(block, rounds - start)
            drawn = rng.integers(0, size, size=(rows, size)) + (np.arange(rows) * size)[:, None]
            out[start:start + rows] = np.bincount(drawn.ravel(), minlength=rows * size
                                                  ).reshape(rows, size)
        return out

    return Resamples(counts(num_targets), counts(num_samples))


class _Bootstrap:
    """The crossed-bootstrap replicates of DUCI for one run: sample weights (B, N) as float32
    (integer sums stay exact below 2^24), target weights (B, T), and the references' counts at
    each target's fixed threshold, summed under the sample weights once for every candidate
    set."""

    def __init__(self, scores: np.ndarray, members: np.ndarray, rates: Debiasing,
                 rounds: int, seed: int):
        num_targets, num_samples = scores.shape
        resamples = _draw(num_targets, num_samples, rounds, seed)
        self.samples = resamples.samples.astype(np.float32)
        self.targets = resamples.targets.astype(np.float64)
        self.own_flags = scores >= rates.thresholds[:, None]  # row t: target t's guesses
        total_in = members.sum(0)
        columns = []  # per target: references' IN, flagged IN, OUT, flagged OUT per record
        for t in range(num_targets):
            flags = scores >= rates.thresholds[t]
            flagged_in = (flags & members).sum(0) - (self.own_flags[t] & members[t])
            flagged_out = (flags & ~members).sum(0) - (self.own_flags[t] & ~members[t])
            ins = total_in - members[t]
            columns += [ins, flagged_in, (num_targets - 1) - ins, flagged_out]
        sums = self.samples @ np.array(columns, dtype=np.float32).T
        with np.errstate(invalid="ignore", divide="ignore"):
            self.tpr = sums[:, 1::4].astype(np.float64) / sums[:, 0::4]
            self.fpr = sums[:, 3::4].astype(np.float64) / sums[:, 2::4]

    def pooled(self, mask: np.ndarray) -> np.ndarray:
        """(B,) pooled estimates for candidate sets ``mask`` (T, N)."""
        columns = np.concatenate([mask, mask & self.own_flags]).astype(np.float32)
        sums = (self.samples @ columns.T).astype(np.float64)
        size, flagged = sums[:, : len(mask)], sums[:, len(mask):]
        with np.errstate(invalid="ignore", divide="ignore"):
            per_target = np.where((self.tpr > self.fpr) & (size > 0),
                                  (flagged / size - self.fpr) / (self.tpr - self.fpr), np.nan)
            weights = self.targets * np.isfinite(per_target)
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
    scores = np.asarray(scores, dtype=np.float64)
    members = np.asarray(members, dtype=bool)
    rates = debiasing(scores, members)
    bootstrap = _Bootstrap(scores, members, rates, rounds, seed)  # shared by the fractions
    rng = np.random.default_rng(seed)
    checks = []
    for fraction in fractions:
        sets = known_fraction_sets(members, fraction, rng)
        found = estimate_usage(scores, members, sets, rates=rates, bootstrap=bootstrap)
        truth = np.array(found["true_fraction"])
        per_target = np.array([np.nan if v is None else v for v in found["per_target"]],
                              dtype=float)
        low, high = found["interval"]
        estimate = found["estimate"]
        known = estimate is not None and low is not None  # None: too few records to estimate
        checks.append(UsageCheck(
            float(fraction), estimate, found["interval"],
            bool(known and low <= truth.mean() <= high),
            estimate - float(truth.mean()) if known else None,
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


def known_fraction_errors(scores: np.ndarray, members: np.ndarray,
                          fractions: Sequence[float] = FRACTIONS, *, seed: int = 0) -> dict:
    """The point estimates of :func:`evaluate_usage` without its bootstrap (the same candidate
    sets): ``mean_absolute_error`` per target and the largest pooled ``max_abs_bias``."""
    scores = np.asarray(scores, dtype=np.float64)
    members = np.asarray(members, dtype=bool)
    rates = debiasing(scores, members)
    flags = scores >= rates.thresholds[:, None]
    rng = np.random.default_rng(seed)
    errors, biases = [], []
    for fraction in fractions:
        mask = _candidate_mask(known_fraction_sets(members, fraction, rng), scores.shape)
        per_target = _debiased(mask.sum(1), (mask & flags).sum(1), rates.tpr, rates.fpr)
        truth = (mask & members).sum(1) / mask.sum(1)
        # an attack that separates no target (TPR = FPR) has no estimate: its error is NaN,
        # as before, without numpy's "mean of empty slice" warning in the user's terminal
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            errors.append(float(np.nanmean(np.abs(per_target - truth))))
            biases.append(abs(float(np.nanmean(per_target) - truth.mean())))
    return {"mean_absolute_error": float(np.mean(errors)), "max_abs_bias": float(max(biases))}


def usage_report(scores: dict[str, np.ndarray], members: np.ndarray,
                 fractions: Sequence[float] = FRACTIONS, *, seed: int = 0) -> dict:
    """DUCI with every attack of a run on the known-fraction candidate sets (point estimates,
    :func:`known_fraction_errors`); the attack with the smallest mean absolute error per
    target is ``chosen`` and evaluated with the bootstrap (``evaluation``). The attacks differ
    a lot: an attack whose scores shift from model to model (e.g. RMIA's, which depend on how
    confident each model is overall) breaks the premise that the references' error rates are
    the target's."""
    members = np.asarray(members, dtype=bool)
    errors = {label: known_fraction_errors(values, members, fractions, seed=seed)
              for label, values in scores.items() if np.isfinite(values).all()}
    if not errors:
        raise ValueError("no attack has finite scores for every model")
    chosen = min(errors, key=lambda label: errors[label]["mean_absolute_error"])
    return {"chosen": chosen, "attacks": errors,
            "evaluation": evaluate_usage(scores[chosen], members, fractions, seed=seed)}
