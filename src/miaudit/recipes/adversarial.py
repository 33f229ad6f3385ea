"""Adversarial training: PGD-AT (Madry et al. 2018) and TRADES (Zhang et al. 2019), with PGD
robust-accuracy evaluation.

Both recipes compute the adversarial batch inside ``sample_losses`` and return per-sample losses,
so penalties (DeMem's loss variance) and wrappers (DP-SGD with ``base="pgd_at"``) compose with
them.

Mode during attack generation (our choice, documented): the attack runs with the model in eval
mode (BatchNorm uses its running statistics and is not updated by the attack's forward passes;
dropout is off), as the TRADES reference code does; the training forward pass on the resulting
batch then runs in the caller's mode (train). Madry-style reference implementations differ here
(some generate in train mode); eval mode keeps the attack a deterministic function of the
weights. The mode is restored afterwards.

Opacus: for a ``GradSampleModule`` the per-sample-gradient hooks are switched off during the
attack (``disable_hooks``), so the attack's backward passes neither consume stored activations
nor add to ``grad_sample``; only the training forward/backward is recorded. Pass the
GradSampleModule itself (what ``make_private`` returns), not its inner module: hooks on the inner
module cannot be switched off from it. The attack differentiates w.r.t. the input only
(``torch.autograd.grad``), leaving parameter ``.grad`` untouched.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from miaudit.registry import RECIPES
from miaudit.training.engine import FitState, Penalty, Recipe


@contextmanager
def attack_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode and (for Opacus GradSampleModule) per-sample-gradient hooks off; restores the
    previous mode and hook state on exit."""
    was_training = model.training
    hooks = getattr(model, "hooks_enabled", None)
    model.eval()
    if hooks:
        model.disable_hooks()
    try:
        yield
    finally:
        model.train(was_training)
        if hooks:
            model.enable_hooks()


def _check_budget(name: str, eps: float, step: float, steps: int) -> None:
    if not eps >= 0:
        raise ValueError(f"{name} option 'eps' must be >= 0, got {eps}")
    if not step > 0:
        raise ValueError(f"{name} option 'step' must be > 0, got {step}")
    if int(steps) != steps or steps < 0:
        raise ValueError(f"{name} option 'steps' must be an integer >= 0, got {steps!r}")


def _project(x_adv: torch.Tensor, x: torch.Tensor, eps: float) -> torch.Tensor:
    """Project onto the L-inf ball of radius eps around x intersected with the box [0, 1]."""
    return torch.minimum(torch.maximum(x_adv, x - eps), x + eps).clamp(0.0, 1.0)


def _uniform_noise(x: torch.Tensor, eps: float, generator: torch.Generator | None) -> torch.Tensor:
    noise = torch.rand(x.shape, generator=generator, dtype=x.dtype) * 2.0 - 1.0
    return eps * noise.to(x.device)


def pgd_attack(model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float = 8 / 255,
               step: float = 2 / 255, steps: int = 10, random_start: bool = True,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """L-inf PGD on the cross-entropy (Madry et al. 2018, Eq. 2 / Sec. 2.1): optional uniform
    start in the eps-ball, then ``steps`` signed-gradient ascent steps of size ``step``, each
    projected back onto the eps-ball around ``x`` and the image box [0, 1]. Model in eval mode
    (see the module docstring). Returns a detached tensor."""
    _check_budget("pgd", eps, step, steps)
    x = x.detach()
    x_adv = _project(x + _uniform_noise(x, eps, generator), x, eps) if random_start else x.clone()
    with attack_mode(model), torch.enable_grad():
        for _ in range(int(steps)):
            x_adv.requires_grad_(True)
            loss = F.cross_entropy(model(x_adv), y, reduction="sum")
            (grad,) = torch.autograd.grad(loss, x_adv)
            x_adv = _project(x_adv.detach() + step * grad.sign(), x, eps)
    return x_adv.detach()


def trades_attack(model: nn.Module, x: torch.Tensor, eps: float = 0.031, step: float = 0.007,
                  steps: int = 10, generator: torch.Generator | None = None) -> torch.Tensor:
    """TRADES inner maximization (Zhang et al. 2019, Alg. 1): start at x + 0.001 N(0, I), then
    signed-gradient ascent on KL(f(x) || f(x')) with projection onto the eps-ball and [0, 1]."""
    _check_budget("trades", eps, step, steps)
    x = x.detach()
    noise = torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
    x_adv = (x + 0.001 * noise).clamp(0.0, 1.0)
    with attack_mode(model), torch.enable_grad():
        with torch.no_grad():
            p_natural = F.softmax(model(x), dim=1)
        for _ in range(int(steps)):
            x_adv.requires_grad_(True)
            loss = F.kl_div(F.log_softmax(model(x_adv), dim=1), p_natural, reduction="sum")
            (grad,) = torch.autograd.grad(loss, x_adv)
            x_adv = _project(x_adv.detach() + step * grad.sign(), x, eps)
    return x_adv.detach()


class _Adversarial(Recipe):
    """Shared state of the adversarial recipes: budget options and a private seeded generator
    (so the attack's random start does not shift the engine's batch order)."""

    name = "adversarial"

    def __init__(self, penalties: Sequence[Penalty], eps: float, step: float, steps: int):
        super().__init__(penalties)
        _check_budget(self.name, eps, step, steps)
        self.eps, self.step, self.steps = float(eps), float(step), int(steps)
        self.generator = torch.Generator().manual_seed(0)

    def prepare(self, state: FitState) -> None:
        # Wrappers (DP-SGD with base=...) may skip prepare: the generator then keeps seed 0.
        self.generator.manual_seed(state.env.seed)

    def resume_state(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state()}

    def restore_state(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])


