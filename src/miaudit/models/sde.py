"""SDENet: ODENet-16-32-64 with additive diffusion in its ODE blocks (neural SDEs as the
membership-inference mitigation of "Understanding and Mitigating Membership Inference Risks of
Neural ODEs"; architecture and stepper of Oganesyan et al. 2020, "Stochasticity in neural ODEs").

Each SDE block integrates an additive-noise SDE over [0, T] in ``steps`` = s steps of
dt = T / s, with the drift f the ODE function of :mod:`miaudit.models.ode`.

Noise conventions (option ``convention``; every quantity is reported by
:func:`sde_parameters`). Both take the study's parameters k ("stochasticity"), T and s, and
both label the configuration with the study's sigma = k sqrt(s / T) (paper A, Table 9: k = 0.5,
T = 1, s = 16 -> sigma = 2, the study's default; s = 8 -> 1.41; s = 32 -> 2.83):

- ``"paper"``: the Table-9 sigma *is* Theorem 4.1's sigma. The block solves
  dh = f dt + (sigma / sqrt(T)) dB (paper A, Theorem 4.1), so the **diffusion coefficient** is
  g = sigma / sqrt(T) = k sqrt(s) / T, the **per-step increment** is W = g sqrt(dt) xi with
  std sigma / sqrt(s) = k / sqrt(T), and the noise added over the block sums to
  N(0, sigma^2 I): ``sigma_theorem = sigma``. At k = 0.5, s = 16, T = 1: per-step std 0.5,
  total std 2.
- ``"oganesyan"`` (default): the stochastic-RK4 reference code of Oganesyan et al. 2020, increment
  W = k sqrt(dt) xi, i.e. diffusion coefficient g = k, per-step std k sqrt(T / s), total noise
  N(0, k^2 T I): ``sigma_theorem = k sqrt(T)`` (0.5 at the default), 1 / sqrt(s) of the
  Table-9 label. This is what running that code with the study's k gives.

The two agree when s = 1 and T = 1. Map between them: per-step std ``paper`` / ``oganesyan`` =
sqrt(s) / T.

Which one the study ran is not stated; the evidence conflicts. For ``paper``: Table 9's
accuracies track the label sigma alone (every sigma = 2 row, from (s, T, k) = (8, 1, 0.71) to
(32, 0.125, 0.13), reaches 81.7-82.5% test accuracy; sigma = 4: 80.8-81.2%; 5.7: 79.7-80.1%;
8: 77.2-77.4%), while under ``oganesyan`` the total noise k sqrt(T) of those sigma = 2 rows
spans 0.05-0.71. For ``oganesyan`` (the default): the study's code lineage (Oganesyan et al.'s
SDENet), its label sigma = k / sqrt(T/s) = W / dt (the std of the noise added to the drift
evaluation, f + sigma xi, which under Euler gives exactly W = k sqrt(dt) xi), and its accuracy:
NSDE sigma = 2 is 2.5 points below NODE (Table 2, 81.9% vs 84.4%). Measured here (CIFAR-10,
5,000 training / 1,000 test images, width 0.25, Euler(-Maruyama) 16 steps, 10 epochs SGD lr
0.1 cosine, wd 5e-4, flip + crop; noise on at test; one seed): ODENet 46.6%; SDENet
``oganesyan`` 43.8% (2.8 points below, as in the study; 39.7% with the srk4 stepper); SDENet
``paper`` 17.2% (29 points below; 14.9% without weight decay): total noise std 2 per block
against unit-scale normalized features costs far more than the study's 2.5 points. Use
``convention="paper"`` where the model must realise Theorem 4.1's sigma = 2 literally.

Steppers, hand-written because torchsde has no stochastic RK4 (its strongest, ``srk``, is a
different order-1.5 Ito scheme) and because a plain Python loop keeps Opacus's per-sample
gradients exact:

- ``srk4`` (Oganesyan et al. 2020): one increment W per step; k1 = f(t, y);
  k2 = f(t + dt/2, y + dt k1/2 + W/2); k3 = f(t + dt/2, y + dt k2/2 + W/2);
  k4 = f(t + dt, y + dt k3 + W); y <- y + dt/6 (k1 + 2 k2 + 2 k3 + k4) + W.
- ``euler_maruyama``: y <- y + dt f(t, y) + W.

Noise is on in training and in eval mode (the released, audited outputs: the DP argument
protects only the noisy output); ``deterministic_eval=True`` turns it off in eval mode for
accuracy studies. ``k = 0`` (or ``sigma = 0``) is the non-private ODE variant.

``spectral_norm=True`` wraps the drift's convolutions in
``torch.nn.utils.parametrizations.spectral_norm`` and drops the drift's norm layers, so the
drift's Lipschitz constant L (needed by Theorem 4.1) has a known bound, computed from the current
weights by :func:`drift_lipschitz_bound`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils.parametrizations import spectral_norm as spectral_norm_wrap

from miaudit.models.ode import ODEFunc, odenet_widths
from miaudit.models.staged import (
    StagedNet,
    check_norm,
    check_stem_stride,
    cifar_stem,
    image_channels,
    staged_layout,
)
from miaudit.registry import MODELS

STEPPERS = ("srk4", "euler_maruyama")


CONVENTIONS = ("paper", "oganesyan")
DEFAULT_CONVENTION = "oganesyan"  # see the module docstring: the accuracy check decided it


@dataclass(frozen=True)
class NoiseSchedule:
    """Integration time, steps and noise of an SDE block (see the module docstring)."""

    k: float = 0.5
    T: float = 1.0
    steps: int = 16
    stepper: str = "srk4"
    convention: str = DEFAULT_CONVENTION

    def __post_init__(self) -> None:
        if not self.k >= 0:
            raise ValueError(f"option 'k' (stochasticity) must be >= 0; got {self.k!r}")
        if not self.T > 0:
            raise ValueError(f"option 'T' (integration time) must be > 0; got {self.T!r}")
        if not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"option 'steps' must be a positive integer; got {self.steps!r}")
        if self.stepper not in STEPPERS:
            raise ValueError(f"option 'stepper' must be one of {', '.join(STEPPERS)}; "
                             f"got {self.stepper!r}")
        if self.convention not in CONVENTIONS:
            raise ValueError(f"option 'convention' must be one of {', '.join(CONVENTIONS)}; "
                             f"got {self.convention!r}")

    @property
    def dt(self) -> float:
        return self.T / self.steps

    @property
    def sigma(self) -> float:
        """The study's sigma = k sqrt(s / T) (paper A, Table 9), in either convention."""
        return self.k * math.sqrt(self.steps / self.T)

    @property
    def diffusion(self) -> float:
        """Diffusion coefficient g of dh = f dt + g dB: sigma / sqrt(T) (paper) or k
        (Oganesyan et al.)."""
        if self.convention == "paper":
            return self.sigma / math.sqrt(self.T)
        return self.k

    @property
    def per_step_std(self) -> float:
        """Std of one step's Brownian increment W = g sqrt(dt) xi."""
        return self.diffusion * math.sqrt(self.dt)

    @property
    def sigma_theorem(self) -> float:
        """Theorem 4.1's sigma: the std of the noise added over [0, T], g sqrt(T)."""
        return self.diffusion * math.sqrt(self.T)


