"""Statistically valid lower bounds on epsilon from canaries: pure math (numbers in, numbers
out; no torch, no I/O).

One-run auditing (Steinke, Nasr & Jagielski 2023, "Privacy auditing with one (1) training run",
NeurIPS 2023; arXiv:2305.08846). m canaries, each included in the training set independently
with probability 1/2 (S in {-1, +1}^m uniform). After one training run the auditor scores every
canary, guesses "in" (T_i = +1) for the k+ highest scores, "out" (T_i = -1) for the k- lowest
and abstains (T_i = 0) on the rest: r = k+ + k- guesses, of which W = sum_i max(0, T_i S_i) = v
are correct. The paper's main theorem (its Section 3, for (eps, delta)-DP; the algorithmic
form is the code of its Appendix D, ``p_value_DP_audit``) bounds the tail of W for any
(eps, delta)-DP training algorithm and any auditor whose guesses are computed from the output:

    P[W >= v] <= f(v) + 2 m delta max_{i in {1..m}} (f(v - i) - f(v)) / i,
    f(v) = P[Binomial(r, e^eps / (1 + e^eps)) >= v].

For delta = 0 the extra term vanishes: W is dominated by the binomial of eps-randomized
response. The right-hand side is a p-value for the null hypothesis "the algorithm is
(eps, delta)-DP"; it increases with eps, and the lower bound at confidence 1 - beta is the
largest eps whose p-value is still below beta (found by bisection, as in the paper's
Appendix D code ``get_eps_audit``; we return the lower end of the final bracket, so the
reported eps is never above the exact root). (k+, k-) must be fixed before looking at the
scores; searching a grid of them is corrected here by Bonferroni (beta / grid size).

Multi-run auditing (Jagielski, Ullman & Oprea 2020, "Auditing differentially private machine
learning: how private is private SGD?", Sec. 3 / Algorithm 2; Nasr et al. 2021, "Adversary
instantiation", Sec. 3). R runs trained with the canary and R without; a threshold test
"member iff score >= t" with false-positive rate FPR and false-negative rate FNR certifies, for
any (eps, delta)-DP algorithm (the hypothesis-testing view of DP, Kairouz, Oh & Viswanath 2015,
Thm. 2.1),

    eps >= max(log((1 - delta - FPR) / FNR), log((1 - delta - FNR) / FPR)),

and replacing FPR and FNR by one-sided Clopper-Pearson upper bounds (each at level alpha / 2,
so both hold together with probability >= 1 - alpha) makes it a (1 - alpha)-confidence bound.
Choosing the best threshold on the same runs would void that; two corrections are offered:

- ``"split"`` (default): the runs are split in half at random (seeded); the threshold is chosen
  on the first half (best point estimate), the bound is computed on the second half only;
- ``"bonferroni"``: every threshold between distinct scores is tried on all runs, each interval
  at level alpha / (2 K) for K thresholds, and the maximum is reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.special import expit
from scipy.stats import binom

from miaudit.errors import ConfigError
from miaudit.stats.metrics import clopper_pearson_upper

SELECTIONS = ("split", "bonferroni")
#: bisection steps of the one-run bound (the paper's code uses 30 from [0, ceil(eps)]; 50 steps
#: shrink the bracket to < 1e-13 for any eps we can meet).
_BISECTION_STEPS = 50


# -- validation ----------------------------------------------------------------------------------
def _check_probability(value: float, name: str, *, low_open: bool = True) -> float:
    ok = (0 < value < 1) if low_open else (0 <= value < 1)
    if not ok:
        bounds = "(0, 1)" if low_open else "[0, 1)"
        raise ConfigError(f"option {name!r} must be in {bounds}; got {value!r}")
    return float(value)


def _check_counts(m: int, r: int, v: int) -> None:
    for name, value in (("m", m), ("r", r), ("v", v)):
        if not isinstance(value, (int, np.integer)) or value < 0:
            raise ConfigError(f"{name} must be an integer >= 0; got {value!r}")
    if not v <= r <= m:
        raise ConfigError(f"need 0 <= v (correct) <= r (guesses) <= m (canaries); "
                         f"got v={v}, r={r}, m={m}")


# -- one-run auditing (Steinke, Nasr & Jagielski 2023) -----------------------------------------
def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    """Upper bound on P[W >= v] under (epsilon, delta)-DP: the right-hand side of Steinke et
    al. 2023's main theorem (see the module docstring), clipped to 1.

    The max over i in {1..m} of (f(v - i) - f(v)) / i is taken over i <= v only: for i > v,
    f(v - i) = 1, so the numerator stays 1 - f(v) while the denominator grows."""
    _check_counts(m, r, v)
    if not epsilon >= 0:
        raise ConfigError(f"epsilon must be >= 0; got {epsilon!r}")
    if not 0 <= delta <= 1:
        raise ConfigError(f"delta must be in [0, 1]; got {delta!r}")
    q = float(expit(epsilon))  # e^eps / (1 + e^eps), the accuracy of eps-randomized response
    tail = float(binom.sf(v - 1, r, q))  # f(v) = P[Binomial(r, q) >= v]
    if delta == 0 or v == 0:
        return min(tail, 1.0)
    i = np.arange(1, v + 1)
    # f(v - i) - f(v) = P[v - i <= B < v] = sum_{j=1..i} P[B = v - j]
    gaps = np.cumsum(binom.pmf(v - i, r, q))
    return min(tail + 2 * m * delta * float(np.max(gaps / i)), 1.0)


def one_run_epsilon(m: int, r: int, v: int, delta: float = 0.0,
                    confidence: float = 0.95) -> float:
    """Largest eps rejected at level beta = 1 - ``confidence`` by :func:`one_run_p_value`: a
    (1 - beta)-confidence lower bound on the eps of any (eps, delta)-DP claim that the
    observation (r guesses, v correct, m canaries) contradicts; 0 when none is rejected."""
    beta = 1 - _check_probability(confidence, "confidence")
    if one_run_p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    low, high = 0.0, 1.0
    while one_run_p_value(m, r, v, high, delta) < beta:  # p-value -> P[B(r, 1) >= v] = 1
        low, high = high, 2 * high
    for _ in range(_BISECTION_STEPS):
        middle = (low + high) / 2
        if one_run_p_value(m, r, v, middle, delta) < beta:
            low = middle
        else:
            high = middle
    return low


@dataclass(frozen=True)
class OneRunAudit:
    """The guesses and the bound of one one-run audit."""

    epsilon_lower: float
    canaries: int  # m
    guesses: int  # r = k_pos + k_neg
    correct: int  # v
    k_pos: int
    k_neg: int
    delta: float
    confidence: float
    grid_size: int  # (k+, k-) pairs searched (Bonferroni over them)

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def one_run_guesses(scores: np.ndarray, k_pos: int, k_neg: int) -> np.ndarray:
    """T in {-1, 0, +1}^m: +1 for the ``k_pos`` highest scores, -1 for the ``k_neg`` lowest,
    0 (abstain) for the rest (Steinke et al. 2023, Algorithm 1). Ties are broken by index
    (a stable sort), i.e. independently of membership."""
    scores = np.asarray(scores, dtype=float).ravel()
    if k_pos < 0 or k_neg < 0 or k_pos + k_neg > scores.size:
        raise ConfigError(f"need k_pos, k_neg >= 0 and k_pos + k_neg <= {scores.size} canaries; "
                         f"got k_pos={k_pos}, k_neg={k_neg}")
    order = np.argsort(scores, kind="stable")
    guesses = np.zeros(scores.size, dtype=int)
    guesses[order[:k_neg]] = -1
    if k_pos:
        guesses[order[scores.size - k_pos:]] = 1
    return guesses


def flat_scores(scores: Any, bits: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Scores (finite floats) and membership bits of the same size, flattened."""
    scores = np.asarray(scores, dtype=float).ravel()
    bits = np.asarray(bits).ravel().astype(bool)
    if scores.shape != bits.shape:
        raise ConfigError(f"scores ({scores.size}) and {name} ({bits.size}) differ in size")
    if not np.all(np.isfinite(scores)):
        raise ConfigError("scores must be finite")
    return scores, bits


