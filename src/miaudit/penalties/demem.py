"""DeMem: the loss-variance de-memorization penalty.

DeMem (privacy-enhanced robust adversarial learning via de-memorization) adds to the
(adversarial) training loss the variance of the per-sample losses of the mini-batch,

    lambda * (1/N) sum_i (l_i - mean_j l_j)^2,

which pulls easy (low-loss) and hard (high-loss, likely memorized) samples toward the batch mean
and so reduces the loss gap that membership inference exploits. As a :class:`Penalty` it composes
with any recipe whose ``sample_losses`` returns per-sample losses (standard, ``pgd_at``,
``trades``, ``mixup_mmd``, DP-SGD's base recipes): ``Recipe.objective`` adds it to the mean loss.

DP caveat: the variance couples the samples of a batch (every gradient depends on the batch
mean), so with DP-SGD the per-sample clipped gradient of sample j depends on the other samples;
the DP accounting then no longer bounds exactly what one sample contributes.
"""

from __future__ import annotations

import torch
from torch import nn

from miaudit.registry import PENALTIES
from miaudit.training.engine import Penalty, penalty_weight


def loss_variance(sample_losses: torch.Tensor) -> torch.Tensor:
    """(1/N) sum_i (l_i - mean l)^2, the biased (population) variance of the batch losses."""
    if sample_losses.dim() != 1:
        raise ValueError("demem needs per-sample losses of shape (B,), got "
                         f"{tuple(sample_losses.shape)}")
    return (sample_losses - sample_losses.mean()).pow(2).mean()


@PENALTIES.register("demem")
class DeMemPenalty(Penalty):
    """weight * Var_batch(per-sample loss) (DeMem's de-memorization term); weight = lambda."""

    def __init__(self, weight: float = 1.0):
        self.weight = penalty_weight(weight, "demem")

    def __call__(self, model: nn.Module, sample_losses: torch.Tensor) -> torch.Tensor:
        if self.weight == 0.0:  # exactly the base objective (no 0 * inf risk, no extra graph)
            return sample_losses.new_zeros(())
        return self.weight * loss_variance(sample_losses)