def noise_schedule(k: float | None = None, sigma: float | None = None, T: float = 1.0,
                   steps: int = 16, stepper: str = "srk4",
                   convention: str = DEFAULT_CONVENTION) -> NoiseSchedule:
    """From either ``k`` or the study's ``sigma`` = k sqrt(steps / T); k = 0.5 (sigma = 2 at
    T = 1, 16 steps) if neither is given."""
    if k is not None and sigma is not None:
        raise ValueError("give option 'k' or option 'sigma', not both (sigma = k sqrt(steps/T))")
    if sigma is not None:
        if not sigma >= 0:
            raise ValueError(f"option 'sigma' must be >= 0; got {sigma!r}")
        if not isinstance(steps, int) or steps < 1 or not T > 0:
            raise ValueError(f"options 'steps' and 'T' must be positive; got {steps!r}, {T!r}")
        k = sigma * math.sqrt(T / steps)
    return NoiseSchedule(k=float(0.5 if k is None else k), T=float(T), steps=steps,
                         stepper=stepper, convention=convention)


def srk4_step(f: nn.Module, t: float, dt: float, y: Tensor, w: Tensor | None) -> Tensor:
    """Oganesyan et al. 2020's stochastic RK4 step (classical RK4 when ``w`` is None)."""
    half = 0.0 if w is None else w / 2
    full = 0.0 if w is None else w
    k1 = f(t, y)
    k2 = f(t + dt / 2, y + dt * k1 / 2 + half)
    k3 = f(t + dt / 2, y + dt * k2 / 2 + half)
    k4 = f(t + dt, y + dt * k3 + full)
    return y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4) + full