def one_run_audit(scores: np.ndarray, included: np.ndarray,
                  guesses: Sequence[tuple[int, int]] | tuple[int, int],
                  delta: float = 0.0, confidence: float = 0.95) -> OneRunAudit:
    """One-run epsilon lower bound from canary ``scores`` (higher = "in") and the true
    inclusion bits ``included``, for (k+, k-) = ``guesses`` or the best of a list of them
    (each then tested at beta / len(list), Bonferroni, so the maximum keeps its confidence)."""
    scores, included = flat_scores(scores, included, "included")
    grid = [tuple(guesses)] if np.ndim(guesses) == 1 else [tuple(g) for g in guesses]
    if not grid:
        raise ConfigError("no (k_pos, k_neg) to try")
    _check_probability(delta, "delta", low_open=False)
    beta = 1 - _check_probability(confidence, "confidence")
    level = 1 - beta / len(grid)
    truth = np.where(included, 1, -1)
    best: OneRunAudit | None = None
    for k_pos, k_neg in grid:
        t = one_run_guesses(scores, int(k_pos), int(k_neg))
        r, v = int(np.count_nonzero(t)), int(np.sum(t * truth == 1))
        eps = one_run_epsilon(scores.size, r, v, delta, level)
        if best is None or eps > best.epsilon_lower:
            best = OneRunAudit(eps, scores.size, r, v, int(k_pos), int(k_neg), float(delta),
                               float(confidence), len(grid))
    assert best is not None
    return best


