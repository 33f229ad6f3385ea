"""Parents of derived models: each expensive model is trained once.

A derived recipe (ANN -> SNN conversion at each T, replace-then-finetune) starts from another
trained model, its parent (:meth:`miaudit.training.Recipe.parent`). The parent is an ordinary
model of the audit (registry model + registry recipe), so it has an ordinary model identity: the
derived model's identity names it, and the parent is trained once per (data, membership row,
seed, settings), kept in the run directory (``parents/<identity>``) and in the model cache, and
fetched from either instead of being trained again: the SNN conversions at T = 1, 2, 4 of one
family share their ANNs, and replace-then-finetune reuses the ResNet-14 that a standard audit
of the same family trained.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from miaudit.config import ModelConfig, TrainConfig, build_recipe
from miaudit.io import read_tensors
from miaudit.rundir import (
    MODEL_RECORD,
    WEIGHTS,
    ModelCache,
    RunDir,
    save_model_folder,
    verified_record,
)

State = dict[str, torch.Tensor]


def parent_configs(model_cfg: ModelConfig,
                   train_cfg: TrainConfig) -> tuple[ModelConfig, TrainConfig] | None:
    """The parent's architecture and training as audit config sections (validated like any),
    or None when the recipe trains everything itself."""
    spec = build_recipe(train_cfg).parent(model_cfg.name, dict(model_cfg.options))
    if spec is None:
        return None
    model = ModelConfig(name=spec.model, width=model_cfg.width,
                        options=dict(spec.model_options))
    train = TrainConfig.model_validate({
        **train_cfg.model_dump(exclude={"ensemble"}), "recipe": spec.recipe,
        "recipe_options": dict(spec.recipe_options),
        "penalties": list(train_cfg.penalties) if spec.penalties else [],
        "epochs": train_cfg.epochs if spec.epochs is None else spec.epochs})
    return model, train


def unique_parents(jobs: Iterable[Any]) -> list[Any]:
    """The distinct parent jobs of ``jobs`` (ModelJobs), in order."""
    parents: dict[str, Any] = {}
    for job in jobs:
        if job.parent is not None:
            parents.setdefault(job.parent.identity, job.parent)
    return list(parents.values())


def stored_parent(run: RunDir, cache: ModelCache | None, parent: Any) -> State | None:
    """The parent's weights from the run directory, else from the model cache (copied into
    the run); None when neither holds a verified copy."""
    folder = run.parent_dir(parent.identity)
    if verified_record(folder, MODEL_RECORD, parent.identity, WEIGHTS) is None and (
            cache is None or not cache.fetch(parent.identity, parent.identity, MODEL_RECORD,
                                             WEIGHTS, folder)):
        return None
    return read_tensors(folder / WEIGHTS)


def save_parent(run: RunDir, cache: ModelCache | None, parent: Any, state: State,
                meta: dict[str, Any]) -> None:
    folder = run.parent_dir(parent.identity)
    save_model_folder(folder, parent.identity, state, meta)
    if cache is not None:
        cache.store(parent.identity, MODEL_RECORD, WEIGHTS, folder)


def obtain_parents(run: RunDir, cache: ModelCache | None, jobs: Iterable[Any],
                   train: Callable[[list[Any], Callable[[Any, State, dict[str, Any]], None]],
                                   None]) -> tuple[dict[str, State], int]:
    """The weights of every parent of ``jobs``, by identity: stored ones, and the rest trained
    by ``train(parent_jobs, on_done)`` (each saved as it arrives); also how many were
    trained."""
    states: dict[str, State] = {}
    missing = []
    for parent in unique_parents(jobs):
        state = stored_parent(run, cache, parent)
        if state is None:
            missing.append(parent)
        else:
            states[parent.identity] = state

    def on_done(parent: Any, state: State, meta: dict[str, Any]) -> None:
        save_parent(run, cache, parent, state, meta)
        states[parent.identity] = state

    if missing:
        train(missing, on_done)
    return states, len(missing)
