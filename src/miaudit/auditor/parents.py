"""Parents of derived models: each expensive model is trained once.

A derived recipe (ANN -> SNN conversion at each T, replace-then-finetune) starts from another
trained model, its parent (:meth:`miaudit.training.Recipe.parent`). The parent is an ordinary
model of the audit (registry model + registry recipe), so it has an ordinary model identity: the
derived model's identity names it, and the parent is trained once per (data, membership row,
seed, settings), kept in the run directory (``parents/<identity>``) and in the model cache, and
fetched from either instead of being trained again: the SNN conversions at T = 1, 2, 4 of one
family share their ANNs, and replace-then-finetune reuses the ResNet-14 that a standard audit
of the same family trained.

Parents may have parents (a chain): the SNN at latency T starts from the SNN at T - 1, which
starts from the SNN at T - 2, ..., down to the ANN. Each level is an ordinary model with an
ordinary identity (naming its own parent), so what an audit at T - 1 trained is fetched by an
audit at T. :func:`obtain_parents` walks each chain down only as far as nothing is stored, then
trains the missing levels deepest first, each from the level below, saving each as it arrives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from miaudit._runtime.io import read_tensors
from miaudit.auditor.model_cache import ModelCache
from miaudit.auditor.rundir import RunDir, save_model_folder, verified_record
from miaudit.auditor.runfiles import MODEL_RECORD, WEIGHTS

State = dict[str, torch.Tensor]


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


Train = Callable[[list[tuple[Any, State | None]],
                  Callable[[Any, State, dict[str, Any]], None]], None]


def obtain_parents(run: RunDir, cache: ModelCache | None, jobs: Iterable[Any], train: Train,
                   say: Callable[[str], None] = lambda line: None
                   ) -> tuple[dict[str, State], int]:
    """The weights of the parents of ``jobs`` (ModelJobs), by identity, and how many parent
    models (at any depth) were trained. Each chain is walked down while nothing is stored
    (run directory, then model cache); the missing levels are then trained deepest first by
    ``train([(parent job, its parent's weights or None), ...], on_done)``, each level from
    the one below it, each model saved as it arrives. ``say`` gets one line per level."""
    states: dict[str, State] = {}
    levels: list[tuple[list[Any], list[Any]]] = []  # (wanted, missing), the jobs' parents first
    wanted = unique_parents(jobs)
    while wanted:
        missing = []
        for parent in wanted:
            state = stored_parent(run, cache, parent)
            if state is None:
                missing.append(parent)
            else:
                states[parent.identity] = state
        levels.append((wanted, missing))
        wanted = unique_parents(missing)

    def on_done(parent: Any, state: State, meta: dict[str, Any]) -> None:
        save_parent(run, cache, parent, state, meta)
        states[parent.identity] = state

    for depth in reversed(range(len(levels))):
        wanted, missing = levels[depth]
        say(f"parent models, depth {depth + 1} of {len(levels)} ({describe(wanted)}): "
            f"{len(wanted) - len(missing)} reused, {len(missing)} to train")
        if missing:
            train([(parent, None if parent.parent is None else states[parent.parent.identity])
                   for parent in missing], on_done)
        if depth + 1 < len(levels):  # free the weights of the level below, now used
            shallower = {parent.identity for wanted, _ in levels[:depth] for parent in wanted}
            for parent in levels[depth + 1][0]:
                if parent.identity not in shallower:
                    states.pop(parent.identity, None)
    return states, sum(len(missing) for _, missing in levels)


def describe(jobs: Iterable[Any]) -> str:
    """The distinct models of ``jobs`` in a few words: name, options, recipe."""
    return "; ".join(dict.fromkeys(
        f"{job.model.name}{''.join(f' {k}={v}' for k, v in sorted(job.model.options.items()))}"
        f", {job.train.recipe}" for job in jobs))