def euler_maruyama_step(f: nn.Module, t: float, dt: float, y: Tensor, w: Tensor | None) -> Tensor:
    out = y + dt * f(t, y)
    return out if w is None else out + w


_STEP = {"srk4": srk4_step, "euler_maruyama": euler_maruyama_step}


class SDEBlock(nn.Module):
    """h(0) = x -> h(T) of dh = func(t, h) dt + sigma dB, additive noise, fixed steps.

    ``stochastic=False`` makes a deterministic block with the same stepper (SDENet's blocks
    beyond ``n_sde_blocks``)."""

    def __init__(self, func: nn.Module, schedule: NoiseSchedule, deterministic_eval: bool = False,
                 stochastic: bool = True):
        super().__init__()
        self.func = func
        # Fixed steps and plain autograd: Opacus's per-sample gradients are exact, except that
        # Opacus has no grad sampler for parametrized (spectral-normalized) convolutions.
        self.dp_incompatibility = (
            "spectral_norm=True: Opacus cannot compute per-sample gradients of parametrized "
            "(spectral-normalized) convolutions" if _has_spectral_norm(func) else None)
        self.schedule = schedule
        self.deterministic_eval = deterministic_eval
        self.stochastic = stochastic

    @property
    def noisy(self) -> bool:
        on = self.training or not self.deterministic_eval
        return self.stochastic and self.schedule.k > 0 and on

    def increment(self, like: Tensor) -> Tensor:
        """Brownian increment g sqrt(dt) N(0, I) of one step (``NoiseSchedule.per_step_std``).

        Drawn in float32 in the default layout, then given ``like``'s dtype and layout: on CPU,
        ``normal_`` into a channels_last tensor (bf16 training) takes a strided path about 7x
        slower than into a contiguous one, which ate the whole bf16 speed-up of SDENet; the
        float32 draw is the same one fp32 training makes (bit-identical there)."""
        noise = self.schedule.per_step_std * torch.randn(like.shape, device=like.device)
        if like.dim() == 4 and not like.is_contiguous() \
                and like.is_contiguous(memory_format=torch.channels_last):
            noise = noise.contiguous(memory_format=torch.channels_last)
        return noise.to(like.dtype)

    def forward(self, x: Tensor) -> Tensor:
        step, dt, noisy = _STEP[self.schedule.stepper], self.schedule.dt, self.noisy
        y = x
        for i in range(self.schedule.steps):
            y = step(self.func, i * dt, dt, y, self.increment(y) if noisy else None)
        return y


def make_drift(channels: int, norm: str, spectral_norm: bool) -> ODEFunc:
    func = ODEFunc(channels, norm=norm)
    if spectral_norm:
        for conv in (func.conv1, func.conv2):
            conv.layer = spectral_norm_wrap(conv.layer)
    return func


