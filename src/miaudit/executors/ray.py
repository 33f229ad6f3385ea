"""Per-model jobs as Ray tasks: on a local Ray instance, a multi-GPU node or a cluster.

One remote task per job, each reserving ``cpus_per_model`` CPUs and ``gpus_per_model`` GPUs
(fractional: 0.25 packs four small models on one GPU) so Ray's scheduler, not this module,
decides where and how many run at once. The task returns the job's artefacts by value through
the object store and the driver hands them to ``on_done``, so workers need no shared file
system: only the same ``miaudit`` (and torch) installed on every node, or shipped with
``runtime_env`` (e.g. ``{"py_modules": [...]}``).

Data: put large inputs every job reads (the data pool) into the object store once with
:meth:`RayExecutor.put` and carry the returned :class:`RayRef` in the payloads; the work
function calls :func:`miaudit.executors.resolve`. Numpy arrays come back zero-copy (read-only)
on every worker of a node; torch tensors are copied per task, so put numpy arrays and wrap
them with ``torch.from_numpy`` in the work function.

Ray is an optional dependency (``pip install 'miaudit[ray]'``) and is imported only here.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

try:
    import ray
    from ray.exceptions import RayError, RayTaskError
except ImportError as exc:  # pragma: no cover - exercised by a test that hides ray
    raise ImportError("the ray executor needs Ray, an optional dependency: "
                      "pip install 'miaudit[ray]' (or pip install 'ray>=2.9')") from exc

from miaudit.executors._base import (
    Job,
    JobFailedError,
    OnDone,
    OnProgress,
    SharedRef,
    Work,
    timed,
)


@dataclass(frozen=True)
class RayRef(SharedRef):
    """An object-store reference; ``get`` fetches (zero-copy for numpy) on any node."""

    ref: ray.ObjectRef

    def get(self) -> Any:
        return ray.get(self.ref)


def _run_job(work: Work, job: Job, threads: int | None) -> tuple[Any, float]:
    """The remote task's body. Sets the intra-op thread count first: torch otherwise starts
    one thread per core in every worker, and N concurrent models on N cores would then fight
    over N*N threads. A Ray worker is a process of its own: it needs the allocator setting."""
    from miaudit._runtime.allocator import keep_freed_memory

    keep_freed_memory()
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    return timed(work, job)


_remote_run_job = ray.remote(_run_job)


class RayExecutor:
    """Runs each job as a Ray task and calls ``on_done`` in the driver as tasks finish.

    ``address``: ``None`` starts a Ray instance on this machine (all its cores and GPUs),
    ``"auto"`` joins the cluster this machine belongs to (``ray start`` ran here),
    ``"ray://host:10001"`` connects through Ray Client, ``"host:6379"`` joins a cluster's GCS.
    If Ray is already initialized in this process, that connection is used as it is.

    A task whose worker process or node dies is resubmitted by Ray up to ``max_retries``
    times; so is a task that raised (``retry_exceptions``, same bound: a CUDA out-of-memory on
    a shared GPU is often transient, a bug fails ``max_retries + 1`` times). A task that still
    fails stops submission, cancels the unfinished tasks (killing their worker processes) and
    raises :class:`JobFailedError`. A retry may run in the same worker process as the failed
    attempt, so work functions must not rely on a fresh process (seed everything per job).
    At most ``max_in_flight`` tasks are submitted at a time (default: twice the number of
    jobs the cluster can run at once), so a failure stops the rest early and finished results
    do not pile up in the object store. ``on_done``'s seconds are the work function's own
    time in the worker (queueing and transfer excluded), as with the local executor.

    Devices: with ``gpus_per_model > 0`` Ray sets ``CUDA_VISIBLE_DEVICES`` to the task's GPU,
    so the work function should use ``torch.device("cuda")``; with 0, Ray leaves the variable
    alone and the work function must use the CPU (else every task lands on GPU 0 unscheduled).
    """

    def __init__(self, address: str | None = None, *, cpus_per_model: float = 1,
                 gpus_per_model: float = 0, max_retries: int = 2,
                 threads_per_model: int | None = None, max_in_flight: int | None = None,
                 runtime_env: dict[str, Any] | None = None) -> None:
        if cpus_per_model <= 0 or gpus_per_model < 0 or max_retries < 0:
            raise ValueError("need cpus_per_model > 0, gpus_per_model >= 0, max_retries >= 0")
        self.address = address
        self.cpus_per_model = cpus_per_model
        self.gpus_per_model = gpus_per_model
        self.max_retries = max_retries
        self.threads_per_model = threads_per_model or max(1, math.floor(cpus_per_model))
        self.max_in_flight = max_in_flight
        self.runtime_env = runtime_env
        self._owns_connection = False

    # -- connection -----------------------------------------------------------------------
    def connect(self) -> None:
        """Start or join Ray (once); :meth:`run` and :meth:`put` call this themselves."""
        if ray.is_initialized():
            return
        ray.init(address=self.address, runtime_env=self.runtime_env,
                 logging_level=logging.WARNING)
        self._owns_connection = True

    def close(self) -> None:
        """Disconnect (and stop the local instance if :meth:`connect` started one)."""
        if self._owns_connection and ray.is_initialized():
            ray.shutdown()
        self._owns_connection = False

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def put(self, value: Any) -> RayRef:
        """Store ``value`` once in the object store; pass the handle in job payloads."""
        self.connect()
        return RayRef(ray.put(value))

    # -- running --------------------------------------------------------------------------
    def run(self, jobs: Sequence[Job], work: Work, on_done: OnDone,
            on_progress: OnProgress | None = None) -> None:
        self.connect()
        task = _remote_run_job.options(
            num_cpus=self.cpus_per_model, num_gpus=self.gpus_per_model,
            max_retries=self.max_retries, retry_exceptions=True)
        work_ref = ray.put(work)  # serialized once, not once per job
        queue, pending = deque(jobs), {}
        window = self.max_in_flight or 2 * self._slots()
        try:
            while queue or pending:
                while queue and len(pending) < window:
                    job = queue.popleft()
                    pending[task.remote(work_ref, job, self.threads_per_model)] = job
                    if on_progress is not None:
                        on_progress(job)
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    job = pending.pop(ref)
                    try:
                        result, seconds = ray.get(ref)
                    except RayError as exc:
                        raise JobFailedError(job, _cause(exc), self.max_retries + 1) from exc
                    on_done(job, result, seconds)
        finally:
            # A failed job, a failing on_done or Ctrl-C: nothing left running on the cluster.
            for ref in pending:
                ray.cancel(ref, force=True)

    def _slots(self) -> int:
        """How many jobs the cluster can run at once with the per-model reservations."""
        resources = ray.cluster_resources()
        slots = resources.get("CPU", 1) / self.cpus_per_model
        if self.gpus_per_model > 0:
            slots = min(slots, resources.get("GPU", 0) / self.gpus_per_model)
        return max(1, math.floor(slots))


def _cause(error: RayError) -> BaseException:
    """The work function's own exception for a task that raised; Ray's error (worker crashed,
    node died, cancelled) otherwise."""
    if isinstance(error, RayTaskError) and error.cause is not None:
        return error.cause
    return error
