"""Per-model jobs in a pool of worker processes on this machine: several models at once
without Ray (e.g. several small models sharing one GPU, or one model per core of a CPU box).

Built on :class:`concurrent.futures.ProcessPoolExecutor` with the ``spawn`` start method:
CUDA cannot be used in a forked child, and a spawned worker starts from a clean interpreter
the way a Ray worker does, so the work function and payloads must be picklable (they are, for
Ray's sake). The driver alone calls ``on_done`` and so alone writes the run directory.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from miaudit.executors._base import (
    Job,
    JobFailedError,
    LocalRef,
    OnDone,
    OnProgress,
    Work,
    timed,
)


def _set_threads(threads: int) -> None:
    """Worker initializer: N workers each with torch's default (one thread per core) would
    run N x cores threads on the cores; a spawned worker needs the allocator setting too."""
    import torch

    from miaudit._runtime.allocator import keep_freed_memory

    keep_freed_memory()
    torch.set_num_threads(threads)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel the queued jobs and end the running ones now, rather than waiting minutes for
    models nobody will use."""
    if hasattr(pool, "terminate_workers"):  # Python >= 3.14 (it shuts the pool down too)
        pool.terminate_workers()
        return
    # Before 3.14 the pool has no public way to end its workers; shutdown forgets them.
    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        process.terminate()


class ProcessExecutor:
    """Runs up to ``workers`` jobs at once, each in a worker process with
    ``threads_per_model`` torch threads; reports each finished job to ``on_done`` in the
    driver (completion order). A job that raises (or a worker that dies), a failing
    ``on_done`` or Ctrl-C cancels the queued jobs, ends the running ones' worker processes and
    raises (:class:`JobFailedError` for a job); no retries."""

    def __init__(self, workers: int, threads_per_model: int = 1) -> None:
        if workers < 1 or threads_per_model < 1:
            raise ValueError("need workers >= 1 and threads_per_model >= 1")
        self.workers = workers
        self.threads_per_model = threads_per_model

    def run(self, jobs: Sequence[Job], work: Work, on_done: OnDone,
            on_progress: OnProgress | None = None) -> None:
        if not jobs:
            return
        pool = ProcessPoolExecutor(max_workers=min(self.workers, len(jobs)),
                                   mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_set_threads, initargs=(self.threads_per_model,))
        try:
            pending: dict[Future, Job] = {}
            for job in jobs:
                pending[pool.submit(timed, work, job)] = job
                if on_progress is not None:
                    on_progress(job)
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    job = pending.pop(future)
                    try:
                        result, seconds = future.result()
                    except Exception as exc:
                        raise JobFailedError(job, exc) from exc
                    on_done(job, result, seconds)
        except BaseException:
            _stop(pool)
            raise
        pool.shutdown(wait=True)

    def put(self, value: Any) -> LocalRef:
        """The value itself: it is pickled into each job sent to a worker."""
        return LocalRef(value)

    def close(self) -> None:
        """Nothing held between runs: each :meth:`run` starts and joins its own pool."""

    def __enter__(self) -> ProcessExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
