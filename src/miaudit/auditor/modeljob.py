"""One model of an audit: its job, its architecture, its training and its weights.

The model factory every stage and protocol shares (the train, query and evaluate stages, the
vectorized ensemble trainer, the canary audit, the report rebuilt from a config): it knows
configs, the data pool and the plan, never the pipeline.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from miaudit._runtime.machine import describe
from miaudit.auditor.design import Plan
from miaudit.auditor.identity import section_dump
from miaudit.auditor.rundir import RunDir
from miaudit.config import ModelConfig, TrainConfig, build_recipe
from miaudit.data import Pool
from miaudit.errors import DataError, MiauditError
from miaudit.registry import MODELS
from miaudit.training import TrainEnv
from miaudit.training.checkpoint import Checkpointing
from miaudit.training.ensemble import ensemble_unsupported, fit_ensemble


@dataclass(frozen=True)
class ModelJob:
    """Everything that determines one model (picklable: executors ship it to workers)."""

    index: int
    model: ModelConfig
    train: TrainConfig
    seed: int
    identity: str
    pretrained: Path | None = None  # weights trained elsewhere: loaded, not trained
    # the model a derived recipe starts from (miaudit.auditor.parents)
    parent: ModelJob | None = None


def build_registry_model(model_cfg: ModelConfig, pool: Pool) -> torch.nn.Module:
    """The registry model as configured (what a recipe's ``train`` starts from)."""
    # the dry build at plan time: a bad option value fails here, before any training
    return MODELS.create(model_cfg.name, {
        "input_shape": tuple(pool.input_shape), "num_classes": pool.num_classes,
        "width": model_cfg.width, **model_cfg.options}, errors=(ValueError, TypeError),
        where=f"model {model_cfg.name!r} (width {model_cfg.width}, options "
              f"{model_cfg.options}) cannot be built")


def build_architecture(model_cfg: ModelConfig, train_cfg: TrainConfig,
                       pool: Pool) -> torch.nn.Module:
    """The registry model as its recipe outputs it (what saved weights load into)."""
    return build_recipe(train_cfg).architecture(build_registry_model(model_cfg, pool))


def model_meta(job: ModelJob, recipe: str, train_seconds: float, log: dict[str, list[Any]],
               **extra: Any) -> dict[str, Any]:
    """The JSON-able record written beside a model's weights."""
    return {"index": job.index, "seed": job.seed, "model": section_dump(job.model),
            "recipe": recipe, "train_seconds": train_seconds, **extra, "log": log}


def train_model(job: ModelJob, pool: Pool, plan: Plan, device: torch.device,
                progress: Any = None, parent_state: dict[str, torch.Tensor] | None = None,
                checkpoints: Checkpointing | None = None
                ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Train model ``job.index`` on its members; returns (state dict, JSON-able meta). With
    ``parent_state`` (the weights of ``job.parent``), a derived recipe continues from them.
    With ``checkpoints`` (and a resumable recipe) training writes epoch checkpoints and resumes
    from the model's last one; the meta then says where it resumed (``resumed``)."""
    if job.pretrained is not None:
        return load_pretrained(job, pool)
    recipe = build_recipe(job.train)
    torch.manual_seed(job.seed)
    model = build_registry_model(job.model, pool)
    train = recipe.train
    if parent_state is not None:
        model.load_state_dict(parent_state, strict=True)
        train = recipe.train_from_parent
    # torch.tensor copies: on Ray the plan's arrays are read-only views of the object store,
    # which torch.from_numpy would share with a warning
    member = torch.tensor(plan.keep[job.index])
    x_val = y_val = None
    if recipe.needs_validation:
        held_out = torch.tensor(plan.split.holdout)
        x_val, y_val = pool.x[held_out], pool.y[held_out]
    started = time.perf_counter()
    checkpoint = checkpoints.open(job.identity) if checkpoints is not None and \
        recipe.resumable else None
    env = TrainEnv(device=device, seed=job.seed, progress=progress,
                   precision=job.train.precision, checkpoint=checkpoint,
                   snapshots=job.train.snapshots)
    try:
        model, log = train(model, pool.x[member], pool.y[member], job.train.params(), env,
                           x_val, y_val)
    except FloatingPointError as error:
        raise MiauditError(f"model {job.index} diverged: {error}; lower train.lr "
                           f"(now {job.train.lr})") from None
    seconds = time.perf_counter() - started if checkpoint is None else checkpoint.seconds()
    extra = {"parent": job.parent.identity} if parent_state is not None else {}
    extra["machine"] = describe(device)  # what train_seconds were measured on (this worker)
    if checkpoint is not None and checkpoint.resumed:
        extra["resumed"] = checkpoint.resumed
    meta = model_meta(job, job.train.recipe, round(seconds, 3), _jsonable(log), **extra)
    if job.train.snapshots:
        meta[SNAPSHOT_STATES] = kept_snapshots(job, env)
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}, meta


#: the meta key under which :func:`train_model` hands the snapshots' weights to the driver,
#: which writes them (:func:`pop_snapshots`) before the model record
SNAPSHOT_STATES = "snapshot_states"


def kept_snapshots(job: ModelJob, env: TrainEnv) -> dict[int, dict[str, torch.Tensor]]:
    missing = sorted(set(job.train.snapshots) - set(env.snapshot_states))
    if missing:  # the recipe left the shared epoch loop (config validation should prevent it)
        raise MiauditError(f"model {job.index}: training kept no weights at epoch(s) {missing} "
                           f"of train.snapshots; recipe {job.train.recipe!r} does not support "
                           "them")
    return {epoch: env.snapshot_states[epoch] for epoch in job.train.snapshots}


def pop_snapshots(meta: dict[str, Any]) -> dict[int, dict[str, torch.Tensor]]:
    """The snapshots' weights a train job returned, removed from its (JSON) meta."""
    return meta.pop(SNAPSHOT_STATES, {})


def load_pretrained(job: ModelJob, pool: Pool) -> tuple[dict[str, torch.Tensor],
                                                      dict[str, Any]]:
    """A target trained elsewhere: its weights, checked to load into the configured
    architecture (safetensors, or a torch state dict read with ``weights_only=True``)."""
    path = Path(job.pretrained)
    try:
        if path.suffix == ".safetensors":
            from miaudit._runtime.io import read_tensors

            state = read_tensors(path)
        else:
            state = _torch_state(path)
        if not isinstance(state, dict):
            raise DataError(f"target.weights {path}: expected a state dict, got "
                            f"{type(state).__name__}")
        build_architecture(job.model, job.train, pool).load_state_dict(state, strict=True)
    except pickle.UnpicklingError as error:  # weights_only=True refused what the file holds
        reason = str(error).splitlines()[0][:200]
        raise DataError(f"target.weights {path} is not a plain state dict ({reason}); save "
                        "the weights with safetensors or torch.save(model.state_dict())"
                        ) from None
    except (RuntimeError, OSError, ValueError, EOFError) as error:
        raise DataError(f"target.weights {path} do not load into model {job.model.name!r} "
                        f"(width {job.model.width}, options {job.model.options}): "
                        f"{str(error).splitlines()[0]}") from None
    return state, model_meta(job, "pretrained", 0.0, {}, pretrained=str(path))


def _torch_state(path: Path) -> Any:
    """torch.load with ``weights_only=True``; a file that is no torch file at all (text, an
    archive of something else) raises DataError naming it, never the unpickler's IndexError."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise  # refused by weights_only: reported as not a plain state dict
    except Exception as error:  # noqa: BLE001 - torch raises anything on foreign bytes
        raise DataError(f"target.weights {path} is not a safetensors file nor a torch state "
                        f"dict ({type(error).__name__}: {str(error)[:120]}); save the weights "
                        "with safetensors or torch.save(model.state_dict())") from None


def load_trained(run: RunDir, job: ModelJob, pool: Pool, device: torch.device) -> torch.nn.Module:
    """Rebuild the architecture and load the saved weights (strict: every tensor must fit)."""
    return rebuild(job, pool, run.load_weights(job.index), device)


def rebuild(job: ModelJob, pool: Pool, state: dict[str, torch.Tensor],
            device: torch.device) -> torch.nn.Module:
    """The trained model from its state dict (strict), on ``device``, in eval mode."""
    model = build_architecture(job.model, job.train, pool)
    model.load_state_dict(state, strict=True)
    return model.to(device).eval()


def train_ensemble(jobs: Sequence[Any], pool: Any, plan: Any, device: torch.device,
                   size: int = 8, progress: Any = None,
                   on_done: Callable[[Any, dict[str, torch.Tensor], dict[str, Any]], None]
                   | None = None, parent_states: dict[str, dict[str, torch.Tensor]] | None = None
                   ) -> list[tuple[dict[str, torch.Tensor], dict[str, Any]]]:
    """Train the audit's ``ModelJob``s, ``size`` at a time where they can share one
    vectorized run (same architecture and recipe, standard recipe without penalties, equal
    member counts, a supported model), the rest one by one with :func:`train_model`.
    Returns, per job and in order, what :func:`train_model` returns: (CPU state dict,
    JSON-able meta). ``on_done(job, state, meta)`` is called as each model finishes (so the
    train stage can save it at once and a killed run loses at most one chunk). Derived models
    start from their parent's weights in ``parent_states`` (by identity) when given there."""
    parent_states = parent_states or {}
    results: dict[int, tuple[dict[str, torch.Tensor], dict[str, Any]]] = {}

    def finish(job: Any, state: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        results[job.index] = (state, meta)
        if on_done is not None:
            on_done(job, state, meta)

    groups: dict[tuple[str, str, int], list[Any]] = {}
    for job in jobs:
        member_count = int(plan.keep[job.index].sum())
        if job.pretrained is None and job.train.recipe == "standard" and not job.train.penalties:
            key = (job.model.model_dump_json(), job.train.model_dump_json(), member_count)
            groups.setdefault(key, []).append(job)
        else:
            finish(job, *train_model(job, pool, plan, device, progress, parent_states.get(
                job.parent.identity) if job.parent is not None else None))
    for group in groups.values():
        for start in range(0, len(group), size):
            chunk = group[start : start + size]
            models = []
            for job in chunk:
                torch.manual_seed(job.seed)  # the same initialization as train_model
                models.append(build_registry_model(job.model, pool))
            if len(chunk) == 1 or ensemble_unsupported(models[0]) is not None:
                for job in chunk:
                    finish(job, *train_model(job, pool, plan, device, progress))
                continue
            members = [torch.from_numpy(plan.keep[job.index]).nonzero().flatten()
                       for job in chunk]
            started = time.perf_counter()
            trained = fit_ensemble(models, pool.x, pool.y, members, chunk[0].train.params(),
                                   [job.seed for job in chunk], device, progress)
            seconds = (time.perf_counter() - started) / len(chunk)
            for job, (model, log) in zip(chunk, trained):
                meta = model_meta(
                    job, job.train.recipe, round(seconds, 3),
                    {k: [float(v) for v in values] for k, values in log.items()},
                    ensemble=len(chunk), machine=describe(device))
                finish(job, {k: v.detach().cpu() for k, v in model.state_dict().items()}, meta)
    return [results[job.index] for job in jobs]


def _jsonable(log: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {key: [float(v) if isinstance(v, (int, float, np.floating)) else str(v) for v in values]
            for key, values in log.items()}