@torch.no_grad()
def drift_lipschitz_bound(func: ODEFunc) -> float | None:
    """Upper bound on the Lipschitz constant in h of the drift (L2 norms), or None when the
    drift has normalization layers (no a-priori bound: GroupNorm divides by a data std).

    A stride-1 conv with kernel kh x kw is W_mat @ im2col(x), and zero-padded im2col repeats
    each input element at most kh*kw times, so ||conv|| <= sqrt(kh kw) ||W_mat||_2 (Tsuzuku et
    al. 2018, "Lipschitz-margin training", Prop. 2); the t channel is constant in h and is
    dropped; ReLU is 1-Lipschitz. Uses the exact largest singular value of the current weights,
    so it holds with or without spectral normalization (which makes it about 3 x 3 = 9)."""
    if not (isinstance(func.norm1, nn.Identity) and isinstance(func.norm2, nn.Identity)):
        return None
    bound = 1.0
    for conv in (func.conv1.layer, func.conv2.layer):
        if conv.stride != (1, 1):
            raise ValueError("the Lipschitz bound assumes stride-1 convolutions")
        weight = conv.weight[:, 1:]
        kh, kw = weight.shape[-2:]
        matrix = weight.reshape(weight.shape[0], -1).double()
        bound *= math.sqrt(kh * kw) * torch.linalg.matrix_norm(matrix, ord=2).item()
    return bound


def switch_noise_off(model: nn.Module) -> int:
    """Evaluate ``model``'s stochastic SDE blocks on their drift alone (no noise in eval mode;
    training is unchanged), e.g. for an accuracy-only comparison with an ODE: the released
    outputs an audit scores keep the noise. Returns how many blocks were switched (0: not an
    SDE model)."""
    blocks = [m for m in model.modules() if isinstance(m, SDEBlock) and m.stochastic]
    for block in blocks:
        block.deterministic_eval = True
    return len(blocks)


def sde_parameters(model: nn.Module) -> dict[str, Any] | None:
    """k, T, steps, dt, convention, sigma (study's), diffusion, sigma_theorem, per-step std,
    stepper, number of
    stochastic blocks, whether noise is on in eval, and the drift Lipschitz bound (max over
    blocks; None if any drift has normalization layers). None if ``model`` has no SDE block."""
    blocks = [m for m in model.modules() if isinstance(m, SDEBlock) and m.stochastic]
    if not blocks:
        return None
    schedule = blocks[0].schedule
    if any(b.schedule != schedule for b in blocks):
        raise ValueError("SDE blocks of this model have different noise schedules")
    bounds = [drift_lipschitz_bound(b.func) for b in blocks]
    return {
        "k": schedule.k, "T": schedule.T, "steps": schedule.steps, "dt": schedule.dt,
        "convention": schedule.convention, "sigma": schedule.sigma,
        "diffusion": schedule.diffusion, "sigma_theorem": schedule.sigma_theorem,
        "per_step_std": schedule.per_step_std, "stepper": schedule.stepper,
        "n_sde_blocks": len(blocks),
        "noise_in_eval": not blocks[0].deterministic_eval,
        "spectral_norm": any(_has_spectral_norm(b.func) for b in blocks),
        "lipschitz_bound": None if None in bounds else max(bounds),
        "lipschitz_bounds": bounds,
    }


def _has_spectral_norm(func: nn.Module) -> bool:
    return any(hasattr(m, "parametrizations") for m in func.modules())


def sde_block(channels: int, schedule: NoiseSchedule, norm: str = "batch",
              spectral_norm: bool = False, deterministic_eval: bool = False,
              stochastic: bool = True) -> SDEBlock:
    """A freshly initialized SDE block of width ``channels`` (also used by replace-then-
    finetune)."""
    if spectral_norm and norm != "none":
        raise ValueError("spectral_norm=True needs the drift without normalization layers "
                         f"(ode_norm='none'); got {norm!r}: a norm layer has no Lipschitz bound")
    return SDEBlock(make_drift(channels, norm, spectral_norm), schedule, deterministic_eval,
                    stochastic)


