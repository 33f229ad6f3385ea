"""Neural-ODE image classifiers of the neural-ODE membership study, integrated with torchdiffeq.

- ``odenet``: ODENet-16-32-64, ResNet-14's skeleton (stride-2 stem, groups at 32/64/128 as
  paper A's Appendix A gives them; Oganesyan et al. 2020's layout) with ODE blocks instead of
  residual groups.
- ``odenet64``: Chen et al. 2018's classifier: downsampling stem, one ODE block at width 64.
- ``anode``: ``odenet64`` with k zero channels appended before the block (Dupont et al. 2019;
  paper A's Table 7 runs k = 16 and k = 64: option ``augment_channels``).
- ``sonode`` and ``hbnode``, second-order ODEs around the same block:
  :mod:`miaudit.models.ode_second_order`.

ODE function (Oganesyan et al.; Chen et al.): norm -> ReLU -> ConcatConv2d -> norm -> ReLU ->
ConcatConv2d, where ConcatConv2d sees t as an extra constant input channel. With t = 0, the
euler solver and one step of size 1, an ODE block *is* a pre-activation residual block with the
same weights (the ResNet-as-Euler identity the study relies on; tested).

BatchNorm inside the ODE function (``bn_stats``): in training mode BatchNorm normalizes each
function evaluation with its own batch statistics, but it keeps one set of running statistics,
the average over all the evaluations of a solve. Where the state's distribution changes along
the solve, eval mode then normalizes each step with statistics of the wrong step: SONODE's
velocity and ANODE's extra channels start at exactly zero (variance 0 at t = 0, growing after),
and such models lose accuracy in eval mode (CIFAR-10, 5,000 images, 8 epochs: SONODE 51.0% train
accuracy with batch statistics vs 46.3% in eval mode; ODENet-64, whose state moves little per
step, 50.8% vs 50.2%; after 30 epochs on 10,800 images SONODE tested 37.7% with shared
statistics (trained on a GPU) and 74.9% with per-evaluation ones; experiments/README.md).
``bn_stats="per_evaluation"`` keeps running statistics per function evaluation of a fixed-step
solve (affine parameters shared): training is unchanged, and eval mode normalizes each
evaluation with its own step's statistics. ``"shared"`` (default) is torch's BatchNorm2d.

Solvers (torchdiffeq): ``euler`` (default), ``rk4`` (torchdiffeq's is the 3/8 rule), fixed grid
of ``steps`` steps of size T / steps; ``dopri5`` adaptive (rtol, atol). ``adjoint=True`` uses
``odeint_adjoint``. Per-sample gradients (Opacus, DP-SGD) are correct only for fixed-step solvers
without adjoint: adaptive solvers take one step size per batch, coupling the samples. Each block
says so in ``dp_incompatibility`` (None when compatible); :func:`dp_incompatibilities` lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torchdiffeq import odeint, odeint_adjoint

from miaudit.models._base import scaled
from miaudit.models.staged import (
    Stage,
    StagedNet,
    check_norm,
    check_stem_stride,
    cifar_stem,
    image_channels,
    norm_layer,
    staged_layout,
)
from miaudit.registry import MODELS

SOLVERS = ("euler", "rk4", "dopri5")
#: function evaluations per step of each fixed-step solver (torchdiffeq's rk4 is the 3/8 rule)
EVALUATIONS_PER_STEP = {"euler": 1, "rk4": 4}
FIXED_STEP = tuple(EVALUATIONS_PER_STEP)
BN_STATS = ("shared", "per_evaluation")


class StepBatchNorm2d(nn.Module):
    """BatchNorm2d with running statistics per function evaluation of a fixed-step solve and
    one affine (weight, bias) for all of them.

    The k-th call after :meth:`restart` uses (and, training, updates) row k of the running
    statistics; training mode normalizes with the batch's statistics like BatchNorm2d, so a
    model trains exactly as with BatchNorm2d and differs only in eval mode. Hand-written: torch
    has no BatchNorm with indexed running statistics."""

    # dpsgd replaces torch's BatchNorm layers by GroupNorm, but not this one: refuse instead.
    dp_incompatibility = ("BatchNorm statistics per solver evaluation (bn_stats="
                          "'per_evaluation') mix the samples of a batch; use bn_stats='shared', "
                          "whose BatchNorm dpsgd replaces by GroupNorm")

    def __init__(self, channels: int, evaluations: int, momentum: float = 0.1, eps: float = 1e-5):
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(evaluations, channels))
        self.register_buffer("running_var", torch.ones(evaluations, channels))
        self.evaluation = 0

    def restart(self) -> None:
        """The next call is the first evaluation of a new solve."""
        self.evaluation = 0

    def forward(self, x: Tensor) -> Tensor:
        k = self.evaluation
        if k >= len(self.running_mean):
            raise RuntimeError(f"StepBatchNorm2d holds statistics for {len(self.running_mean)} "
                               f"function evaluations per solve; evaluation {k + 1} was asked "
                               "(a solver that takes more evaluations than it was built for)")
        self.evaluation += 1
        # Rows of a contiguous buffer are views: batch_norm updates them in place.
        return nn.functional.batch_norm(x, self.running_mean[k], self.running_var[k],
                                        self.weight, self.bias, self.training,
                                        self.momentum, self.eps)


def ode_norm(kind: str, channels: int, evaluations: int | None) -> nn.Module:
    """The ODE function's norm layer: ``norm_layer``, or per-evaluation BatchNorm statistics
    when ``evaluations`` (per solve) is given."""
    if evaluations is None:
        return norm_layer(kind, channels)
    return StepBatchNorm2d(channels, evaluations)


def restart_evaluations(func: nn.Module) -> None:
    for module in func.modules():
        if isinstance(module, StepBatchNorm2d):
            module.restart()


class ConcatConv2d(nn.Module):
    """Conv over [t * ones, x]: the time-dependent layer of Chen et al. 2018."""

    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, padding: int = 1,
                 bias: bool = True):
        super().__init__()
        self.layer = nn.Conv2d(cin + 1, cout, kernel, stride=stride, padding=padding, bias=bias)

    def forward(self, t: Tensor | float, x: Tensor) -> Tensor:
        tt = torch.ones_like(x[:, :1]) * t
        return self.layer(torch.cat([tt, x], dim=1))


class ODEFunc(nn.Module):
    """f(t, x) = ConcatConv(ReLU(norm(ConcatConv(ReLU(norm(x)))))); ``nfe`` counts evaluations
    (cumulative; reset it to 0 to count one pass). ``evaluations`` (per solve): BatchNorm with
    running statistics per evaluation (:class:`StepBatchNorm2d`); None: ``norm_layer(norm)``."""

    def __init__(self, cin: int, cout: int | None = None, norm: str = "batch",
                 evaluations: int | None = None):
        super().__init__()
        cout = cin if cout is None else cout
        self.norm1 = ode_norm(norm, cin, evaluations)
        self.conv1 = ConcatConv2d(cin, cout)
        self.norm2 = ode_norm(norm, cout, evaluations)
        self.conv2 = ConcatConv2d(cout, cout)
        self.relu = nn.ReLU()
        self.nfe = 0

    def forward(self, t: Tensor, x: Tensor) -> Tensor:
        self.nfe += 1
        out = self.conv1(t, self.relu(self.norm1(x)))
        return self.conv2(t, self.relu(self.norm2(out)))


@dataclass(frozen=True)
class Solver:
    """How an ODE block integrates over [0, T]."""

    method: str = "euler"
    steps: int = 16
    T: float = 1.0
    adjoint: bool = False
    rtol: float = 1e-3
    atol: float = 1e-3

    def __post_init__(self) -> None:
        if self.method not in SOLVERS:
            raise ValueError(f"option 'solver' must be one of {', '.join(SOLVERS)}; "
                             f"got {self.method!r}")
        if not isinstance(self.steps, int) or self.steps < 1:
            raise ValueError(f"option 'steps' must be a positive integer; got {self.steps!r}")
        if not self.T > 0:
            raise ValueError(f"option 'T' (integration time) must be > 0; got {self.T!r}")
        if not (self.rtol > 0 and self.atol > 0):
            raise ValueError(f"options 'rtol' and 'atol' must be > 0; got {self.rtol}, {self.atol}")

    @property
    def dp_incompatibility(self) -> str | None:
        if self.method not in FIXED_STEP:
            return (f"solver {self.method!r} is adaptive: one step size per batch couples the "
                    "samples, so per-sample gradients (DP-SGD) are not defined; use euler or rk4")
        if self.adjoint:
            return "adjoint=True: Opacus cannot compute per-sample gradients through the adjoint"
        return None

    @property
    def evaluations(self) -> int | None:
        """Function evaluations per solve (fixed-step solvers; None for adaptive ones)."""
        per_step = EVALUATIONS_PER_STEP.get(self.method)
        return None if per_step is None else per_step * self.steps

    def integrate(self, func: nn.Module, y0: Tensor) -> Tensor:
        """State at time T."""
        restart_evaluations(func)
        if self.method in FIXED_STEP:
            # An explicit grid of steps + 1 points gives exactly `steps` steps; torchdiffeq's
            # step_size option rounds (T / step_size) and may add a tiny extra step.
            t = torch.linspace(0.0, self.T, self.steps + 1, dtype=y0.dtype, device=y0.device)
            options = {}
        else:
            t = torch.tensor([0.0, self.T], dtype=y0.dtype, device=y0.device)
            options = {"rtol": self.rtol, "atol": self.atol}
        solve = odeint_adjoint if self.adjoint else odeint
        return solve(func, y0, t, method=self.method, **options)[-1]


class ODEBlock(nn.Module):
    """x -> solution at time T of dx/dt = func(t, x), x(0) = x."""

    def __init__(self, func: nn.Module, solver: Solver):
        super().__init__()
        self.func = func
        self.solver = solver
        self.dp_incompatibility = solver.dp_incompatibility

    def forward(self, x: Tensor) -> Tensor:
        return self.solver.integrate(self.func, x)


class ZeroChannels(nn.Module):
    """Appends ``k`` zero channels (ANODE's augmentation, Dupont et al. 2019)."""

    def __init__(self, k: int):
        super().__init__()
        self.k = k

    def forward(self, x: Tensor) -> Tensor:
        zeros = x.new_zeros(x.shape[0], self.k, *x.shape[2:])
        return torch.cat([x, zeros], dim=1)


def dp_incompatibilities(model: nn.Module) -> list[str]:
    """Reasons why per-sample gradients (Opacus) would be wrong for ``model``; empty if none.
    Modules declare them in a ``dp_incompatibility`` attribute."""
    reasons = {getattr(m, "dp_incompatibility", None) for m in model.modules()}
    return sorted(r for r in reasons if r)


def make_solver(solver: str, steps: int, T: float, adjoint: bool, rtol: float,
                atol: float) -> Solver:
    """The torchdiffeq integration a model's options ask for."""
    return Solver(method=solver, steps=steps, T=float(T), adjoint=bool(adjoint), rtol=rtol,
                  atol=atol)


def _check_blocks(blocks: int) -> None:
    if blocks not in (1, 2, 3):
        raise ValueError(f"option 'blocks' (ODE blocks per group) must be 1, 2 or 3; "
                         f"got {blocks!r}")


def _check_augment(augment: int) -> None:
    if not isinstance(augment, int) or augment < 1:
        raise ValueError(f"option 'augment_channels' (zero channels) must be a positive "
                         f"integer; got {augment!r}")


def step_evaluations(bn_stats: str, norm: str, integrator: Solver) -> int | None:
    """Evaluations per solve for per-evaluation BatchNorm statistics; None for ``shared``."""
    if bn_stats not in BN_STATS:
        raise ValueError(f"option 'bn_stats' must be one of {', '.join(BN_STATS)}; "
                         f"got {bn_stats!r}")
    if bn_stats == "shared":
        return None
    if norm != "batch":
        raise ValueError(f"option bn_stats='per_evaluation' needs norm='batch' (it keeps "
                         f"BatchNorm statistics per evaluation); got norm={norm!r}")
    if integrator.evaluations is None or integrator.adjoint:
        raise ValueError("option bn_stats='per_evaluation' needs a fixed-step solver (euler "
                         "or rk4) without adjoint: the evaluations of a solve must be known")
    return integrator.evaluations


def check_ode_options(*, solver: str, steps: int, T: float, adjoint: bool, norm: str,
                      rtol: float, atol: float, blocks: int = 1, stem_stride: int = 2,
                      augment_channels: int = 1, bn_stats: str = "shared",
                      **unchecked: object) -> None:
    """The option values of the ODE models (the config checks them before any data is
    loaded); options a model lacks keep a valid default here."""
    check_norm(norm)
    step_evaluations(bn_stats, norm, make_solver(solver, steps, T, adjoint, rtol, atol))
    _check_blocks(blocks)
    check_stem_stride(stem_stride)
    _check_augment(augment_channels)


@MODELS.register("odenet", check=check_ode_options)
def odenet(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0,
           blocks: int = 1, solver: str = "euler", steps: int = 16, T: float = 1.0,
           adjoint: bool = False, norm: str = "batch", rtol: float = 1e-3,
           atol: float = 1e-3, bn_stats: str = "shared", stem_stride: int = 2) -> StagedNet:
    """ODENet-16-32-64: ResNet-14's skeleton with ``blocks`` ODE blocks per group.

    Dimensions as paper A's Appendix A gives them for ResNet-14 and ODENet alike: the same
    conv3x3 stride-2 stem to 32 channels (:func:`miaudit.models.resnet.cifar_stem`) and groups
    at 32/64/128 channels (x ``width``). The study's name "ODENet-16-32-64" is kept although
    its appendix lists 32/64/128; with one Euler step of size 1 each block equals a
    pre-activation residual block, so ``odenet`` and ``resnet14`` differ only in the blocks.

    Options: ``blocks`` (1-3 per group), ``solver`` euler | rk4 | dopri5, ``steps`` (fixed-step
    solvers; step T/steps), ``T``, ``adjoint``, ``norm`` batch | group | none, ``rtol``/``atol``
    (dopri5), ``stem_stride`` 2 (paper) or 1, ``bn_stats`` shared | per_evaluation (the ODE
    functions' BatchNorm running statistics; module docstring)."""
    cin = image_channels(input_shape, "odenet")
    check_norm(norm)
    _check_blocks(blocks)
    integrator = make_solver(solver, steps, T, adjoint, rtol, atol)
    evaluations = step_evaluations(bn_stats, norm, integrator)
    widths = odenet_widths(width)

    def make_blocks(channels: int) -> nn.Sequential:
        return nn.Sequential(*[ODEBlock(ODEFunc(channels, norm=norm, evaluations=evaluations),
                                        integrator) for _ in range(blocks)])

    return staged_layout(cin, widths, make_blocks, norm,
                         cifar_stem(cin, widths[0], norm, stem_stride), num_classes)


def odenet_widths(width: float) -> list[int]:
    """Group widths 32/64/128 x ``width`` (paper A, Appendix A; shared by SDENet)."""
    return [scaled(c, width) for c in (32, 64, 128)]


def downsampling_stem(cin: int, channels: int, norm: str) -> nn.Sequential:
    """Chen et al. 2018's stem: conv3x3, then two norm-ReLU-conv4x4 stride 2 (H/4 x W/4)."""
    return nn.Sequential(
        nn.Conv2d(cin, channels, 3, padding=1), norm_layer(norm, channels), nn.ReLU(),
        nn.Conv2d(channels, channels, 4, 2, 1), norm_layer(norm, channels), nn.ReLU(),
        nn.Conv2d(channels, channels, 4, 2, 1),
    )


def single_block_net(name: str, input_shape: tuple[int, ...], num_classes: int, width: float,
                      norm: str, make_block: Callable[[int], nn.Module],
                      extra_channels: int = 0) -> StagedNet:
    """Downsampling stem, then ``make_block(channels)`` after ``extra_channels`` zero ones."""
    cin = image_channels(input_shape, name)
    check_norm(norm)
    channels = scaled(64, width)
    down = ZeroChannels(extra_channels) if extra_channels else nn.Identity()
    inner = channels + extra_channels
    stage = Stage(down, make_block(inner), inner)
    return StagedNet(downsampling_stem(cin, channels, norm), [stage], inner, num_classes, norm)


@MODELS.register("odenet64", check=check_ode_options)
def odenet64(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0,
             solver: str = "euler", steps: int = 16, T: float = 1.0, adjoint: bool = False,
             norm: str = "batch", rtol: float = 1e-3, atol: float = 1e-3,
             bn_stats: str = "shared") -> StagedNet:
    """ODENet-64 (Chen et al. 2018): downsampling stem, one ODE block at width 64.

    Options: ``solver``, ``steps``, ``T``, ``adjoint``, ``norm``, ``rtol``/``atol``,
    ``bn_stats`` shared | per_evaluation (module docstring)."""
    integrator = make_solver(solver, steps, T, adjoint, rtol, atol)
    evaluations = step_evaluations(bn_stats, norm, integrator)
    return single_block_net("odenet64", input_shape, num_classes, width, norm,
                             lambda c: ODEBlock(ODEFunc(c, norm=norm, evaluations=evaluations),
                                                integrator))


@MODELS.register("anode", check=check_ode_options)
def anode(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0,
          augment_channels: int = 16, solver: str = "euler", steps: int = 16, T: float = 1.0,
          adjoint: bool = False, norm: str = "batch", rtol: float = 1e-3,
          atol: float = 1e-3, bn_stats: str = "shared") -> StagedNet:
    """ANODE (Dupont et al. 2019): ODENet-64 with ``augment_channels`` zero channels appended.

    Options: ``augment_channels`` (k >= 1 extra channels, not scaled by width; paper A's Table 7
    uses 16 (default) and 64), and odenet64's (with BatchNorm, train it with
    ``bn_stats="per_evaluation"``: the extra channels start at zero; module docstring)."""
    augment = augment_channels
    _check_augment(augment)
    integrator = make_solver(solver, steps, T, adjoint, rtol, atol)
    evaluations = step_evaluations(bn_stats, norm, integrator)
    return single_block_net("anode", input_shape, num_classes, width, norm,
                             lambda c: ODEBlock(ODEFunc(c, norm=norm, evaluations=evaluations),
                                                integrator), augment)
