"""The ``standard`` recipe and the basic penalties (L1, L2 weight penalties)."""

from __future__ import annotations

import torch
from torch import nn

from miaudit.registry import PENALTIES, RECIPES
from miaudit.training.engine import Penalty, Recipe, penalty_weight


@RECIPES.register("standard")
class Standard(Recipe):
    """Cross-entropy training (empirical risk minimization) plus optional penalties."""


def _weights(model: nn.Module) -> list[torch.Tensor]:
    """Weight tensors (not biases or norm scales), the usual target of L1/L2 penalties."""
    return [p for name, p in model.named_parameters() if p.requires_grad and p.dim() > 1
            and not name.endswith("bias")]


@PENALTIES.register("l1")
class L1Penalty(Penalty):
    """weight * sum |w| over weight tensors."""

    def __init__(self, weight: float = 1e-5):
        self.weight = penalty_weight(weight, "l1")

    def __call__(self, model: nn.Module, sample_losses: torch.Tensor) -> torch.Tensor:
        return self.weight * sum(p.abs().sum() for p in _weights(model))


@PENALTIES.register("l2")
class L2Penalty(Penalty):
    """weight * sum w^2 over weight tensors (explicit, unlike the optimizer's weight decay)."""

    def __init__(self, weight: float = 1e-5):
        self.weight = penalty_weight(weight, "l2")

    def __call__(self, model: nn.Module, sample_losses: torch.Tensor) -> torch.Tensor:
        return self.weight * sum(p.pow(2).sum() for p in _weights(model))
