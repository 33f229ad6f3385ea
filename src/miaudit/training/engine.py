"""The training loop shared by every recipe.

A :class:`Recipe` supplies the objective (per-sample losses plus penalties) and hooks; :func:`fit`
runs epochs over in-memory tensors with batch-wise augmentation, an optimizer and a per-step
learning-rate schedule. Recipes that change the loop itself (DP-SGD's Poisson sampling, ANN-to-
SNN conversion, replace-then-finetune) override :meth:`Recipe.prepare` or :meth:`Recipe.train`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from miaudit.training.augment import augment
from miaudit.training.checkpoint import Checkpoint, cpu_copy, random_state, set_random_state
from miaudit.training.params import TrainParams
from miaudit.training.precision import (
    autocast_context,
    default_layout,
    input_layout,
    training_layout,
)

Batches = Callable[[int], Iterable[tuple[torch.Tensor, torch.Tensor]]]


@dataclass
class TrainEnv:
    """Where and how reproducibly to train."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    seed: int = 0
    progress: Callable[[int, int, dict[str, float]], None] | None = None  # (epoch, epochs, stats)
    #: "fp32" or "bf16" (bfloat16 autocast + channels_last, float32 master weights; see
    #: training.precision)
    precision: str = "fp32"
    #: epoch checkpoints of this model's training (resumed when one exists), or None
    checkpoint: Checkpoint | None = None
    #: epochs (1-based) at whose end :func:`fit` keeps a copy of the weights in
    #: ``snapshot_states`` (train.snapshots: leakage over training)
    snapshots: tuple[int, ...] = ()
    snapshot_states: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)


@dataclass(frozen=True)
class ParentSpec:
    """The trained model a derived recipe starts from, told as an ordinary model of the audit:
    a registry model (name, options; the derived model's width) trained with a registry recipe
    (its options; the derived model's optimization settings, with ``epochs`` when given and the
    derived recipe's penalties when ``penalties``). The pipeline trains that model once per
    (data, membership row, seed, settings), caches it under its own identity (so an audit that
    trained the same model, e.g. the headline family's ResNet-14, supplies it) and calls
    :meth:`Recipe.train_from_parent`. With ``same_training`` the parent is trained exactly as
    the derived model (same recipe, recipe options, epochs, penalties and precision: an earlier
    stage of the same recipe, e.g. the SNN at latency T - 1), and ``recipe``, ``recipe_options``,
    ``epochs`` and ``penalties`` are not used. A parent may have a parent of its own."""

    model: str
    model_options: dict[str, Any] = field(default_factory=dict)
    recipe: str = "standard"
    recipe_options: dict[str, Any] = field(default_factory=dict)
    epochs: int | None = None
    penalties: bool = False
    same_training: bool = False


@dataclass
class FitState:
    """Everything a recipe hook may inspect or replace during :func:`fit`."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    params: TrainParams
    env: TrainEnv
    x: torch.Tensor
    y: torch.Tensor
    x_val: torch.Tensor | None
    y_val: torch.Tensor | None
    generator: torch.Generator
    batches: Batches
    steps_per_epoch: int
    log: dict[str, list[Any]] = field(default_factory=dict)
    stop: bool = False

    def record(self, **values: Any) -> None:
        """Append each value to its key's list in the training log."""
        for key, value in values.items():
            self.log.setdefault(key, []).append(value)


