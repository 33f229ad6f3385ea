"""Gaussian-DP audits: estimate mu from canary-aligned statistics and convert to epsilon.
Pure numpy/scipy (no torch, no I/O).

Model (Nasr, Hayes, Steinke, Balle, Tramer, Jagielski, Carlini & Terzis 2023, "Tight auditing
of differentially private machine learning", USENIX Security, Sec. 5: when the auditor sees the
privatized updates, the canary-aligned statistic is Gaussian under both hypotheses; Agrawal et
al. 2026, "Let's ask Gauss": the sum of canary-aligned signals over one run is asymptotically
Gaussian). The statistic of a canary that was *not* trained on is N(a, s^2), of one that was,
N(a + mu s, s^2). The two hypotheses are then exactly the pair of a mu-GDP mechanism (Dong, Roth
& Su 2022, Def. 2.5), whose (epsilon, delta) curve is

    delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)     (Dong et al., Cor. 2.13).

Estimate and confidence. With n1 statistics "in" and n0 "out" (independent: several runs, or
the canaries of one run when their statistics are independent, as with gradient canaries on
orthogonal coordinates), the pooled two-sample t statistic

    t = (mean_in - mean_out) / (s_pooled sqrt(1/n1 + 1/n0))

follows a noncentral t distribution with n1 + n0 - 2 degrees of freedom and noncentrality
mu / sqrt(1/n1 + 1/n0) (Johnson & Welch 1940). Inverting its CDF in the noncentrality gives an
exact one-sided (1 - alpha) lower confidence bound mu_lo (no threshold is chosen, so there is
nothing to pay for), and eps_lo = eps(mu_lo, delta) from the curve above.

What this proves. The confidence statement is exact when the model holds (a Gaussian mechanism;
DP-SGD's per-canary log-likelihood-ratio sum over many steps by the central limit theorem for
composed subsampled Gaussians, Dong et al. Thm. 3.5 and Cor. 5.4). eps_lo then lower-bounds the
epsilon of the *Gaussian-DP curve* that the observations imply. For a mechanism whose statistic
is far from Gaussian (randomized response, a loss score of the final model) it is an estimate,
not a bound; the distribution-free bounds are :mod:`miaudit.privacy.auditing` and
:mod:`miaudit.privacy.fdp_audit`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.stats import nct

from miaudit.privacy.accounting import gaussian_epsilon


@dataclass(frozen=True)
class GaussianAudit:
    """mu estimate, its lower confidence bound and the epsilon of that bound."""

    epsilon_lower: float  # eps(mu_lower, delta)
    mu_lower: float
    mu_hat: float  # point estimate (mean_in - mean_out) / s_pooled
    epsilon_hat: float  # eps(mu_hat, delta): the point estimate, no confidence
    n_in: int
    n_out: int
    delta: float
    confidence: float

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def _two_samples(stats_in: np.ndarray, stats_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    stats_in = np.asarray(stats_in, dtype=float).ravel()
    stats_out = np.asarray(stats_out, dtype=float).ravel()
    if stats_in.size < 2 or stats_out.size < 2:
        raise ValueError(f"the Gaussian audit needs at least 2 statistics in and 2 out; got "
                         f"{stats_in.size} and {stats_out.size}")
    if not (np.all(np.isfinite(stats_in)) and np.all(np.isfinite(stats_out))):
        raise ValueError("statistics must be finite")
    return stats_in, stats_out


def mu_lower_bound(t_obs: float, df: int, scale: float, alpha: float) -> float:
    """Smallest mu >= 0 not rejected: the root in mu of P_nc[T >= t_obs] = alpha with
    nc = mu / scale (the noncentral-t survival function increases in nc); 0 if even mu = 0
    is not rejected."""
    if nct.sf(t_obs, df, 0.0) >= alpha:
        return 0.0
    high = max(1.0, t_obs)
    while nct.sf(t_obs, df, high) < alpha:
        high *= 2
    return float(brentq(lambda nc: nct.sf(t_obs, df, nc) - alpha, 0.0, high,
                        xtol=1e-10)) * scale


def gaussian_audit(stats_in: np.ndarray, stats_out: np.ndarray, delta: float = 1e-5,
                   confidence: float = 0.95) -> GaussianAudit:
    """(1 - alpha) lower bound on mu and on eps(mu, delta) from statistics of canaries in
    (``stats_in``) and out (``stats_out``); higher = "in". See the module docstring."""
    stats_in, stats_out = _two_samples(stats_in, stats_out)
    if not 0 < confidence < 1:
        raise ValueError(f"option 'confidence' must be in (0, 1); got {confidence!r}")
    if not 0 < delta < 1:
        raise ValueError(f"option 'delta' must be in (0, 1); got {delta!r}")
    n1, n0 = stats_in.size, stats_out.size
    df = n1 + n0 - 2
    pooled = math.sqrt((((stats_in - stats_in.mean()) ** 2).sum()
                        + ((stats_out - stats_out.mean()) ** 2).sum()) / df)
    difference = float(stats_in.mean() - stats_out.mean())
    if pooled == 0:  # perfectly separated constant statistics: no finite estimate
        mu_hat = math.inf if difference > 0 else 0.0
        mu_lo = mu_hat
    else:
        scale = math.sqrt(1 / n1 + 1 / n0)
        mu_hat = max(0.0, difference / pooled)
        mu_lo = mu_lower_bound(difference / (pooled * scale), df, scale, 1 - confidence)
    return GaussianAudit(
        epsilon_lower=gaussian_epsilon(mu_lo, delta), mu_lower=mu_lo, mu_hat=mu_hat,
        epsilon_hat=gaussian_epsilon(mu_hat, delta), n_in=n1, n_out=n0, delta=float(delta),
        confidence=float(confidence))


def one_run_gaussian_audit(scores: np.ndarray, included: np.ndarray, delta: float = 1e-5,
                           confidence: float = 0.95) -> GaussianAudit:
    """The Gaussian audit of one run's m canaries, split by their inclusion coins."""
    scores = np.asarray(scores, dtype=float).ravel()
    included = np.asarray(included).ravel().astype(bool)
    if scores.shape != included.shape:
        raise ValueError(f"scores ({scores.size}) and included ({included.size}) differ in size")
    return gaussian_audit(scores[included], scores[~included], delta, confidence)


def subsampled_gaussian_llr(observations: np.ndarray, noise_multiplier: float,
                            sample_rate: float) -> np.ndarray:
    """Per-canary log-likelihood ratio of T observations y_t (canary-aligned privatized
    update minus the known data part, in units of the clipping norm), ``observations`` shaped
    (steps, canaries): sum_t log(1 - q + q exp((y_t - 1/2) / sigma^2)), the optimal statistic
    between N(0, sigma^2) (out) and the mixture (1 - q) N(0, sigma^2) + q N(1, sigma^2) (in),
    Neyman-Pearson. By the CLT over steps it is close to Gaussian under both hypotheses
    (Dong et al. 2022, Sec. 5.2)."""
    y = np.asarray(observations, dtype=float)
    if y.ndim != 2:
        raise ValueError(f"observations must be (steps, canaries); got shape {y.shape}")
    if not noise_multiplier > 0 or not 0 < sample_rate <= 1:
        raise ValueError("need noise_multiplier > 0 and sample_rate in (0, 1]")
    exponent = (y - 0.5) / noise_multiplier ** 2
    # log(1 - q + q e^x) = logaddexp(log(1 - q), log(q) + x), stable for large x
    log_out = math.log1p(-sample_rate) if sample_rate < 1 else -math.inf
    return np.logaddexp(log_out, math.log(sample_rate) + exponent).sum(axis=0)
