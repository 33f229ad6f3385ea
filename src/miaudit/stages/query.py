"""The query stage: logits of every pool sample under every query spec, keyed by the weights
and the spec, computed from the *reloaded* weights (so adding a query trains nothing).
"""

from __future__ import annotations

import time
import zlib

import numpy as np
from rich.console import Console

from miaudit import identity as ids
from miaudit.modeljob import ModelJob, load_trained
from miaudit.queries import query_outputs, stored_queries
from miaudit.rundir import ModelCache, RunDir
from miaudit.stages.plan import Audit
from miaudit.stages.progress import progress_bar


def query_key(job: ModelJob, spec: str) -> str:
    return ids.query_identity(job.identity, spec)


def query_stage(run: RunDir, planned: Audit, console: Console, show_progress: bool) -> float:
    """Outputs of every (model, query spec) that has no valid record; returns the seconds."""
    cache = planned.cache
    started = time.perf_counter()
    missing = {job.index: [s for s in stored_queries(planned.cfg.queries)
                           if run.output_record(job.index, query_key(job, s)) is None]
               for job in planned.jobs}
    if cache is not None:
        for job in planned.jobs:
            missing[job.index] = [s for s in missing[job.index]
                                  if not fetch_output(cache, run, job, query_key(job, s))]
    todo = [job for job in planned.jobs if missing[job.index]]
    with progress_bar(console, show_progress and bool(todo)) as bar:
        task = bar.add_task("querying", total=len(todo))
        for job in todo:
            model = load_trained(run, job, planned.pool, planned.device)
            for spec in missing[job.index]:
                key = query_key(job, spec)
                began = time.perf_counter()
                logits = query_outputs(model, planned.pool.x, [spec], planned.device,
                                       query_seed(job.seed, spec))[:, 0]
                run.save_outputs(job.index, key, logits, {
                    "spec": spec, "model": job.identity,
                    "seconds": round(time.perf_counter() - began, 3)})
                if cache is not None:
                    record, data = output_relpaths(key)
                    cache.store(job.identity, record, data, run.model_dir(job.index))
            bar.advance(task)
    return time.perf_counter() - started


def output_relpaths(key: str) -> tuple[str, str]:
    return f"outputs/{key}.json", f"outputs/{key}.safetensors"


def fetch_output(cache: ModelCache, run: RunDir, job: ModelJob, key: str) -> bool:
    record, data = output_relpaths(key)
    return cache.fetch(job.identity, key, record, data, run.model_dir(job.index))


def query_seed(seed: int, spec: str) -> int:
    """Seed of one model's query: stochastic queries are reproducible per (model, spec)."""
    return int(np.random.SeedSequence([seed, zlib.crc32(spec.encode())]).generate_state(1)[0])