@RECIPES.register("pgd_at")
class PGDAT(_Adversarial):
    """PGD adversarial training (Madry et al. 2018): cross-entropy on L-inf PGD examples.
    Options: eps (8/255), step (2/255), steps (10), random_start (True)."""

    name = "pgd_at"
    resumable = True

    def __init__(self, penalties: Sequence[Penalty] = (), eps: float = 8 / 255,
                 step: float = 2 / 255, steps: int = 10, random_start: bool = True):
        super().__init__(penalties, eps, step, steps)
        self.random_start = bool(random_start)

    def sample_losses(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x_adv = pgd_attack(model, x, y, self.eps, self.step, self.steps, self.random_start,
                           self.generator)
        return F.cross_entropy(model(x_adv), y, reduction="none")


@RECIPES.register("trades")
class TRADES(_Adversarial):
    """TRADES (Zhang et al. 2019, Eq. 5): CE(f(x), y) + beta * KL(f(x) || f(x_adv)) per sample.
    Options: beta (6), eps (0.031), step (0.007), steps (10)."""

    name = "trades"
    resumable = True

    def __init__(self, penalties: Sequence[Penalty] = (), beta: float = 6.0,
                 eps: float = 0.031, step: float = 0.007, steps: int = 10):
        super().__init__(penalties, eps, step, steps)
        if not beta >= 0:
            raise ValueError(f"trades option 'beta' must be >= 0, got {beta}")
        self.beta = float(beta)

    def sample_losses(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x_adv = trades_attack(model, x, self.eps, self.step, self.steps, self.generator)
        logits = model(x)
        log_p_natural = F.log_softmax(logits, dim=1)
        # Per-sample KL(p_nat || p_adv); gradients flow through both sides, as in the reference.
        kl = (log_p_natural.exp() * (log_p_natural - F.log_softmax(model(x_adv), dim=1))).sum(1)
        return F.cross_entropy(logits, y, reduction="none") + self.beta * kl


def robust_accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float = 8 / 255,
                    step: float = 2 / 255, steps: int = 20, random_start: bool = True,
                    device: torch.device | str = "cpu", batch_size: int = 256,
                    seed: int = 0) -> float:
    """Top-1 accuracy under L-inf PGD-``steps`` (PGD-20 by default) in eval mode."""
    if len(y) == 0:
        return float("nan")
    model = model.to(device)
    generator = torch.Generator().manual_seed(seed)
    correct = 0
    for start in range(0, len(y), batch_size):
        xb = x[start : start + batch_size].to(device)
        yb = y[start : start + batch_size].to(device)
        x_adv = pgd_attack(model, xb, yb, eps, step, steps, random_start, generator)
        with torch.no_grad(), attack_mode(model):
            correct += (model(x_adv).argmax(1) == yb).sum().item()
    return correct / len(y)


def natural_and_robust_accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                                **pgd_options) -> dict[str, float]:
    """``{"natural_acc", "robust_acc"}``: clean eval-mode accuracy beside PGD robust accuracy
    (``pgd_options`` as for :func:`robust_accuracy`)."""
    device = pgd_options.get("device", "cpu")
    batch_size = pgd_options.get("batch_size", 256)
    model = model.to(device)
    with torch.no_grad(), attack_mode(model):
        natural = sum((model(x[s : s + batch_size].to(device)).argmax(1).cpu()
                       == y[s : s + batch_size]).sum().item() for s in range(0, len(y), batch_size))
    return {"natural_acc": natural / len(y) if len(y) else float("nan"),
            "robust_acc": robust_accuracy(model, x, y, **pgd_options)}
