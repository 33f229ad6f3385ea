"""Differential privacy of neural SDEs: the bound in the style of the neural-ODE study's
Theorem 4.1 / Corollary 4.2, and the accountant-based epsilon of NSDE training.

What the study states (as far as we know it; we do not have its text). "Understanding and
Mitigating Membership Inference Risks of Neural ODEs" (Hong et al. 2025, arXiv 2501.06686)
claims that NSDEs are DP learners with DP-SGD's guarantee. Its Theorem 4.1 uses
``dh = f(t, h) dt + (sigma / sqrt(T)) dB`` on [0, T], so the noise added over the block is
N(0, sigma^2 I), and gives the sigma needed for (epsilon, delta)-DP in terms of T, the drift's
Lipschitz constant L and a number K of iterations (Corollary 4.2). Its exact constants are not
reproduced here; every formula below is our own derivation under the assumptions listed, and
where it differs from the study the study's own statement should be consulted.

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
    K compositions:  mu_K = sqrt(K) T L D / sigma      (K blocks, passes or iterations that
                                                         touch the same datum, no subsampling)

and (epsilon, delta) follows exactly from mu_K (Balle & Wang 2018, Thm. 8):
delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2). Hence the smallest admissible

    sigma = sqrt(K) T L D / mu*(epsilon, delta),  mu* solving the equation above.

``composition="classic"`` instead uses the textbook Gaussian mechanism per composition
(Dwork & Roth 2014, Thm. A.1: noise >= sensitivity sqrt(2 ln(1.25/delta')) / epsilon', valid for
epsilon' < 1) with basic composition over K (epsilon' = epsilon / K, delta' = delta / K):
sigma = K T L D sqrt(2 ln(1.25 K / delta)) / epsilon. It is looser and grows linearly in K; it
is provided because a bound of that shape is what a Gaussian-mechanism-plus-composition argument
over K iterations gives, not because we know it to be the study's formula.

Caveats. The derivation is for Euler-Maruyama. SDENet's default ``srk4`` stepper adds one
increment W per step as well, but also evaluates the drift at noisy intermediate points, so a
step is not exactly "query + independent Gaussian"; we apply the same formula to it as an
approximation. (A2) is the crux: with a drift that is L-Lipschitz in the state h (what spectral
normalization of SDENet's drift bounds, see :func:`miaudit.models.sde.drift_lipschitz_bound`),
D must bound the distance between the states of the two executions, which (A2) takes as given.

Accountant-based epsilon of NSDE training (the numbers the study reports)
-------------------------------------------------------------------------
:func:`training_epsilon` treats each training step as the Poisson-subsampled Gaussian mechanism
of DP-SGD with noise multiplier z = sigma / sensitivity and sample rate q = batch / n, and asks
Opacus's accountants for epsilon after the given epochs. ``sensitivity=1`` (default) feeds
sigma directly as the noise multiplier, which is how we read the study's DP-SGD comparison;
``sensitivity = T L D`` (or :func:`block_sensitivity`) is the value consistent with the
derivation above (z = 1 / mu_1). This treats a training step as releasing only the noisy NSDE
outputs of the sampled examples; the parameter update also depends on the data through the loss
and the backward pass, which neither argument covers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from torch import nn

from miaudit.privacy.accounting import (
    check_delta,
    epsilon,
    gaussian_epsilon,
    gaussian_mu,
    sample_rate_for,
)

COMPOSITIONS = ("gaussian", "classic")


def _positive(value: float, name: str) -> float:
    if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
        raise ValueError(f"option {name!r} must be a finite number > 0; got {value!r}")
    return float(value)


def _iterations(value: int) -> int:
    if not (isinstance(value, int) and value >= 1):
        raise ValueError(f"option 'iterations' must be a positive integer; got {value!r}")
    return value


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
        raise ValueError(f"option 'steps' must be a positive integer; got {steps!r}")
    dt = _positive(T, "T") / steps
    mu_step = _positive(lipschitz, "lipschitz") * _positive(distance, "distance") * math.sqrt(
        dt * T) / sigma
    return math.sqrt(_iterations(iterations) * steps * mu_step**2)


@dataclass(frozen=True)
class NSDEBound:
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


def sigma_bound(epsilon: float, delta: float, *, T: float, lipschitz: float, distance: float,
                iterations: int = 1, composition: str = "gaussian") -> NSDEBound:
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
            raise ValueError(f"composition 'classic' needs epsilon / iterations < 1 (Dwork & "
                             f"Roth Thm. A.1); got {epsilon} / {count}")
        sigma = count * sensitivity * math.sqrt(2 * math.log(1.25 * count / delta)) / epsilon
        mu_out = None
    else:
        raise ValueError(f"option 'composition' must be one of {', '.join(COMPOSITIONS)}; "
                         f"got {composition!r}")
    return NSDEBound(sigma=sigma, epsilon=float(epsilon), delta=float(delta), T=float(T),
                     lipschitz=float(lipschitz), distance=float(distance), iterations=count,
                     composition=composition, mu=mu_out)


def nsde_epsilon(sigma: float, delta: float, *, T: float, lipschitz: float, distance: float,
                 iterations: int = 1, composition: str = "gaussian") -> float:
    """Epsilon of ``iterations`` compositions of an NSDE block with theorem sigma ``sigma``
    (the inverse of :func:`sigma_bound`)."""
    _positive(sigma, "sigma")
    check_delta(delta)
    count = _iterations(iterations)
    sensitivity = block_sensitivity(T, lipschitz, distance)
    if composition == "gaussian":
        return gaussian_epsilon(math.sqrt(count) * sensitivity / sigma, delta)
    if composition == "classic":
        value = count * sensitivity * math.sqrt(2 * math.log(1.25 * count / delta)) / sigma
        if not value / count < 1:
            raise ValueError(f"composition 'classic' is only valid for epsilon / iterations < 1; "
                             f"this sigma gives {value:.4g} for {count} iterations")
        return value
    raise ValueError(f"option 'composition' must be one of {', '.join(COMPOSITIONS)}; "
                     f"got {composition!r}")


# -- accountant-based epsilon of NSDE training ---------------------------------------------------
def training_epsilon(sigma: float, batch_size: int, dataset_size: int, epochs: float,
                     delta: float, accountant: str = "prv", sensitivity: float = 1.0) -> float:
    """Epsilon of NSDE training read as DP-SGD: Poisson-subsampled Gaussian with noise
    multiplier sigma / ``sensitivity``, q = batch_size / dataset_size, ``epochs`` epochs
    (see the module docstring for what this does and does not cover)."""
    z = _positive(sigma, "sigma") / _positive(sensitivity, "sensitivity")
    return epsilon(z, sample_rate_for(batch_size, dataset_size), delta, epochs=epochs,
                   accountant=accountant)


# -- models -------------------------------------------------------------------------------------
def model_sde_parameters(model: nn.Module) -> dict[str, Any]:
    """The SDE parameters of ``model``: its ``sde_parameters()`` method if it has one, else
    :func:`miaudit.models.sde.sde_parameters`; a ValueError if the model has no SDE block."""
    method = getattr(model, "sde_parameters", None)
    if callable(method):
        params = method()
    else:
        from miaudit.models.sde import sde_parameters

        params = sde_parameters(model)
    if not params:
        raise ValueError(f"model {type(model).__name__} has no stochastic (SDE) block")
    return params


@dataclass(frozen=True)
class ModelPrivacy:
    """The bound evaluated for a built SDE model."""

    sigma_model: float  # the model's theorem sigma (total noise std over [0, T])
    bound: NSDEBound  # smallest sigma for the requested (epsilon, delta)
    epsilon_model: float  # epsilon the model's sigma gives at the same delta
    satisfied: bool


def model_privacy(model: nn.Module, epsilon_target: float, delta: float, distance: float, *,
                  iterations: int = 1, lipschitz: float | None = None,
                  composition: str = "gaussian") -> ModelPrivacy:
    """Evaluate :func:`sigma_bound` for an SDE model: T and the theorem sigma from the model,
    L from its drift (``spectral_norm=True`` gives a bound; pass ``lipschitz`` otherwise), and
    ``iterations`` times the number of stochastic blocks compositions."""
    params = model_sde_parameters(model)
    L = params.get("lipschitz_bound") if lipschitz is None else lipschitz
    if L is None:
        raise ValueError("the drift's Lipschitz constant is unknown (its drift has "
                         "normalization layers): build the model with spectral_norm=True or "
                         "pass option 'lipschitz'")
    sigma_model = params.get("sigma_theorem")
    if sigma_model is None:  # s increments of std k add N(0, s k^2 I) over [0, T]
        sigma_model = params["k"] * math.sqrt(params["steps"])
    count = _iterations(iterations) * int(params.get("n_sde_blocks", 1))
    bound = sigma_bound(epsilon_target, delta, T=params["T"], lipschitz=L, distance=distance,
                        iterations=count, composition=composition)
    eps_model = (math.inf if sigma_model <= 0 else
                 nsde_epsilon(sigma_model, delta, T=params["T"], lipschitz=L, distance=distance,
                              iterations=count, composition=composition))
    return ModelPrivacy(sigma_model=float(sigma_model), bound=bound, epsilon_model=eps_model,
                        satisfied=sigma_model >= bound.sigma)
