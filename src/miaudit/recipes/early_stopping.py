"""Classical regularization defenses of the neural-ODE MI study.

- L1 / L2 weight penalties: registered as penalties ``l1`` / ``l2`` in
  :mod:`miaudit.penalties.norms` (``weight`` option, e.g. 1e-5); use them with any recipe.
- Dropout: the ``dropout`` option of the ``small_cnn`` / ``mlp`` models.
- Early stopping (this module): recipe ``early_stopping``, which monitors a held-out validation
  split after every epoch, stops after ``patience`` epochs without improvement and restores the
  best weights.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from miaudit.registry import RECIPES
from miaudit.training.engine import (
    FitState,
    Penalty,
    Recipe,
    TrainEnv,
    TrainParams,
    fit,
    predict_logits,
)

_METRICS = ("loss", "acc")


def validation_stats(model: nn.Module, x_val: torch.Tensor, y_val: torch.Tensor,
                     device: torch.device) -> dict[str, float]:
    """Eval-mode cross-entropy and accuracy on the validation split; leaves the model in eval
    mode (the training loop switches back to train mode at the next epoch)."""
    logits = predict_logits(model, x_val, device)
    return {"val_loss": F.cross_entropy(logits, y_val).item(),
            "val_acc": (logits.argmax(1) == y_val).float().mean().item()}


def require_validation(recipe: str, state: FitState) -> None:
    if state.x_val is None or state.y_val is None or len(state.y_val) == 0:
        raise ValueError(f"recipe {recipe!r} needs validation data (x_val, y_val): it has "
                         "needs_validation = True, so the caller must pass a held-out split")


@RECIPES.register("early_stopping")
class EarlyStopping(Recipe):
    """Cross-entropy training that stops when the validation loss/accuracy has not improved for
    ``patience`` epochs and restores the best epoch's weights (options: patience, metric =
    "loss" | "acc", min_delta)."""

    needs_validation = True
    resumable = True

    def __init__(self, penalties: Sequence[Penalty] = (), patience: int = 5,
                 metric: str = "loss", min_delta: float = 0.0):
        super().__init__(penalties)
        if metric not in _METRICS:
            raise ValueError(f"early_stopping option 'metric' must be one of {_METRICS}, "
                             f"got {metric!r}")
        if int(patience) != patience or patience < 1:
            raise ValueError(f"early_stopping option 'patience' must be an integer >= 1, "
                             f"got {patience!r}")
        if not min_delta >= 0:
            raise ValueError(f"early_stopping option 'min_delta' must be >= 0, got {min_delta}")
        self.patience, self.metric, self.min_delta = int(patience), metric, float(min_delta)
        self._best: dict[str, torch.Tensor] | None = None
        self._best_value = float("inf")
        self._best_epoch = -1
        self._waited = 0

    def prepare(self, state: FitState) -> None:
        require_validation("early_stopping", state)
        self._best, self._best_value, self._best_epoch, self._waited = None, float("inf"), -1, 0

    def resume_state(self) -> dict[str, Any]:
        return {"best": self._best, "best_value": self._best_value,
                "best_epoch": self._best_epoch, "waited": self._waited}

    def restore_state(self, state: dict[str, Any]) -> None:
        self._best, self._best_value = state["best"], float(state["best_value"])
        self._best_epoch, self._waited = int(state["best_epoch"]), int(state["waited"])

    def end_epoch(self, state: FitState, epoch: int) -> None:
        stats = validation_stats(state.model, state.x_val, state.y_val, state.env.device)
        state.record(**stats)
        # Minimize the loss, or the negated accuracy, so one comparison covers both metrics.
        value = stats["val_loss"] if self.metric == "loss" else -stats["val_acc"]
        if value < self._best_value - self.min_delta:
            self._best_value, self._best_epoch, self._waited = value, epoch, 0
            self._best = copy.deepcopy(state.model.state_dict())
        else:
            self._waited += 1
            if self._waited >= self.patience:
                state.stop = True

    def train(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, params: TrainParams,
              env: TrainEnv, x_val: torch.Tensor | None = None,
              y_val: torch.Tensor | None = None) -> tuple[nn.Module, dict[str, list[Any]]]:
        model, log = fit(model, x, y, params, self, env, x_val, y_val)
        if self._best is not None:  # restore the best epoch, also when all epochs ran
            model.load_state_dict(self._best)
            self._best = None  # free the copy; the recipe may train further models
        log["best_epoch"] = [self._best_epoch]
        log["stopped_epoch"] = [log["epoch"][-1] if log.get("epoch") else -1]
        return model, log
