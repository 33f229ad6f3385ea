"""The train stage: weights of every model, keyed by data + architecture + recipe + seed +
membership (+ device kind); reused from the run directory or the shared model cache. It also
owns the facts the targets' training records hold (their DP guarantee, their training time).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
from rich.console import Console
from rich.markup import escape

from miaudit._runtime.io import read_json
from miaudit._runtime.machine import slow_bf16
from miaudit.auditor import modeljob
from miaudit.auditor.model_cache import ModelCache
from miaudit.auditor.modeljob import ModelJob
from miaudit.auditor.parents import obtain_parents
from miaudit.auditor.rundir import RunDir, unsealed
from miaudit.auditor.runfiles import MODEL_RECORD, WEIGHTS
from miaudit.auditor.stages.plan import Audit, chain, snapshot_job, train_device
from miaudit.auditor.stages.progress import progress_bar
from miaudit.executors import Job, make_executor, own_errors_raised, resolve
from miaudit.results import Privacy
from miaudit.training.checkpoint import Checkpointing


class TrainPayload(NamedTuple):
    """What one train job ships to its worker (picklable, for process pools and Ray)."""

    job: ModelJob
    pool: Any  # a reference to the data pool (executors.resolve)
    plan: Any  # a reference to the plan
    device: str
    on_epoch: Any  # progress callback (local executor only) or None
    parent_state: dict[str, torch.Tensor] | None  # the parent's weights, derived models
    checkpoints: Checkpointing | None


@dataclass(frozen=True)
class Trained:
    """What the train stage hands on: its seconds and the targets' training facts."""

    seconds: float  # spent training in this run
    privacy: Privacy | None  # the DP guarantee the targets were trained under
    train_seconds_mean: float  # the targets' recorded training time, averaged


def train_stage(run: RunDir, planned: Audit, console: Console, show_progress: bool) -> Trained:
    """Train what is missing; read the targets' facts from their training records."""
    seconds = train_models(run, planned, console, show_progress)
    records = [unsealed(read_json(run.model_dir(t) / MODEL_RECORD)) for t in planned.plan.targets]
    guarantee = privacy_summary(records)
    return Trained(seconds, Privacy.model_validate(guarantee) if guarantee else None,
                   float(np.mean([r["train_seconds"] for r in records])))


def train_models(run: RunDir, planned: Audit, console: Console, show_progress: bool) -> float:
    """Train the models that have no valid record yet (on the configured executor); returns
    the seconds spent. Each finished model is written by this (driver) process as it
    arrives, so an interrupted stage resumes from the models already written."""
    checkpoints = checkpointing(run, planned)
    todo = pending_jobs(run, planned, console, checkpoints)
    warn_slow_bf16(planned, todo, console)
    cache = planned.cache
    done = len(planned.jobs) - len(todo)
    started = time.perf_counter()
    with progress_bar(console, show_progress) as bar, make_executor(planned.cfg.executor) as pool:
        overall = bar.add_task("training", total=len(planned.jobs), completed=done)
        tasks: dict[int, Any] = {}
        local = planned.cfg.executor.name == "local"

        def on_epoch(index: int, epoch: int, total: int, stats: dict[str, float]) -> None:
            bar.update(tasks[index], completed=epoch, total=total,
                       description=f"model {index} loss {stats.get('loss', float('nan')):.3f}")

        def on_start(job: Job) -> None:
            tasks[job.index] = bar.add_task(f"model {job.index}", total=None)

        on_done = model_saver(run, cache, bar, tasks, overall, checkpoints)

        shared = (pool.put(planned.pool), pool.put(planned.plan))
        device = str(train_device(planned.cfg, planned.device))
        callback = on_epoch if local else None

        def train_parents(parents: list[tuple[ModelJob, Any]], save: Any) -> None:
            def on_parent(job: Job, result: Any, seconds: float) -> None:
                save(job.payload.job, *result)
                if checkpoints is not None:
                    checkpoints.discard(job.payload.job.identity)
                bar.remove_task(tasks.pop(job.index))

            pool.run([Job(p.index, TrainPayload(p, *shared, device, callback, state,
                                                checkpoints))
                      for p, state in parents], run_model_job, on_parent, on_start)

        with own_errors_raised():
            parents, trained = obtain_parents(run, cache, todo, train_parents,
                                              say=lambda line: console.print(escape(line)))
            if parents:
                console.print(f"derived models start from {len(parents)} parent model(s); "
                              f"{trained} model(s) trained for them now (at any depth)")
            jobs = [Job(job.index, TrainPayload(
                        job, *shared, device, callback,
                        parents.get(job.parent.identity) if job.parent else None, checkpoints))
                    for job in todo]
            if local and planned.cfg.train.ensemble > 1:
                train_ensembles(jobs, planned, on_start, on_done)
                jobs = []
            pool.run(jobs, run_model_job, on_done, on_start)
    seconds = time.perf_counter() - started
    if todo:
        console.print(f"trained {len(todo)} model(s) in {seconds:.1f} s "
                      f"({seconds / len(todo):.1f} s per model, device {device})")
    return seconds