def penalty_weight(value: object, penalty: str) -> float:
    """A penalty's ``weight`` option: a finite number >= 0 (ValueError otherwise, so the
    config reports it before training)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not \
            math.isfinite(value) or value < 0:
        raise ValueError(f"{penalty} option 'weight' must be a finite number >= 0, got "
                         f"{value!r}")
    return float(value)


class Penalty:
    """A regularizer added to the mean loss; sees the model and the per-sample losses."""

    def __call__(self, model: nn.Module, sample_losses: torch.Tensor) -> torch.Tensor:
        """The penalty term (a scalar) added to the mean loss of a batch."""
        raise NotImplementedError


class Recipe:
    """Empirical risk minimization with cross-entropy: the ``standard`` recipe and the base of
    every other one."""

    #: why this recipe trains in float32 only (None: it supports every train.precision)
    fp32_only: str | None = None
    #: recipes that need held-out data (early stopping, MMD) set this; the pipeline then passes
    #: ``x_val``/``y_val`` drawn from samples the model does not train on.
    needs_validation: bool = False
    #: recipes that train causal language models on text (lm, lora; dpsgd: its base's)
    language_model: bool = False
    #: a digest of user code the recipe runs (a user training function), part of the identity
    #: of the models it trains; None for miaudit's own recipes (the version covers those)
    fingerprint: str | None = None
    #: whether training resumes from epoch checkpoints (training.checkpoint): every state the
    #: recipe carries between epochs is in :meth:`resume_state`. Each class opts in for itself
    #: (a subclass may add state its parent does not save): see ``__init_subclass__``.
    resumable: bool = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.resumable = bool(cls.__dict__.get("resumable", False))

    def __init__(self, penalties: Sequence[Penalty] = ()):
        self.penalties = list(penalties)

    def architecture(self, model: nn.Module) -> nn.Module:
        """Turn a freshly built registry model into the architecture this recipe outputs (so
        saved weights can be loaded back); identity unless the recipe rebuilds the model."""
        return model

    def train(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, params: TrainParams,
              env: TrainEnv, x_val: torch.Tensor | None = None,
              y_val: torch.Tensor | None = None) -> tuple[nn.Module, dict[str, list[Any]]]:
        """Train ``model`` on (x, y); returns the model and its training log."""
        return fit(model, x, y, params, self, env, x_val, y_val)

    def parent(self, model: str, model_options: dict[str, Any]) -> ParentSpec | None:
        """The parent this recipe's :meth:`train` trains first, when another recipe can train it
        on its own (registry ``model`` with ``model_options`` is the model being audited);
        None (the default): :meth:`train` does everything."""
        return None

    def train_from_parent(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                          params: TrainParams, env: TrainEnv, x_val: torch.Tensor | None = None,
                          y_val: torch.Tensor | None = None
                          ) -> tuple[nn.Module, dict[str, list[Any]]]:
        """What :meth:`train` does after training the parent; ``model`` is the registry model
        holding the parent's trained weights. Bit-identical to :meth:`train` (tested)."""
        raise NotImplementedError(f"{type(self).__name__} declares no parent")

    def prepare(self, state: FitState) -> None:
        """Called once before the first epoch; may replace model, optimizer or batches."""

    def sample_losses(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-sample training losses of a batch (cross-entropy unless overridden)."""
        return F.cross_entropy(model(x), y, reduction="none")

    def objective(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The batch's loss to minimise: the mean sample loss plus every penalty."""
        losses = self.sample_losses(model, x, y)
        total = losses.mean()
        for penalty in self.penalties:
            total = total + penalty(model, losses)
        return total

    def end_epoch(self, state: FitState, epoch: int) -> None:
        """Called after each epoch; may record values or set ``state.stop``."""

    def resume_state(self) -> dict[str, Any]:
        """The recipe's own state between epochs (its random generators, a best-epoch copy),
        saved in epoch checkpoints; tensors, numbers, strings, lists and dicts only."""
        return {}

    def restore_state(self, state: dict[str, Any]) -> None:
        """Set what :meth:`resume_state` returned (after :meth:`prepare` ran)."""


def make_optimizer(model: nn.Module, params: TrainParams) -> torch.optim.Optimizer:
    """The optimizer ``params`` name, over the model's trainable parameters."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    if params.optimizer == "sgd":
        return torch.optim.SGD(trainable, lr=params.lr, momentum=params.momentum,
                               nesterov=params.nesterov and params.momentum > 0,
                               weight_decay=params.weight_decay)
    if params.optimizer == "adam":
        return torch.optim.Adam(trainable, lr=params.lr, weight_decay=params.weight_decay)
    if params.optimizer == "adamw":
        return torch.optim.AdamW(trainable, lr=params.lr, weight_decay=params.weight_decay)
    raise ValueError(f"unknown optimizer {params.optimizer!r}; valid: adam, adamw, sgd")


def lr_factor(step: int, total_steps: int, params: TrainParams, steps_per_epoch: int) -> float:
    """Multiplier of the base learning rate at optimizer step ``step`` (linear warm-up, then
    cosine decay to 0, step decay x0.1 at the milestones, or constant)."""
    warmup = int(params.warmup_epochs * steps_per_epoch)
    if step < warmup:
        return (step + 1) / warmup
    if params.schedule == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total_steps - warmup)
    if params.schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    if params.schedule == "step":
        return 0.1 ** sum(progress >= m for m in params.milestones)
    raise ValueError(f"unknown schedule {params.schedule!r}; valid: constant, cosine, step")


def shuffled_batches(x: torch.Tensor, y: torch.Tensor, batch_size: int,
                     generator: torch.Generator) -> Batches:
    """Default sampler: a fresh seeded permutation each epoch, last partial batch kept."""

    def epoch_batches(epoch: int) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        order = torch.randperm(len(y), generator=generator)
        for start in range(0, len(y), batch_size):
            index = order[start : start + batch_size]
            yield x[index], y[index]

    return epoch_batches


def fit(model: nn.Module, x: torch.Tensor, y: torch.Tensor, params: TrainParams, recipe: Recipe,
        env: TrainEnv, x_val: torch.Tensor | None = None,
        y_val: torch.Tensor | None = None) -> tuple[nn.Module, dict[str, list[Any]]]:
    """Train ``model`` on (x, y) with ``recipe``'s objective; returns the model and a per-epoch
    log (loss, accuracy, seconds, and whatever the recipe records)."""
    generator = torch.Generator().manual_seed(env.seed)
    torch.manual_seed(env.seed)  # model-internal randomness (dropout, SDE noise)
    autocast = autocast_context(env.precision, env.device)
    model, channels_last = training_layout(model.to(env.device), env.precision)
    state = FitState(
        model=model, optimizer=make_optimizer(model, params), params=params, env=env, x=x, y=y,
        x_val=x_val, y_val=y_val, generator=generator,
        # The default sampler gathers batches from copies resident on the training device: one
        # transfer instead of one per batch, and augmentation runs where the model does.
        batches=shuffled_batches(x.to(env.device), y.to(env.device), params.batch_size,
                                 generator),
        steps_per_epoch=max(1, math.ceil(len(y) / params.batch_size)),
    )
    recipe.prepare(state)
    total_steps = params.epochs * state.steps_per_epoch
    schedule = torch.optim.lr_scheduler.LambdaLR(
        state.optimizer,
        lambda step: lr_factor(step, total_steps, params, state.steps_per_epoch),
    )
    checkpoint = env.checkpoint
    call = checkpoint.next_call() if checkpoint is not None else -1
    first_epoch = 0
    if checkpoint is not None:
        if (end := checkpoint.completed_fit(call)) is not None:  # done before: replay its end
            restore_end(state, recipe, end)
            return finish(state, channels_last)
        if (saved := checkpoint.partial_fit(call)) is not None:
            first_epoch = restore_epoch(state, schedule, recipe, saved)
    for epoch in range(first_epoch, params.epochs):
        started = time.perf_counter()
        epoch_loss = run_epoch(state, recipe, schedule, epoch, autocast, channels_last)
        state.record(epoch=epoch, loss=epoch_loss,
                     seconds=time.perf_counter() - started)
        recipe.end_epoch(state, epoch)
        if env.progress is not None:
            env.progress(epoch + 1, params.epochs, {"loss": state.log["loss"][-1]})
        if epoch + 1 in env.snapshots:
            env.snapshot_states[epoch + 1] = weights_copy(state.model)
        if state.stop:
            break
        if checkpoint is not None:
            checkpoint.epoch_done(call, partial(epoch_snapshot, state, schedule, recipe, epoch))
    if checkpoint is not None:
        checkpoint.fit_done(call, end_snapshot(state, recipe))
    return finish(state, channels_last)


def run_epoch(state: FitState, recipe: Recipe, schedule: Any, epoch: int, autocast: Any,
              channels_last: bool) -> float:
    """One pass over the training batches; returns the epoch's mean loss (finite, or raises)."""
    state.model.train()
    # The loss sum stays a tensor and is read (and checked) once per epoch: a per-step
    # .item() or isfinite() test blocks until a CUDA device has finished the step.
    device, params = state.env.device, state.params
    loss_sum, seen = torch.zeros((), device=device), 0
    for xb, yb in state.batches(epoch):
        if len(yb) == 0:  # Poisson sampling can draw an empty batch
            continue
        xb = augment(xb, params.crop_padding, params.flip, state.generator)
        xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
        xb = input_layout(xb, channels_last)
        state.optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = recipe.objective(state.model, xb, yb)
        loss.backward()
        state.optimizer.step()
        schedule.step()
        loss_sum += loss.detach() * len(yb)
        seen += len(yb)
    epoch_loss = loss_sum.item() / max(1, seen)
    if not math.isfinite(epoch_loss):
        raise FloatingPointError(f"training loss became {epoch_loss} at epoch {epoch}")
    return epoch_loss


def finish(state: FitState, channels_last: bool) -> tuple[nn.Module, dict[str, list[Any]]]:
    """The trained model in the default layout and eval mode, and the log."""
    state.model = default_layout(state.model, channels_last)
    state.model.eval()
    return state.model, state.log


def weights_copy(model: nn.Module) -> dict[str, torch.Tensor]:
    """A CPU copy of the weights in the default memory layout (what final weights are saved
    in), detached from the training that goes on."""
    return {name: tensor.detach().cpu().clone(memory_format=torch.contiguous_format)
            for name, tensor in model.state_dict().items()}


def end_snapshot(state: FitState, recipe: Recipe) -> dict[str, Any]:
    """What a completed fit leaves behind for the code after it: weights, torch's random
    state, the recipe's state, the log and the weight snapshots kept so far."""
    return {"model": cpu_copy(state.model.state_dict()),
            "random": random_state(state.env.device),
            "recipe": cpu_copy(recipe.resume_state()), "log": cpu_copy(state.log),
            "snapshots": dict(state.env.snapshot_states)}


def epoch_snapshot(state: FitState, schedule: Any, recipe: Recipe,
                   epoch: int) -> dict[str, Any]:
    """Everything the epoch after ``epoch`` reads (see training.checkpoint)."""
    return {**end_snapshot(state, recipe), "epoch": epoch,
            "optimizer": cpu_copy(state.optimizer.state_dict()),
            "schedule": schedule.state_dict(), "generator": state.generator.get_state()}


def restore_end(state: FitState, recipe: Recipe, saved: dict[str, Any]) -> None:
    """Resume from a checkpoint written at the end of an epoch."""
    state.model.load_state_dict(saved["model"])
    set_random_state(saved["random"], state.env.device)
    recipe.restore_state(saved["recipe"])
    state.log = saved["log"]
    state.env.snapshot_states.update(saved.get("snapshots", {}))


def restore_epoch(state: FitState, schedule: Any, recipe: Recipe,
                  saved: dict[str, Any]) -> int:
    """Set the state :func:`epoch_snapshot` saved; returns the epoch to continue from."""
    restore_end(state, recipe, saved)
    state.optimizer.load_state_dict(saved["optimizer"])
    schedule.load_state_dict(saved["schedule"])
    state.generator.set_state(saved["generator"])
    return int(saved["epoch"]) + 1


@torch.no_grad()
def predict_logits(model: nn.Module, x: torch.Tensor, device: torch.device,
                   batch_size: int = 512) -> torch.Tensor:
    """Eval-mode logits for all of ``x`` (on CPU, float32)."""
    model.eval()
    outputs = [model(x[start : start + batch_size].to(device)).float().cpu()
               for start in range(0, len(x), batch_size)]
    return torch.cat(outputs) if outputs else torch.empty(0)


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device) -> float:
    """Top-1 accuracy in eval mode."""
    if len(y) == 0:
        return float("nan")
    return (predict_logits(model, x, device).argmax(1) == y).float().mean().item()
