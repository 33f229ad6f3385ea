"""Train K models of one architecture at once (vectorized over models with ``torch.func``).

Shadow/reference models of an audit share architecture, recipe and hyper-parameters and
differ only in their members and seed. Narrow models leave a GPU (and CPU vector units) mostly
idle one at a time; stacking their parameters along a new leading dimension and running the
forward/backward once with :func:`torch.func.vmap` over :func:`torch.func.functional_call`
trains all K in one kernel sequence.

Equivalence with K sequential :func:`miaudit.training.engine.fit` runs (same results within
float tolerance; vmapped convolutions sum in another order):

* initialization: each model is built by the caller exactly as for a sequential run;
* data order and augmentation: one ``torch.Generator`` per model, seeded with its seed and
  drawn in the same order as ``fit`` (``randperm`` per epoch, then crop/flip draws per batch);
* optimizer state: SGD (momentum, Nesterov, weight decay), Adam and AdamW update every
  element independently, so one optimizer over the stacked (K, ...) tensors keeps a separate
  state per model, and the summed loss sum_k L_k gives each model exactly its own gradient;
* learning-rate schedule: shared, since every model takes the same number of steps (the
  models of one call must have the same number of members).

Supported (checked by :func:`ensemble_unsupported`): the ``standard`` recipe without penalties
and models with no randomness and no in-place buffer updates in training mode: ``mlp``,
``small_cnn`` (dropout 0), ``resnet14`` with ``norm`` group or none. Not supported: BatchNorm
in training mode (its running-statistics update writes in place into buffers, which vmap
rejects unless ``torch.func.replace_all_batch_norm_modules_`` removes the running statistics,
and that changes the model's eval-mode outputs), dropout > 0 (vmap would draw other masks than
the sequential run), neural ODE/SDE models (torchdiffeq's adaptive solvers branch on tensor
values, which vmap cannot trace), spiking models (stateful neurons), DP-SGD and every recipe
that overrides ``prepare``/``train``. Those train sequentially.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from miaudit.training.augment import augment
from miaudit.training.engine import TrainParams, lr_factor, make_optimizer


def ensemble_unsupported(model: nn.Module) -> str | None:
    """Why ``model`` cannot be trained vectorized, or None when it can."""
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.track_running_stats:
            return (f"{name or 'model'}: BatchNorm updates running statistics in place "
                    "(use norm 'group' or 'none')")
        if isinstance(module, nn.modules.dropout._DropoutNd) and module.p > 0:
            return f"{name or 'model'}: dropout {module.p} draws per-model random masks"
    return None


class _Holder(nn.Module):
    """Owns the stacked (K, ...) tensors as parameters, so torch.optim updates them."""

    def __init__(self, stacked: dict[str, torch.Tensor]):
        super().__init__()
        self.names = list(stacked)
        self.tensors = nn.ParameterList([nn.Parameter(stacked[n].detach().clone())
                                         for n in self.names])

    def as_dict(self) -> dict[str, torch.Tensor]:
        return dict(zip(self.names, self.tensors))


def fit_ensemble(models: Sequence[nn.Module], x: torch.Tensor, y: torch.Tensor,
                 members: Sequence[torch.Tensor], params: TrainParams, seeds: Sequence[int],
                 device: torch.device | None = None,
                 progress: Callable[[int, int, dict[str, float]], None] | None = None,
                 ) -> list[tuple[nn.Module, dict[str, list[Any]]]]:
    """Train ``models[k]`` on ``x[members[k]], y[members[k]]`` with seed ``seeds[k]``, all at
    once; the same as ``fit(models[k], x[members[k]], y[members[k]], params, Recipe(),
    TrainEnv(device, seeds[k]))`` for each k (standard recipe). ``members``: sorted index
    tensors of equal length. Returns [(trained model in eval mode, per-epoch log)]."""
    if not models or len(models) != len(members) or len(models) != len(seeds):
        raise ValueError("fit_ensemble needs as many member sets and seeds as models")
    sizes = {len(m) for m in members}
    if len(sizes) != 1:
        raise ValueError(f"fit_ensemble needs equal member counts, got {sorted(sizes)}")
    for model in models:
        reason = ensemble_unsupported(model)
        if reason is not None:
            raise ValueError(f"model cannot be trained vectorized: {reason}")
    count = sizes.pop()
    device = device or torch.device("cpu")
    models = [model.to(device).train() for model in models]
    params_k, buffers_k = stack_module_state(models)
    holder = _Holder(params_k)
    base = copy.deepcopy(models[0]).to("meta")  # the structure only; weights come stacked
    optimizer = make_optimizer(holder, params)
    steps_per_epoch = max(1, math.ceil(count / params.batch_size))
    total_steps = params.epochs * steps_per_epoch
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, total_steps, params, steps_per_epoch))
    generators = [torch.Generator().manual_seed(seed) for seed in seeds]
    x, y = x.to(device), y.to(device)
    members = [m.to(device) for m in members]

    def model_loss(weights: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor],
                   xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(base, (weights, buffers), (xb,)), yb)

    # randomness="error": a random op inside the model fails loudly instead of silently
    # drawing other numbers than the sequential run would.
    batched_loss = vmap(model_loss, randomness="error")
    logs: list[dict[str, list[Any]]] = [{} for _ in models]
    for epoch in range(params.epochs):
        started = time.perf_counter()
        orders = [members[k][torch.randperm(count, generator=g).to(device)]
                  for k, g in enumerate(generators)]
        loss_sum = torch.zeros(len(models), device=device)
        for start in range(0, count, params.batch_size):
            index = [order[start : start + params.batch_size] for order in orders]
            xb = torch.stack([augment(x[i], params.crop_padding, params.flip, g)
                              for i, g in zip(index, generators)])
            yb = torch.stack([y[i] for i in index])
            optimizer.zero_grad(set_to_none=True)
            losses = batched_loss(holder.as_dict(), buffers_k, xb, yb)
            losses.sum().backward()  # sum_k L_k: each model's slice gets its own gradient
            optimizer.step()
            schedule.step()
            loss_sum += losses.detach() * yb.shape[1]
        epoch_losses = (loss_sum / count).tolist()
        for k, loss in enumerate(epoch_losses):
            if not math.isfinite(loss):
                raise FloatingPointError(f"training loss of model {k} became {loss} at epoch "
                                         f"{epoch}")
            logs[k].setdefault("epoch", []).append(epoch)
            logs[k].setdefault("loss", []).append(loss)
            logs[k].setdefault("seconds", []).append(time.perf_counter() - started)
        if progress is not None:
            progress(epoch + 1, params.epochs, {"loss": max(epoch_losses)})
    trained = holder.as_dict()
    results = []
    for k, model in enumerate(models):
        state = {name: tensor[k].detach() for name, tensor in trained.items()}
        state.update({name: tensor[k] for name, tensor in buffers_k.items()})
        model.load_state_dict(state, strict=True)
        results.append((model.eval(), logs[k]))
    return results