def warn_slow_bf16(planned: Audit, todo: list[ModelJob], console: Console) -> None:
    """One line before training when a model (or a parent it starts from) trains in bfloat16
    on a device without bfloat16 kernels: autocast then still runs, in fallback code many
    times slower than float32. Not on Ray, whose workers may be other machines than this one."""
    if planned.cfg.executor.name == "ray" or not any(
            level.train.precision == "bf16" for job in todo for level in chain(job)):
        return
    reason = slow_bf16(train_device(planned.cfg, planned.device))
    if reason is not None:
        console.print(escape(f"warning: {reason}"), style="yellow", soft_wrap=True)


def checkpointing(run: RunDir, planned: Audit) -> Checkpointing | None:
    """Where the jobs write epoch checkpoints (``executor.checkpoint_minutes``; 0: none)."""
    minutes = planned.cfg.executor.checkpoint_minutes
    return None if minutes == 0 else Checkpointing(str(run.checkpoint_dir()), minutes * 60)


def model_saver(run: RunDir, cache: Any, bar: Any, tasks: dict[int, Any], overall: Any,
                checkpoints: Checkpointing | None = None) -> Any:
    """The executor's on-done callback: write each finished model (and store it in the model
    cache) as it arrives, drop its checkpoint, and advance the progress bar."""
    def on_done(job: Job, result: Any, seconds: float) -> None:
        state, meta = result
        model_job = job.payload.job
        save_snapshots(run, model_job, modeljob.pop_snapshots(meta))
        run.save_model(model_job.index, model_job.identity, state, meta)
        if cache is not None:
            cache.store(model_job.identity, MODEL_RECORD, WEIGHTS,
                        run.model_dir(model_job.index))
        if checkpoints is not None:
            checkpoints.discard(model_job.identity)
        bar.remove_task(tasks.pop(job.index))
        bar.advance(overall)

    return on_done


def save_snapshots(run: RunDir, job: ModelJob, states: dict[int, Any]) -> None:
    """The weights ``job`` had at each train.snapshots epoch, each under its own identity,
    written (atomically, like final weights) before the model record that marks it done."""
    for epoch, state in states.items():
        run.save_snapshot(job.index, epoch, snapshot_job(job, epoch).identity, state,
                          {"index": job.index, "seed": job.seed, "epoch": epoch,
                           "model_identity": job.identity})


def missing_snapshots(run: RunDir, job: ModelJob) -> list[int]:
    return [epoch for epoch in job.train.snapshots if run.snapshot_record(
        job.index, epoch, snapshot_job(job, epoch).identity) is None]


def trained(run: RunDir, job: ModelJob) -> bool:
    """A valid model record and every snapshot it keeps (a missing snapshot retrains the
    model: its final weights come out the same, its queries stay valid)."""
    return run.model_record(job.index, job.identity) is not None and \
        not missing_snapshots(run, job)


