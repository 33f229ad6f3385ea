"""Mixup + MMD defense (Li, Li & Ribeiro 2021, "Membership inference attacks and defenses in
classification models", CODASPY).

Each epoch has two phases, as in the authors' code:

1. Mixup (Zhang et al. 2018): every batch is replaced by ``lam * x + (1 - lam) * x[perm]`` with
   loss ``lam * CE(f(x_mix), y) + (1 - lam) * CE(f(x_mix), y[perm])``, lam ~ Beta(alpha, alpha)
   drawn per batch.
2. MMD, only when the eval-mode accuracy gap |train acc - val acc| >= ``gap_threshold`` (3
   points in the paper): one pass over class-ordered training batches, each paired with a
   validation batch of the same class composition; the loss is ``mmd_weight * MMD^2`` between
   the softmax outputs of the two batches (RBF kernel, biased estimator), the validation side
   detached, so training outputs are pulled toward the output distribution of unseen samples.
   As in the authors' code the MMD phase is skipped in the last epoch, and its steps use the
   current learning rate without advancing the schedule.

Sorting the training set by class makes most batches single-class, so the MMD matches class-
conditional output distributions (the paper's "class-matched" batches).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from miaudit.recipes.early_stopping import require_validation
from miaudit.registry import RECIPES
from miaudit.training.engine import FitState, Penalty, Recipe, accuracy


def mixup(x: torch.Tensor, y: torch.Tensor, lam: float,
          perm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mixup (Zhang et al. 2018, Eq. 1): returns ``(lam x + (1-lam) x[perm], y, y[perm])``; the
    loss is ``lam CE(., y) + (1-lam) CE(., y[perm])``, which by linearity of the cross-entropy
    in the target equals CE against the mixed one-hot target."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"mixup needs 0 <= lam <= 1, got {lam}")
    return lam * x + (1.0 - lam) * x[perm], y, y[perm]


def mmd2_rbf(a: torch.Tensor, b: torch.Tensor, sigma: float = 1.0) -> torch.Tensor:
    """Biased estimate of the squared maximum mean discrepancy (Gretton et al. 2012, Eq. 5)
    between the rows of ``a`` (n, d) and ``b`` (m, d) with the RBF kernel
    k(u, v) = exp(-||u - v||^2 / (2 sigma^2)):
    mean k(a, a') + mean k(b, b') - 2 mean k(a, b) (diagonal terms included)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"mmd2_rbf needs (n, d) and (m, d) inputs, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    if not sigma > 0:
        raise ValueError(f"mmd2_rbf option 'sigma' must be > 0, got {sigma}")
    z = torch.cat([a, b])
    norms = z.pow(2).sum(1)
    # Squared distances from the Gram matrix (not torch.cdist, whose sqrt has an undefined
    # gradient at distance 0, i.e. on the kernel's diagonal).
    sq_dist = (norms[:, None] + norms[None, :] - 2.0 * z @ z.T).clamp_min(0.0)
    kernel = torch.exp(-sq_dist / (2.0 * sigma**2))
    n = len(a)
    return kernel[:n, :n].mean() + kernel[n:, n:].mean() - 2.0 * kernel[:n, n:].mean()


