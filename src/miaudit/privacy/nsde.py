"""Differential privacy of neural SDEs: paper A's Theorem 4.1, Remark 1, Corollary 4.2 and
Sec. 5.3 exactly, an alternative GDP-based bound of our own, and the accountant-based epsilon of
NSDE training.

Paper A's statements (Hong et al. 2025, "Understanding and Mitigating Membership Inference
Risks of Neural ODEs"; transcribed in the reference notes)
----------------------------------------------------------------------------------------
- Theorem 4.1. sigma, T > 0, drift f L_f-Lipschitz, SDE dh = f(h, t) dt + (sigma / sqrt(T)) dB;
  for 0 < eps < 1 and delta > 0 the flow map h(0) -> h(T) is (eps, delta)-DP provided

      printed form:  sigma >= sqrt(2 ln(1.25 / delta)) (T L_f / eps)^2
      proof form:    sigma >= sqrt(2 ln(1.25 / delta)) T L_f / eps

  The proof writes h(T) = F(h) + B_T with B_T ~ N(0, sigma^2 I) and applies the Gaussian
  mechanism (Dwork & Roth 2014, Thm. A.1: sigma >= sqrt(2 ln(1.25/delta)) S / eps, eps < 1)
  with sensitivity S <= T L_f; that yields the proof form, without the square of the printed
  statement. :data:`DEFAULT_FORM` is the proof form, because it is what the argument
  establishes; the printed form is offered to reproduce the statement as published.
  Both are only claimed for 0 < eps < 1: results outside that range are flagged
  (``in_range`` False), and asking for the sigma of an eps >= 1 is an error.
- Remark 1. With Euler-Maruyama the sensitivity is T L_f + L_eps (L_eps: Lipschitz constant of
  the quadrature error): option ``l_eps`` (0 = the exact flow map).
- Corollary 4.2. Training the drift for at most K iterations is (eps', K delta + delta')-DP,
  0 < eps' < 1, if sigma >= 4 sqrt(K ln(1.25/delta) ln(1/delta')) T L / eps' (strong
  composition, Dwork & Roth Cor. 3.21, with per-iteration eps = eps' / (2 sqrt(2 K
  ln(1/delta'))) inserted in the proof form above).
- Sec. 5.3. Several SDE blocks in sequence keep the same eps (post-processing of the first
  block's private output): the guarantee of an SDENet is that of one block, whatever its
  number of SDE blocks; nothing here composes per block.

Which sigma: Theorem 4.1's sigma is the std of the noise a block adds over [0, T]
(``sigma_theorem`` of :func:`miaudit.models.sde.sde_parameters`): 0.5 for the default SDENet
(Oganesyan et al.'s increment k sqrt(dt) xi, k = 0.5, T = 1), 2 = the study's label sigma with
``convention="paper"``; see :mod:`miaudit.models.sde`. Paper A's sigma = 2 example (T = L = 1,
delta = 1e-5) implies eps = 2.42, already outside the theorem's range.

Alternative: exact GDP composition (our derivation, not the paper's)
---------------------------------------------------------------------
:mod:`miaudit.privacy.nsde_gdp`: a per-step GDP argument composed exactly over K compositions.

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
from typing import Any

from torch import nn

from miaudit.errors import ConfigError
from miaudit.privacy.accounting import check_delta, epsilon, sample_rate_for


def _positive(value: float, name: str) -> float:
    if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
        raise ConfigError(f"option {name!r} must be a finite number > 0; got {value!r}")
    return float(value)


def _iterations(value: int) -> int:
    if not (isinstance(value, int) and value >= 1):
        raise ConfigError(f"option 'iterations' must be a positive integer; got {value!r}")
    return value


# -- paper A: Theorem 4.1, Remark 1, Corollary 4.2, Sec. 5.3 ------------------------------------
FORMS = ("proof", "printed")
DEFAULT_FORM = "proof"  # what Theorem 4.1's proof establishes; see the module docstring


def _check_form(form: str) -> str:
    if form not in FORMS:
        raise ConfigError(f"option 'form' must be one of {', '.join(FORMS)}; got {form!r}")
    return form


def in_theorem_range(eps: float) -> bool:
    """Theorem 4.1 and Corollary 4.2 are stated for 0 < eps < 1 only (the Gaussian mechanism of
    Dwork & Roth, Thm. A.1)."""
    return 0 < eps < 1


def theorem_sensitivity(T: float, lipschitz: float, l_eps: float = 0.0) -> float:
    """Sensitivity T L_f of the flow map (Theorem 4.1's proof), plus L_eps for Euler-Maruyama
    (Remark 1)."""
    if not (l_eps >= 0 and math.isfinite(l_eps)):
        raise ConfigError(f"option 'l_eps' must be a finite number >= 0; got {l_eps!r}")
    return _positive(T, "T") * _positive(lipschitz, "lipschitz") + float(l_eps)


def _gaussian_constant(delta: float) -> float:
    """sqrt(2 ln(1.25 / delta)) of the Gaussian mechanism (Dwork & Roth, Thm. A.1)."""
    return math.sqrt(2 * math.log(1.25 / check_delta(delta)))


def _require_range(eps: float, name: str) -> float:
    eps = _positive(eps, name)
    if not in_theorem_range(eps):
        raise ConfigError(f"option {name!r} = {eps:g} is outside the theorem's range 0 < eps < 1 "
                         "(paper A, Theorem 4.1 / Corollary 4.2): no sigma is claimed for it")
    return eps


def theorem41_sigma(epsilon: float, delta: float, *, T: float, lipschitz: float,
                    l_eps: float = 0.0, form: str = DEFAULT_FORM) -> float:
    """Smallest sigma of paper A's Theorem 4.1 for (epsilon, delta)-DP of the flow map.

    proof form: sqrt(2 ln(1.25/delta)) S / epsilon; printed form: sqrt(2 ln(1.25/delta)) (S /
    epsilon)^2; S = T L_f (+ L_eps, Remark 1). A ValueError unless 0 < epsilon < 1."""
    epsilon = _require_range(epsilon, "epsilon")
    ratio = theorem_sensitivity(T, lipschitz, l_eps) / epsilon
    factor = ratio if _check_form(form) == "proof" else ratio**2
    return _gaussian_constant(delta) * factor


def theorem41_epsilon(sigma: float, delta: float, *, T: float, lipschitz: float,
                      l_eps: float = 0.0, form: str = DEFAULT_FORM) -> float:
    """The epsilon at which ``sigma`` meets Theorem 4.1 with equality (inverse of
    :func:`theorem41_sigma`): proof form c S / sigma, printed form S sqrt(c / sigma), with
    c = sqrt(2 ln(1.25/delta)). Meaningful only when :func:`in_theorem_range` holds for it."""
    sigma = _positive(sigma, "sigma")
    c, sensitivity = _gaussian_constant(delta), theorem_sensitivity(T, lipschitz, l_eps)
    if _check_form(form) == "proof":
        return c * sensitivity / sigma
    return sensitivity * math.sqrt(c / sigma)


def _corollary_constant(delta: float, delta_prime: float, iterations: int) -> float:
    check_delta(delta_prime, "delta_prime")
    return 4 * math.sqrt(_iterations(iterations) * math.log(1.25 / check_delta(delta))
                         * math.log(1 / delta_prime))


def corollary42_sigma(epsilon_prime: float, delta: float, delta_prime: float, iterations: int,
                      *, T: float, lipschitz: float, l_eps: float = 0.0) -> float:
    """Paper A's Corollary 4.2: sigma for (epsilon', K delta + delta')-DP of K training
    iterations, 4 sqrt(K ln(1.25/delta) ln(1/delta')) S / epsilon' (0 < epsilon' < 1)."""
    epsilon_prime = _require_range(epsilon_prime, "epsilon_prime")
    return (_corollary_constant(delta, delta_prime, iterations)
            * theorem_sensitivity(T, lipschitz, l_eps) / epsilon_prime)


def corollary42_epsilon(sigma: float, delta: float, delta_prime: float, iterations: int, *,
                        T: float, lipschitz: float, l_eps: float = 0.0) -> float:
    """Inverse of :func:`corollary42_sigma`: the epsilon' that ``sigma`` buys over K
    iterations (the total delta is K delta + delta')."""
    return (_corollary_constant(delta, delta_prime, iterations)
            * theorem_sensitivity(T, lipschitz, l_eps) / _positive(sigma, "sigma"))


def nsde_guarantee(sigma: float, T: float, lipschitz: float, delta: float,
                   form: str = DEFAULT_FORM, *, epsilon: float | None = None,
                   l_eps: float = 0.0, n_sde_blocks: int = 1, iterations: int | None = None,
                   delta_prime: float | None = None) -> dict[str, Any]:
    """Paper A's guarantee for an NSDE with Theorem-4.1 sigma ``sigma`` (JSON-able), to record
    beside the accountant epsilon (as in the study's Fig. 5).

    Keys: the inputs; ``sensitivity`` (T L + L_eps); ``epsilon_implied`` (Theorem 4.1 inverted
    in ``form``) and ``in_range`` (0 < epsilon_implied < 1: only then does the theorem make a
    claim); with ``epsilon``: ``sigma_required`` (None outside the theorem's range) and
    ``sigma_satisfied``; with ``iterations`` K (and ``delta_prime``, default ``delta``):
    Corollary 4.2's ``corollary_epsilon`` over K iterations, ``corollary_delta`` (K delta +
    delta') and ``corollary_in_range``. ``n_sde_blocks`` is recorded only: blocks in sequence
    are post-processing (Sec. 5.3) and do not change epsilon."""
    _check_form(form)
    if not (isinstance(n_sde_blocks, int) and n_sde_blocks >= 1):
        raise ConfigError(f"option 'n_sde_blocks' must be a positive integer; got {n_sde_blocks!r}")
    implied = theorem41_epsilon(sigma, delta, T=T, lipschitz=lipschitz, l_eps=l_eps, form=form)
    out: dict[str, Any] = {
        "theorem": "paper A, Theorem 4.1 (Remark 1 for l_eps > 0)", "form": form,
        "sigma": float(sigma), "T": float(T), "lipschitz": float(lipschitz),
        "l_eps": float(l_eps), "delta": float(delta),
        "sensitivity": theorem_sensitivity(T, lipschitz, l_eps),
        "epsilon_implied": implied, "in_range": in_theorem_range(implied),
        "n_sde_blocks": n_sde_blocks, "blocks": "post-processing (Sec. 5.3): same epsilon",
    }
    if epsilon is not None:
        required = (theorem41_sigma(epsilon, delta, T=T, lipschitz=lipschitz, l_eps=l_eps,
                                    form=form) if in_theorem_range(epsilon) else None)
        out.update(epsilon=float(epsilon), sigma_required=required,
                   sigma_satisfied=None if required is None else bool(sigma >= required))
    if iterations is not None:
        d_prime = delta if delta_prime is None else delta_prime
        eps_k = corollary42_epsilon(sigma, delta, d_prime, iterations, T=T, lipschitz=lipschitz,
                                    l_eps=l_eps)
        out.update(iterations=iterations, delta_prime=float(d_prime), corollary_epsilon=eps_k,
                   corollary_delta=iterations * delta + d_prime,
                   corollary_in_range=in_theorem_range(eps_k))
    return out


def model_guarantee(model: nn.Module, delta: float, form: str = DEFAULT_FORM, *,
                    lipschitz: float | None = None, **options: Any) -> dict[str, Any]:
    """:func:`nsde_guarantee` for a built SDE model: its Theorem-4.1 sigma (``sigma_theorem``),
    T and number of SDE blocks from :func:`miaudit.models.sde.sde_parameters`; L from the
    drift's bound (``spectral_norm=True``) unless ``lipschitz`` is given (recorded in
    ``lipschitz_source``). ``options`` go to :func:`nsde_guarantee`."""
    params = model_sde_parameters(model)
    bound = params.get("lipschitz_bound")
    L = bound if lipschitz is None else lipschitz
    if L is None:
        raise ConfigError("the drift's Lipschitz constant is unknown (its drift has "
                         "normalization layers): build the model with spectral_norm=True or "
                         "pass option 'lipschitz'")
    if params["sigma_theorem"] <= 0:
        raise ConfigError("the model adds no noise (k = 0): no DP guarantee")
    out = nsde_guarantee(params["sigma_theorem"], params["T"], L, delta, form,
                         n_sde_blocks=int(params["n_sde_blocks"]), **options)
    out["lipschitz_source"] = "given" if lipschitz is not None else "spectral-norm bound"
    out["sde_convention"] = params.get("convention")
    return out


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
    """The SDE parameters of ``model`` (:func:`miaudit.models.sde.sde_parameters`); a
    ValueError if the model has no SDE block."""
    from miaudit.models.sde import sde_parameters

    params = sde_parameters(model)
    if not params:
        raise ConfigError(f"model {type(model).__name__} has no stochastic (SDE) block")
    return params