def pending_jobs(run: RunDir, planned: Audit, console: Console,
                 checkpoints: Checkpointing | None) -> list[ModelJob]:
    """The jobs with no valid model record (or a missing snapshot), after fetching identical
    models from the model cache; says what was reused and what resumes (also from training
    ``checkpoints``)."""
    todo = [job for job in planned.jobs if not trained(run, job)]
    cache = planned.cache
    if cache is not None:  # the cache holds final weights: a model with snapshots retrains
        fetched = [job for job in todo if not job.train.snapshots
                   and fetch_model(cache, run, job)]
        todo = [job for job in todo if job not in fetched]
        if fetched:
            console.print(f"reused {len(fetched)} identical model(s) from "
                          f"{escape(str(cache.root))}")
    done = len(planned.jobs) - len(todo)
    if done and todo:
        console.print(f"[dim]resuming: {done} of {len(planned.jobs)} models already trained"
                      "[/dim]")
    mid_way = [job.index for job in todo if checkpoints is not None
               and checkpoints.path(job.identity).is_file()]
    if mid_way:
        console.print(f"[dim]{len(mid_way)} model(s) resume from training checkpoints: "
                      f"{', '.join(map(str, mid_way))}[/dim]")
    return todo


def train_ensembles(jobs: list[Job], planned: Audit, on_start: Any, on_done: Any) -> None:
    """``train.ensemble`` > 1 (local executor): train up to that many models at once as one
    vectorized ensemble where they can share a run; each model is written as it finishes."""
    by_index = {job.index: job for job in jobs}
    for job in jobs:
        on_start(job)
    modeljob.train_ensemble([job.payload.job for job in jobs], planned.pool, planned.plan,
                   train_device(planned.cfg, planned.device), size=planned.cfg.train.ensemble,
                   on_done=lambda model_job, state, meta: on_done(
                       by_index[model_job.index], (state, meta), 0.0),
                   parent_states={job.payload.job.parent.identity: job.payload.parent_state
                                  for job in jobs if job.payload.job.parent is not None})


def run_model_job(job: Job) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """One train job (module level, so Ray workers can import it): the model's state dict
    and meta, returned to the driver, which writes them."""
    model_job, pool_ref, plan_ref, device, on_epoch, parent_state, checkpoints = job.payload
    progress = None if on_epoch is None else (
        lambda epoch, total, stats: on_epoch(model_job.index, epoch, total, stats))
    return modeljob.train_model(model_job, resolve(pool_ref), resolve(plan_ref),
                                torch.device(device), progress, parent_state, checkpoints)


def fetch_model(cache: ModelCache, run: RunDir, job: ModelJob) -> bool:
    return cache.fetch(job.identity, job.identity, MODEL_RECORD, WEIGHTS,
                       run.model_dir(job.index))


def privacy_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The DP guarantee the targets were trained under (dpsgd records epsilon per epoch), or
    {} when any target was trained without one. The claimed epsilon is the largest over
    targets, so a lower bound above it contradicts at least one target's guarantee."""
    logs = [record.get("log", {}) for record in records]
    if not logs or not all(log.get("epsilon") for log in logs):
        return {}
    return {
        "epsilon": max(float(log["epsilon"][-1]) for log in logs),
        "delta": float(logs[0]["delta"][-1]),
        "noise_multiplier": float(logs[0]["noise_multiplier"][-1]),
        "sample_rate": float(logs[0]["sample_rate"][-1]),
        "epsilon_per_epoch": [float(v) for v in logs[0]["epsilon"]],
        "note": "empirical_epsilon per attack: Clopper-Pearson lower bound (95%, Bonferroni over "
                "thresholds) from the pooled (target, sample) decisions; trials within one "
                "model are not independent runs, so read it as an indicator, not a proof "
                "(Jagielski et al. 2020 use one canary per training run: `miaudit privacy "
                "audit` does that).",
    }
