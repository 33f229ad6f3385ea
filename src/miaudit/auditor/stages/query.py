"""The query stage: logits of every pool sample under every query spec, keyed by the weights
and the spec, computed from the *reloaded* weights (so adding a query trains nothing).

One job per (model, spec) runs on the audit's executor, like training: stochastic queries
(input dropout, many draws of a spiking network) can cost as much as training, and a cluster
or a pool of worker processes runs them side by side. The driver alone reads the weights
(verified when the train stage accepted them) and writes every output as its job finishes, so
workers need no access to the run directory and a killed stage resumes per (model, spec).
"""

from __future__ import annotations

import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console

from miaudit._runtime.io import read_tensors
from miaudit.auditor import identity as ids
from miaudit.auditor.modality import modality_of
from miaudit.auditor.model_cache import ModelCache
from miaudit.auditor.modeljob import ModelJob, rebuild
from miaudit.auditor.rundir import RunDir
from miaudit.auditor.runfiles import WEIGHTS
from miaudit.auditor.stages.plan import Audit, stored_models, train_device
from miaudit.auditor.stages.progress import progress_bar
from miaudit.executors import Job, make_executor, own_errors_raised, resolve
from miaudit.queries import build_query, draws_of, query_outputs, stored_queries


def query_key(job: ModelJob, spec: str, planned: Audit | None = None) -> str:
    """The identity of one model's outputs under ``spec``; a text prefix query's also names
    the texts of its prefix (they come from the plan, not from the model)."""
    samples = prefix_of(job, spec, planned)
    if samples is not None:
        return ids.query_identity(job.identity, f"{spec}@{','.join(str(i) for i in samples)}")
    return ids.query_identity(job.identity, spec, build_query(spec).stream)


def prefix_of(job: ModelJob, spec: str, planned: Audit | None) -> np.ndarray | None:
    """Pool indices of the prefix texts of a text prefix query (None for other queries)."""
    from miaudit.auditor.stages.prefix_query import is_conditional, prefix_samples

    if not is_conditional(spec):
        return None
    if planned is None:
        raise ValueError(f"query {spec!r} depends on the audit's plan; pass it")
    plan = planned.plan
    return prefix_samples(spec, plan.keep[job.index], plan.split.population, plan.split.audited)


def query_stage(run: RunDir, planned: Audit, console: Console, show_progress: bool) -> float:
    """Outputs of every (model, query spec) that has no valid record; returns the seconds."""
    started = time.perf_counter()
    todo = missing_outputs(run, planned)
    if not todo:  # a resumed or rescored audit: no executor to start (Ray takes seconds)
        return time.perf_counter() - started
    cache = planned.cache
    device = str(train_device(planned.cfg, planned.device))
    with progress_bar(console, show_progress) as bar, \
            make_executor(planned.cfg.executor) as executor:
        task = bar.add_task("querying", total=len(todo))
        pool_ref = executor.put(planned.pool)

        def payload(job: ModelJob, specs: list[str], folder: Path) -> tuple[Any, ...]:
            weights = StoredWeights(folder / WEIGHTS)
            seed = query_seed(job.seed, draws_of(specs[0]))
            return (job, specs, seed, pool_ref, weights, device, prefix_of(job, specs[0], planned))

        def on_done(done: Job, logits: torch.Tensor, seconds: float) -> None:
            job, specs = done.payload[:2]
            for column, spec in enumerate(specs):
                key = query_key(job, spec, planned)
                outputs = modality_of(planned.pool).stored(logits[:, column])
                run.save_outputs(job.index, key, outputs, {
                    "spec": spec, "model": job.identity, "seconds": round(seconds, 3),
                    "computed_with": specs})
                if cache is not None:
                    record, data = output_relpaths(key)
                    cache.store(job.identity, record, data, run.model_dir(job.index))
                bar.advance(task)

        with own_errors_raised():
            executor.run([Job(job.index, payload(job, specs, folder))
                          for job, specs, folder in grouped(todo)],
                         run_query_job, on_done)
    return time.perf_counter() - started


def grouped(todo: list[tuple[ModelJob, str, Path]]) -> list[tuple[ModelJob, list[str], Path]]:
    """One job per model and draw stream (a stream's queries share their passes: one run of the
    largest count), one per other query."""
    groups: dict[tuple[str, str], tuple[ModelJob, list[str], Path]] = {}
    for job, spec, folder in todo:
        # by identity, not index: a model's snapshots share its index (train.snapshots)
        groups.setdefault((job.identity, draws_of(spec)), (job, [], folder))[1].append(spec)
    return list(groups.values())


def missing_outputs(run: RunDir, planned: Audit) -> list[tuple[ModelJob, str, Path]]:
    """The (model, spec, weights folder) triples with no valid output record, after fetching
    identical outputs from the model cache. Snapshots (train.snapshots) are queried like final
    models; their outputs sit beside the model's, under the snapshot's identity."""
    cache = planned.cache
    todo = []
    for job, folder in stored_models(run, planned):
        for spec in stored_queries(planned.cfg.queries):
            key = query_key(job, spec, planned)
            if run.output_record(job.index, key) is None and (
                    cache is None or not fetch_output(cache, run, job, key)):
                todo.append((job, spec, folder))
    return todo


def run_query_job(job: Job) -> torch.Tensor:
    """One model's queries (module level, so workers can import it): (pool x specs x classes)
    logits, returned to the driver, which writes them."""
    model_job, specs, seed, pool_ref, weights, device, prefix = job.payload
    pool = resolve(pool_ref)
    state = weights.load() if isinstance(weights, StoredWeights) else weights
    model = rebuild(model_job, pool, state, torch.device(device))
    if prefix is not None:  # a text prefix query (ReCaLL, Con-ReCall)
        from miaudit.auditor.stages.prefix_query import prefix_outputs

        return prefix_outputs(model, pool.x, prefix, torch.device(device))[:, None]
    return query_outputs(model, pool.x, specs, torch.device(device), seed)


class StoredWeights:
    """A model's weights file in the run directory, read only when needed: by the job itself
    in this process (local executor), or when the job is pickled to be sent to a worker, which
    then receives the state dict, not the path. So the driver holds the weights of the jobs
    in flight only, never of every model at once (a family of language models would not fit)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, torch.Tensor]:
        return read_tensors(self.path)

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (self.load(),)


def output_relpaths(key: str) -> tuple[str, str]:
    return f"outputs/{key}.json", f"outputs/{key}.safetensors"


def fetch_output(cache: ModelCache, run: RunDir, job: ModelJob, key: str) -> bool:
    record, data = output_relpaths(key)
    return cache.fetch(job.identity, key, record, data, run.model_dir(job.index))


def query_seed(seed: int, spec: str) -> int:
    """Seed of one model's query job (``spec``: the job's :func:`draws_of`): stochastic
    queries are reproducible per (model, spec or draw stream)."""
    return int(np.random.SeedSequence([seed, zlib.crc32(spec.encode())]).generate_state(1)[0])
