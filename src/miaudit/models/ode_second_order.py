"""Second-order neural ODEs around the ODENet-64 block (paper A's Table 7 variants):

- ``sonode``: second order, y' = v, v' = f(t, [y, v]) (Norcliffe et al. 2020).
- ``hbnode``: heavy ball, theta' = -m, m' = f(t, theta) - sigmoid(gamma) m, gamma learnable,
  init -3 (Xia et al. 2021, eq. 5 and their image model).

Both start at zero velocity (momentum) and classify the position at T; the ODE function,
solvers and ``bn_stats`` are :mod:`miaudit.models.ode`'s.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from miaudit.models.ode import (
    ODEBlock,
    ODEFunc,
    check_ode_options,
    make_solver,
    single_block_net,
    step_evaluations,
)
from miaudit.models.staged import StagedNet
from miaudit.registry import MODELS


class SONODEField(nn.Module):
    """Second-order field on z = [y, v]: (y', v') = (v, f(t, [y, v])) (Norcliffe et al. 2020)."""

    def __init__(self, channels: int, norm: str, evaluations: int | None = None):
        super().__init__()
        self.f = ODEFunc(2 * channels, channels, norm, evaluations)

    def forward(self, t: Tensor, z: Tensor) -> Tensor:
        v = z.chunk(2, dim=1)[1]
        return torch.cat([v, self.f(t, z)], dim=1)


class Damping(nn.Module):
    """sigmoid(gamma) * m with a learnable scalar gamma (init -3, Xia et al. 2021). A module of
    its own so Opacus's per-sample fallback sees a small leaf layer."""

    def __init__(self, init: float = -3.0):
        super().__init__()
        self.gamma = nn.Parameter(torch.tensor([init]))

    def forward(self, m: Tensor) -> Tensor:
        return torch.sigmoid(self.gamma) * m


class HBNODEField(nn.Module):
    """Heavy-ball field on z = [theta, m]: (theta', m') = (-m, f(t, theta) - sigmoid(gamma) m)
    (Xia et al. 2021, "Heavy ball neural ODEs", eq. 5)."""

    def __init__(self, channels: int, norm: str, gamma_init: float = -3.0,
                 evaluations: int | None = None):
        super().__init__()
        self.f = ODEFunc(channels, channels, norm, evaluations)
        self.damping = Damping(gamma_init)

    def forward(self, t: Tensor, z: Tensor) -> Tensor:
        theta, m = z.chunk(2, dim=1)
        return torch.cat([-m, self.f(t, theta) - self.damping(m)], dim=1)


class SecondOrderBlock(ODEBlock):
    """Integrates [x, 0] (zero initial velocity/momentum) and reads out the position x(T)."""

    def state(self, x: Tensor) -> Tensor:
        """Full state [position, velocity] at time T: N x 2C x H x W."""
        return self.solver.integrate(self.func, torch.cat([x, torch.zeros_like(x)], dim=1))

    def forward(self, x: Tensor) -> Tensor:
        return self.state(x).chunk(2, dim=1)[0]



@MODELS.register("sonode", check=check_ode_options)
def sonode(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0,
           solver: str = "euler", steps: int = 16, T: float = 1.0, adjoint: bool = False,
           norm: str = "batch", rtol: float = 1e-3, atol: float = 1e-3,
           bn_stats: str = "shared") -> StagedNet:
    """SONODE (Norcliffe et al. 2020): y' = v, v' = f(t, [y, v]) around the ODENet-64 block,
    v(0) = 0, classifier on y(T). Options as odenet64 (with BatchNorm, train it with
    ``bn_stats="per_evaluation"``: the velocity starts at zero; module docstring)."""
    integrator = make_solver(solver, steps, T, adjoint, rtol, atol)
    evaluations = step_evaluations(bn_stats, norm, integrator)
    return single_block_net("sonode", input_shape, num_classes, width, norm,
                             lambda c: SecondOrderBlock(SONODEField(c, norm, evaluations),
                                                        integrator))


@MODELS.register("hbnode", check=check_ode_options)
def hbnode(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0,
           gamma_init: float = -3.0, solver: str = "euler", steps: int = 16, T: float = 1.0,
           adjoint: bool = False, norm: str = "batch", rtol: float = 1e-3,
           atol: float = 1e-3, bn_stats: str = "shared") -> StagedNet:
    """HBNODE (Xia et al. 2021): theta' = -m, m' = f(t, theta) - sigmoid(gamma) m around the
    ODENet-64 block, m(0) = 0, classifier on theta(T). Options: ``gamma_init`` (-3) and
    odenet64's."""
    integrator = make_solver(solver, steps, T, adjoint, rtol, atol)
    evaluations = step_evaluations(bn_stats, norm, integrator)
    return single_block_net("hbnode", input_shape, num_classes, width, norm,
                             lambda c: SecondOrderBlock(
                                 HBNODEField(c, norm, gamma_init, evaluations), integrator))