def check_sdenet(*, k: float | None, sigma: float | None, T: float, steps: int, stepper: str,
                 convention: str, blocks: int, n_sde_blocks: int | None, norm: str,
                 ode_norm: str | None, spectral_norm: bool, stem_stride: int,
                 **unchecked: object) -> tuple[NoiseSchedule, str, int]:
    """sdenet's option values (the config checks them before any data is loaded): its noise
    schedule, the drift's norm and the number of stochastic blocks."""
    check_norm(norm)
    ode_norm = ("none" if spectral_norm else norm) if ode_norm is None else ode_norm
    check_norm(ode_norm, "ode_norm")
    if blocks not in (1, 2, 3):
        raise ValueError(f"option 'blocks' (SDE blocks per group) must be 1, 2 or 3; "
                         f"got {blocks!r}")
    total = 3 * blocks
    n_sde = total if n_sde_blocks is None else n_sde_blocks
    if not isinstance(n_sde, int) or not 0 <= n_sde <= total:
        raise ValueError(f"option 'n_sde_blocks' must be an integer in 0..{total}; "
                         f"got {n_sde_blocks!r}")
    check_stem_stride(stem_stride)
    return noise_schedule(k, sigma, T, steps, stepper, convention), ode_norm, n_sde


@MODELS.register("sdenet", check=check_sdenet)
def sdenet(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0,
           k: float | None = None, sigma: float | None = None, T: float = 1.0, steps: int = 16,
           stepper: str = "srk4", convention: str = DEFAULT_CONVENTION, blocks: int = 1,
           n_sde_blocks: int | None = None, deterministic_eval: bool = False,
           norm: str = "batch", ode_norm: str | None = None, spectral_norm: bool = False,
           stem_stride: int = 2) -> StagedNet:
    """SDENet: ODENet-16-32-64 (same stem and 32/64/128 groups) with additive noise in its
    blocks; default k = 0.5, T = 1, s = 16 steps, i.e. the study's sigma = 2 (paper A, Table 9),
    with Oganesyan et al.'s increment k sqrt(dt) xi (Theorem 4.1's sigma 0.5).

    Options: ``k`` (default 0.5) or ``sigma`` (= k sqrt(steps/T)), ``T``, ``steps``,
    ``convention`` oganesyan (default) | paper (module docstring), ``stepper`` srk4 |
    euler_maruyama, ``blocks`` per group (1-3), ``n_sde_blocks``
    (the last n blocks are stochastic, the others deterministic; default all),
    ``deterministic_eval``, ``norm`` (skeleton) and ``ode_norm`` (drift; default ``norm``, or
    none with ``spectral_norm``), ``spectral_norm`` (Lipschitz-bounded drift), ``stem_stride``
    2 (paper) or 1."""
    cin = image_channels(input_shape, "sdenet")
    schedule, ode_norm, n_sde = check_sdenet(
        k=k, sigma=sigma, T=T, steps=steps, stepper=stepper, convention=convention,
        blocks=blocks, n_sde_blocks=n_sde_blocks, norm=norm, ode_norm=ode_norm,
        spectral_norm=spectral_norm, stem_stride=stem_stride)
    total = 3 * blocks
    widths = odenet_widths(width)
    made = iter(range(total))

    def make_blocks(channels: int) -> nn.Sequential:
        return nn.Sequential(*[
            sde_block(channels, schedule, ode_norm, spectral_norm, deterministic_eval,
                      stochastic=next(made) >= total - n_sde)
            for _ in range(blocks)])

    return staged_layout(cin, widths, make_blocks, norm,
                         cifar_stem(cin, widths[0], norm, stem_stride), num_classes)
