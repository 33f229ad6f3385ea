"""Decision rules for a table of claims: p-values from intervals, Holm's step-down adjustment,
two one-sided tests of equivalence, a fixed-effects combination of independent replicates and
the scale that gives a test 80% power (issue 79).

Every rule works from what a results file carries: an estimate with a 95% interval. The
interval is read as a normal one with the standard error of its side facing the null, so the
p-value and the interval agree (the interval excludes the null exactly when p < 0.05) and an
asymmetric interval (a bootstrap's, Clopper-Pearson's) keeps its asymmetry.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

Z95 = float(norm.ppf(0.975))


def side_se(value: float, low: float, high: float, toward: float) -> float:
    """The standard error a 95% interval implies on the side facing ``toward``."""
    half = value - low if toward <= value else high - value
    return max(half, 0.0) / Z95


def interval_p(value: float, low: float, high: float, null: float = 0.0) -> float:
    """Two-sided p-value of ``value == null`` from its 95% interval (test inversion)."""
    se = side_se(value, low, high, null)
    if se == 0.0:
        return 0.0 if value != null else 1.0
    return float(2 * norm.sf(abs(value - null) / se))


def holm(p_values: list[float] | np.ndarray) -> np.ndarray:
    """Holm's (1979, Scand. J. Statist. 6) step-down adjusted p-values: the i-th smallest p
    times (m - i + 1), made monotone, capped at 1. Rejecting where the adjusted p < alpha
    controls the family-wise error at alpha under any dependence between the tests."""
    p = np.asarray(p_values, dtype=float)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted


def tost_p(value: float, low: float, high: float, margin: float) -> float:
    """p-value of equivalence, |difference| < margin, by two one-sided tests (Schuirmann 1987,
    J. Pharmacokinet. Biopharm. 15(6)): the larger of the two one-sided p-values, each from the
    interval's side facing that end of the margin. p < alpha is the (1 - 2 alpha) interval
    lying inside +-margin."""
    below = norm.sf((value + margin) / max(side_se(value, low, high, -margin), 1e-300))
    above = norm.sf((margin - value) / max(side_se(value, low, high, margin), 1e-300))
    return float(max(below, above))


def beyond_margin_p(value: float, low: float, high: float, margin: float) -> float:
    """p-value of non-equivalence, |difference| > margin (one-sided, toward the nearer end)."""
    end = margin if value >= 0 else -margin
    se = max(side_se(value, low, high, end), 1e-300)
    return float(norm.sf((abs(value) - margin) / se))


def fixed_effects(estimates: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """Inverse-variance (fixed-effects) combination of independent estimates, each a value with
    its 95% interval (standard error: half the interval's width / 1.96): the pooled value with
    its 95% interval. Replicates at other seeds are independent draws of the same design, so
    the pooled standard error is 1 / sqrt(sum of the weights).

    A zero-width interval (an exact value: e.g. two attacks that coincide at one seed, their
    paired difference 0 in every resample) would take every weight and hide the other seeds'
    uncertainty; then the seeds are weighted equally instead (any fixed weights give a valid
    combination): the mean, standard error sqrt(sum se^2) / k."""
    values = np.array([e[0] for e in estimates])
    se = np.array([(e[2] - e[1]) / (2 * Z95) for e in estimates])
    if np.any(se < 0) or np.any(~np.isfinite(se)) or np.all(se == 0):
        raise ValueError(f"fixed_effects: intervals need a non-negative width, not all zero, "
                         f"got {estimates}")
    if np.any(se == 0):
        pooled = float(values.mean())
        half = Z95 * math.sqrt(float(np.sum(se ** 2))) / len(values)
        return pooled, pooled - half, pooled + half
    weights = 1 / se ** 2
    pooled = float(np.sum(weights * values) / np.sum(weights))
    half = Z95 / math.sqrt(float(np.sum(weights)))
    return pooled, pooled - half, pooled + half


def scale_for_power(effect: float, se: float, power: float = 0.8, alpha: float = 0.05) -> float:
    """How many times the targets and samples a two-sided level-alpha test of ``effect`` needs
    for ``power``, if the effect stays what was measured and the standard error falls as
    1 / sqrt(scale): ((z_{1-alpha/2} + z_power) * se / effect)^2."""
    if effect == 0:
        return math.inf
    return ((norm.ppf(1 - alpha / 2) + norm.ppf(power)) * se / abs(effect)) ** 2


def by_a_hair(low: float, high: float, null: float) -> bool:
    """Whether an interval excludes ``null`` by less than a tenth of its width."""
    width = high - low
    return width > 0 and (low > null or high < null) \
        and min(abs(low - null), abs(high - null)) < 0.1 * width