# -- multi-run auditing (Jagielski et al. 2020; Nasr et al. 2021) ------------------------------
def certified_epsilon(fpr: np.ndarray | float, fnr: np.ndarray | float,
                      delta: float = 0.0) -> np.ndarray:
    """max(log((1 - delta - FPR) / FNR), log((1 - delta - FNR) / FPR)): the eps that rates
    (FPR, FNR) force on an (eps, delta)-DP algorithm (Kairouz et al. 2015, Thm. 2.1; Jagielski
    et al. 2020, Sec. 3), not floored (negative where the rates force nothing). A side whose
    numerator is not positive is vacuous (-inf), so the other side still counts; both vacuous
    (or 0/0) is -inf. The one definition of the empirical-epsilon bound: the canary audits and
    :func:`miaudit.privacy.bounds.empirical_epsilon` both use it."""
    fpr, fnr = np.asarray(fpr, dtype=float), np.asarray(fnr, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        first = np.log(np.clip(1 - delta - fpr, 0, None) / fnr)
        second = np.log(np.clip(1 - delta - fnr, 0, None) / fpr)
    first, second = (np.nan_to_num(side, nan=-np.inf, posinf=np.inf, neginf=-np.inf)
                     for side in (first, second))
    return np.maximum(first, second)


def epsilon_from_rates(fpr: np.ndarray | float, fnr: np.ndarray | float,
                       delta: float = 0.0) -> np.ndarray:
    """:func:`certified_epsilon` floored at 0 (rates never certify a negative epsilon)."""
    return np.maximum(certified_epsilon(fpr, fnr, delta), 0.0)


@dataclass(frozen=True)
class MultiRunAudit:
    """The threshold and the bound of one multi-run audit."""

    epsilon_lower: float
    threshold: float  # "member" iff score >= threshold
    fpr: float  # point estimates on the evaluation runs
    fnr: float
    fpr_upper: float  # Clopper-Pearson upper bounds used
    fnr_upper: float
    runs_in: int  # evaluation runs with / without the canary
    runs_out: int
    delta: float
    confidence: float
    selection: str
    thresholds_tried: int

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def _candidate_thresholds(scores: np.ndarray) -> np.ndarray:
    """Every distinct score plus one above the maximum: all distinct threshold tests."""
    unique = np.unique(scores)
    return np.append(unique, np.nextafter(unique[-1], np.inf))


def _error_counts(grid: np.ndarray, members: np.ndarray,
                  others: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(false positives, false negatives) of "member iff score >= t" for every t in grid."""
    members, others = np.sort(members), np.sort(others)
    false_neg = np.searchsorted(members, grid, side="left")
    false_pos = others.size - np.searchsorted(others, grid, side="left")
    return false_pos, false_neg


def multi_run_audit(scores_in: np.ndarray, scores_out: np.ndarray, delta: float = 0.0,
                    confidence: float = 0.95, selection: str = "split",
                    seed: int = 0) -> MultiRunAudit:
    """Multi-run epsilon lower bound from the canary's score in runs trained with it
    (``scores_in``) and without it (``scores_out``); see the module docstring."""
    scores_in = np.asarray(scores_in, dtype=float).ravel()
    scores_out = np.asarray(scores_out, dtype=float).ravel()
    if not (np.all(np.isfinite(scores_in)) and np.all(np.isfinite(scores_out))):
        raise ConfigError("scores must be finite")
    if selection not in SELECTIONS:
        raise ConfigError(f"option 'selection' must be one of {', '.join(SELECTIONS)}; "
                         f"got {selection!r}")
    _check_probability(delta, "delta", low_open=False)
    alpha = 1 - _check_probability(confidence, "confidence")
    minimum = 2 if selection == "split" else 1
    if scores_in.size < minimum or scores_out.size < minimum:
        raise ConfigError(f"selection {selection!r} needs at least {minimum} runs with and "
                         f"{minimum} without the canary; got {scores_in.size} and "
                         f"{scores_out.size}")
    if selection == "split":
        rng = np.random.default_rng(seed)
        perm_in, perm_out = rng.permutation(scores_in.size), rng.permutation(scores_out.size)
        half_in, half_out = scores_in.size // 2, scores_out.size // 2
        pick_in, eval_in = scores_in[perm_in[:half_in]], scores_in[perm_in[half_in:]]
        pick_out, eval_out = scores_out[perm_out[:half_out]], scores_out[perm_out[half_out:]]
        grid = _candidate_thresholds(np.concatenate([pick_in, pick_out]))
        # The threshold whose certified bound is largest on the selection half (point
        # estimates would be infinite at any threshold with zero false negatives).
        fp, fn = _error_counts(grid, pick_in, pick_out)
        chosen = epsilon_from_rates(clopper_pearson_upper(fp, pick_out.size, alpha / 2),
                                    clopper_pearson_upper(fn, pick_in.size, alpha / 2), delta)
        choice = int(np.argmax(chosen))
        grid, level = grid[choice:choice + 1], alpha / 2
    else:
        eval_in, eval_out = scores_in, scores_out
        grid = _candidate_thresholds(np.concatenate([scores_in, scores_out]))
        level = alpha / (2 * grid.size)
    fp, fn = _error_counts(grid, eval_in, eval_out)
    fpr_up = clopper_pearson_upper(fp, eval_out.size, level)
    fnr_up = clopper_pearson_upper(fn, eval_in.size, level)
    certified = epsilon_from_rates(fpr_up, fnr_up, delta)
    best = int(np.argmax(certified))
    return MultiRunAudit(
        epsilon_lower=float(certified[best]), threshold=float(grid[best]),
        fpr=float(fp[best] / eval_out.size), fnr=float(fn[best] / eval_in.size),
        fpr_upper=float(fpr_up[best]), fnr_upper=float(fnr_up[best]),
        runs_in=int(eval_in.size), runs_out=int(eval_out.size), delta=float(delta),
        confidence=float(confidence), selection=selection, thresholds_tried=int(grid.size))


def max_multi_run_epsilon(runs_in: int, runs_out: int, delta: float = 0.0,
                          confidence: float = 0.95, selection: str = "split") -> float:
    """The largest bound :func:`multi_run_audit` can report (zero errors on the evaluation
    runs, all scores distinct): what R runs can prove at best, e.g. to size an experiment."""
    scores_in, scores_out = runs_out + np.arange(runs_in, dtype=float), np.arange(runs_out) * 1.0
    return multi_run_audit(scores_in, scores_out, delta, confidence, selection).epsilon_lower


def max_one_run_epsilon(guesses: int | Sequence[tuple[int, int]], delta: float = 0.0,
                        confidence: float = 0.95, canaries: int | None = None) -> float:
    """The largest bound r guesses can prove (all correct), for sizing an experiment; for a
    grid of (k+, k-) pairs, the best of them at the Bonferroni level :func:`one_run_audit`
    uses."""
    if isinstance(guesses, (int, np.integer)):
        return one_run_epsilon(canaries or int(guesses), int(guesses), int(guesses), delta,
                               confidence)
    level = 1 - (1 - confidence) / len(guesses)
    sizes = [int(k_pos + k_neg) for k_pos, k_neg in guesses]
    return max(one_run_epsilon(canaries or max(sizes), r, r, delta, level) for r in sizes)