def class_matched_indices(y_batch: torch.Tensor, y_val: torch.Tensor,
                          generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """For every label of ``y_batch``, a uniformly drawn validation index of the same class
    (with replacement). Returns (kept positions of the batch, validation indices); samples of a
    class absent from the validation split are dropped."""
    num_classes = int(max(y_batch.max().item(), y_val.max().item())) + 1
    order = torch.argsort(y_val, stable=True)  # validation indices grouped by class
    counts = torch.bincount(y_val, minlength=num_classes)
    starts = torch.cumsum(counts, 0) - counts
    kept = torch.nonzero(counts[y_batch] > 0).flatten()
    labels = y_batch[kept]
    offset = (torch.rand(len(labels), generator=generator) * counts[labels]).long()
    offset = torch.minimum(offset, counts[labels] - 1)  # guard against rand() rounding to 1
    return kept, order[starts[labels] + offset]


@RECIPES.register("mixup_mmd")
class MixupMMD(Recipe):
    """Mixup training plus an MMD phase on class-matched train/validation softmax outputs when
    the train/validation accuracy gap reaches gap_threshold (Li, Li & Ribeiro 2021). Options:
    alpha, mmd_weight, gap_threshold (fraction, 0.03 = 3 points), sigma."""

    needs_validation = True
    resumable = True

    def __init__(self, penalties: Sequence[Penalty] = (), alpha: float = 1.0,
                 mmd_weight: float = 3.0, gap_threshold: float = 0.03, sigma: float = 1.0):
        super().__init__(penalties)
        for name, value in (("alpha", alpha), ("mmd_weight", mmd_weight),
                            ("gap_threshold", gap_threshold)):
            if not value >= 0:
                raise ValueError(f"mixup_mmd option {name!r} must be >= 0, got {value}")
        if not sigma > 0:
            raise ValueError(f"mixup_mmd option 'sigma' must be > 0, got {sigma}")
        if gap_threshold > 1:
            raise ValueError("mixup_mmd option 'gap_threshold' is a fraction in [0, 1] "
                             f"(0.03 = 3 points), got {gap_threshold}")
        self.alpha, self.mmd_weight = float(alpha), float(mmd_weight)
        self.gap_threshold, self.sigma = float(gap_threshold), float(sigma)
        self._seed(0)

    def _seed(self, seed: int) -> None:
        # Own random streams, so mixup does not shift the engine's batch order.
        self._rng = np.random.default_rng(seed)
        self._generator = torch.Generator().manual_seed(seed)

    def prepare(self, state: FitState) -> None:
        require_validation("mixup_mmd", state)
        self._seed(state.env.seed)

    def resume_state(self) -> dict[str, Any]:
        return {"numpy": self._rng.bit_generator.state, "torch": self._generator.get_state()}

    def restore_state(self, state: dict[str, Any]) -> None:
        self._rng.bit_generator.state = state["numpy"]
        self._generator.set_state(state["torch"])

    def draw_lambda(self) -> float:
        """lam ~ Beta(alpha, alpha); alpha = 0 disables mixing (lam = 1), as the reference."""
        return float(self._rng.beta(self.alpha, self.alpha)) if self.alpha > 0 else 1.0

    def sample_losses(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        lam = self.draw_lambda()
        perm = torch.randperm(len(y), generator=self._generator).to(y.device)
        x_mix, y_a, y_b = mixup(x, y, lam, perm)
        logits = model(x_mix)
        return (lam * F.cross_entropy(logits, y_a, reduction="none")
                + (1.0 - lam) * F.cross_entropy(logits, y_b, reduction="none"))

    def end_epoch(self, state: FitState, epoch: int) -> None:
        device = state.env.device
        gap = abs(accuracy(state.model, state.x, state.y, device)
                  - accuracy(state.model, state.x_val, state.y_val, device))
        apply = (gap >= self.gap_threshold and self.mmd_weight > 0
                 and epoch < state.params.epochs - 1)
        mmd = self.mmd_phase(state) if apply else float("nan")
        state.record(gap=gap, mmd_applied=apply, mmd=mmd)

    def mmd_phase(self, state: FitState) -> float:
        """One pass of MMD-only steps over class-ordered training batches; mean MMD^2."""
        model, device = state.model, state.env.device
        model.train()
        # Class-ordered training set, shuffled within each class (stable sort of a permutation).
        shuffled = torch.randperm(len(state.y), generator=self._generator)
        order = shuffled[torch.argsort(state.y[shuffled], stable=True)]
        values = []
        for start in range(0, len(order), state.params.batch_size):
            index = order[start : start + state.params.batch_size]
            kept, val_index = class_matched_indices(state.y[index], state.y_val, self._generator)
            if len(kept) == 0:
                continue
            x_train = state.x[index[kept]].to(device)
            x_val = state.x_val[val_index].to(device)
            with torch.no_grad():  # the validation side is a fixed target (detached)
                val_probs = F.softmax(model(x_val), dim=1)
            train_probs = F.softmax(model(x_train), dim=1)
            loss = self.mmd_weight * mmd2_rbf(train_probs, val_probs, self.sigma)
            state.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            state.optimizer.step()
            values.append(loss.item() / self.mmd_weight)
        return float(np.mean(values)) if values else float("nan")
