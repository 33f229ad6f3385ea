"""The weight penalties L1 and L2 (paper A Sec. 5.1: lambda = 1e-5), added to the mean loss."""

from __future__ import annotations

import torch
from torch import nn

from miaudit.registry import PENALTIES
from miaudit.training.engine import Penalty, penalty_weight


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
