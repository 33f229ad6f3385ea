"""An alternative DP bound for neural SDEs: exact GDP composition (our derivation, not paper
A's; paper A's statements are in :mod:`miaudit.privacy.nsde`).

:func:`gdp_sigma_bound` / :func:`gdp_epsilon` (``composition="gaussian"`` or ``"classic"``).

Our derivation (per block, then over K compositions)
----------------------------------------------------
Model. ``s`` Euler-Maruyama steps of dt = T / s:
``h_{j+1} = h_j + dt f(t_j, h_j; z) + (sigma / sqrt(T)) sqrt(dt) xi_j``, xi_j ~ N(0, I), where
z is the private datum the drift depends on.

Assumptions.
(A1) The released object is the trajectory h_1..h_s (anything computed from it, the block's
     output included, is post-processing).
(A2) Bounded sensitivity through the Lipschitz constant and clipping: for every t and state h,
     neighbouring data give ||f(t, h; z) - f(t, h; z')||_2 <= L * D, with L a Lipschitz
     constant of the drift in the argument that carries the private datum and D a bound on how
     far that argument moves between neighbours (D = 2C when it is clipped to norm C).
(A3) The noise xi_j is independent of the data and of everything before step j.

Step j, conditioned on the released history, is then a Gaussian mechanism on the query
dt f(t_j, h_j; z) with L2 sensitivity dt L D and noise std sigma sqrt(dt / T), i.e.
mu_j-GDP with mu_j = L D sqrt(dt T) / sigma (Dong, Roth & Su 2022, Thm. 2.7). Adaptive
composition of Gaussian mechanisms is exact in GDP (ibid., Cor. 3.3): mu^2 = sum_j mu_j^2 =
s L^2 D^2 dt T / sigma^2, so

    one block:       mu_1 = T L D / sigma              (independent of the number of steps s)
    K compositions:  mu_K = sqrt(K) T L D / sigma      (K passes or iterations that touch the
                                                         same datum, no subsampling; blocks in
                                                         sequence are post-processing, Sec. 5.3)

and (epsilon, delta) follows exactly from mu_K (Balle & Wang 2018, Thm. 8):
delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2). Hence the smallest admissible

    sigma = sqrt(K) T L D / mu*(epsilon, delta),  mu* solving the equation above.

``composition="classic"`` instead uses the textbook Gaussian mechanism per composition
(Dwork & Roth 2014, Thm. A.1: noise >= sensitivity sqrt(2 ln(1.25/delta')) / epsilon', valid for
epsilon' < 1) with basic composition over K (epsilon' = epsilon / K, delta' = delta / K):
sigma = K T L D sqrt(2 ln(1.25 K / delta)) / epsilon. It is looser and grows linearly in K;
it is a textbook comparison (the study's Corollary 4.2 uses strong composition instead:
:func:`corollary42_sigma`).

Caveats. The derivation is for Euler-Maruyama. SDENet's default ``srk4`` stepper adds one
increment W per step as well, but also evaluates the drift at noisy intermediate points, so a
step is not exactly "query + independent Gaussian"; we apply the same formula to it as an
approximation. (A2) is the crux: with a drift that is L-Lipschitz in the state h (what spectral
normalization of SDENet's drift bounds, see :func:`miaudit.models.sde.drift_lipschitz_bound`),
D must bound the distance between the states of the two executions, which (A2) takes as given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import nn

from miaudit.errors import ConfigError
from miaudit.privacy.accounting import check_delta, gaussian_epsilon, gaussian_mu
from miaudit.privacy.nsde import _iterations, _positive, model_sde_parameters

COMPOSITIONS = ("gaussian", "classic")


def block_sensitivity(T: float, lipschitz: float, distance: float) -> float:
    """L2 sensitivity T L D of the drift integrated over [0, T] under (A2)."""
    return _positive(T, "T") * _positive(lipschitz, "lipschitz") * _positive(distance, "distance")


def composed_mu(sigma: float, T: float, lipschitz: float, distance: float, *,
                steps: int = 1, iterations: int = 1) -> float:
    """mu of the GDP guarantee of ``iterations`` compositions of an ``steps``-step
    Euler-Maruyama block, summed step by step: sqrt(K * sum_j mu_j^2) with
    mu_j = L D sqrt(dt T) / sigma. Equals sqrt(K) T L D / sigma for every ``steps``."""
    sigma = _positive(sigma, "sigma")
    if not (isinstance(steps, int) and steps >= 1):
        raise ConfigError(f"option 'steps' must be a positive integer; got {steps!r}")
    dt = _positive(T, "T") / steps
    mu_step = _positive(lipschitz, "lipschitz") * _positive(distance, "distance") * math.sqrt(
        dt * T) / sigma
    return math.sqrt(_iterations(iterations) * steps * mu_step**2)


@dataclass(frozen=True)
class GDPBound:
    """Smallest theorem sigma (total noise std over [0, T]) for (epsilon, delta)-DP."""

    sigma: float
    epsilon: float
    delta: float
    T: float
    lipschitz: float
    distance: float
    iterations: int
    composition: str
    mu: float | None  # the GDP parameter at that sigma (gaussian composition only)


def gdp_sigma_bound(epsilon: float, delta: float, *, T: float, lipschitz: float,
                    distance: float, iterations: int = 1,
                    composition: str = "gaussian") -> GDPBound:
    """Smallest sigma (Theorem 4.1's parameterization) making ``iterations`` compositions of an
    NSDE block (epsilon, delta)-DP under assumptions (A1)-(A3) of the module docstring."""
    _positive(epsilon, "epsilon")
    check_delta(delta)
    count = _iterations(iterations)
    sensitivity = block_sensitivity(T, lipschitz, distance)
    if composition == "gaussian":
        mu = gaussian_mu(epsilon, delta)
        sigma, mu_out = math.sqrt(count) * sensitivity / mu, mu
    elif composition == "classic":
        if not epsilon / count < 1:
            raise ConfigError(f"composition 'classic' needs epsilon / iterations < 1 (Dwork & "
                             f"Roth Thm. A.1); got {epsilon} / {count}")
        sigma = count * sensitivity * math.sqrt(2 * math.log(1.25 * count / delta)) / epsilon
        mu_out = None
    else:
        raise ConfigError(f"option 'composition' must be one of {', '.join(COMPOSITIONS)}; "
                         f"got {composition!r}")
    return GDPBound(sigma=sigma, epsilon=float(epsilon), delta=float(delta), T=float(T),
                     lipschitz=float(lipschitz), distance=float(distance), iterations=count,
                     composition=composition, mu=mu_out)


def gdp_epsilon(sigma: float, delta: float, *, T: float, lipschitz: float, distance: float,
                iterations: int = 1, composition: str = "gaussian") -> float:
    """Epsilon of ``iterations`` compositions of an NSDE block with theorem sigma ``sigma``
    (the inverse of :func:`gdp_sigma_bound`)."""
    _positive(sigma, "sigma")
    check_delta(delta)
    count = _iterations(iterations)
    sensitivity = block_sensitivity(T, lipschitz, distance)
    if composition == "gaussian":
        return gaussian_epsilon(math.sqrt(count) * sensitivity / sigma, delta)
    if composition == "classic":
        value = count * sensitivity * math.sqrt(2 * math.log(1.25 * count / delta)) / sigma
        if not value / count < 1:
            raise ConfigError(f"composition 'classic' is only valid for epsilon / iterations < 1; "
                             f"this sigma gives {value:.4g} for {count} iterations")
        return value
    raise ConfigError(f"option 'composition' must be one of {', '.join(COMPOSITIONS)}; "
                     f"got {composition!r}")


@dataclass(frozen=True)
class ModelPrivacy:
    """The bound evaluated for a built SDE model."""

    sigma_model: float  # the model's theorem sigma (total noise std over [0, T])
    bound: GDPBound  # smallest sigma for the requested (epsilon, delta)
    epsilon_model: float  # epsilon the model's sigma gives at the same delta
    satisfied: bool


def gdp_model_privacy(model: nn.Module, epsilon_target: float, delta: float, distance: float,
                      *, iterations: int = 1, lipschitz: float | None = None,
                  composition: str = "gaussian") -> ModelPrivacy:
    """Evaluate :func:`gdp_sigma_bound` for an SDE model: T and the theorem sigma from the model,
    L from its drift (``spectral_norm=True`` gives a bound; pass ``lipschitz`` otherwise), and
    ``iterations`` compositions. SDE blocks in sequence are post-processing (paper A, Sec.
    5.3), so the number of blocks does not add compositions."""
    params = model_sde_parameters(model)
    L = params.get("lipschitz_bound") if lipschitz is None else lipschitz
    if L is None:
        raise ConfigError("the drift's Lipschitz constant is unknown (its drift has "
                         "normalization layers): build the model with spectral_norm=True or "
                         "pass option 'lipschitz'")
    sigma_model = params["sigma_theorem"]
    count = _iterations(iterations)
    bound = gdp_sigma_bound(epsilon_target, delta, T=params["T"], lipschitz=L,
                            distance=distance, iterations=count, composition=composition)
    eps_model = (math.inf if sigma_model <= 0 else
                 gdp_epsilon(sigma_model, delta, T=params["T"], lipschitz=L, distance=distance,
                             iterations=count, composition=composition))
    return ModelPrivacy(sigma_model=float(sigma_model), bound=bound, epsilon_model=eps_model,
                        satisfied=sigma_model >= bound.sigma)
