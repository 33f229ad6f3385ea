"""What an executor runs (a :class:`Job` per model) and the contract every executor keeps.

The train (and query) stage turns its plan into one :class:`Job` per model and hands the list,
a work function and a completion callback to an :class:`Executor`. The work function runs
wherever the executor puts it (this process, a Ray worker on another machine) and returns the
model's artefacts; the callback always runs in the driver process, which alone writes the run
directory. That split is what lets the same stage run sequentially or on a cluster whose
workers do not share the driver's file system.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from miaudit.errors import MiauditError

Work = Callable[["Job"], Any]
OnDone = Callable[["Job", Any, float], None]
OnProgress = Callable[["Job"], None]


@dataclass(frozen=True)
class Job:
    """One model's unit of work.

    ``index`` is the model index (progress, ordering, error messages); ``payload`` is
    everything the work function needs (configs, seeds, keep row, a data reference) and must
    be picklable, because a distributed executor ships it to another process.
    """

    index: int
    payload: Any


class JobFailedError(RuntimeError):
    """A job that failed for good (after the executor's retries, if it has any).

    The original exception is ``cause`` (and ``__cause__``); ``index`` is the job's model
    index. Jobs that had not finished were cancelled before this was raised.
    """

    def __init__(self, job: Job, cause: BaseException, attempts: int = 1) -> None:
        self.job = job
        self.index = job.index
        self.cause = cause
        self.attempts = attempts
        super().__init__(f"job {job.index} failed after {attempts} attempt(s): "
                         f"{type(cause).__name__}: {cause}")


class SharedRef:
    """A handle on a large input that every job reads (the data pool), from
    :meth:`Executor.put`. Payloads carry the handle, work functions call :func:`resolve`.
    The local handle just holds the object; the Ray handle holds an object-store reference, so
    the object is serialized once rather than once per job."""

    def get(self) -> Any:
        raise NotImplementedError


@dataclass(frozen=True)
class LocalRef(SharedRef):
    value: Any

    def get(self) -> Any:
        return self.value


def timed(work: Work, job: Job) -> tuple[Any, float]:
    """``work(job)`` and the seconds it took: the seconds every executor hands ``on_done``
    (the work's own time, wherever it ran; queueing and transfer excluded)."""
    started = time.perf_counter()
    result = work(job)
    return result, time.perf_counter() - started


@contextmanager
def own_errors_raised() -> Iterator[None]:
    """Around ``Executor.run``: a job that failed with one of miaudit's own errors (bad data,
    a config mistake found while training) raises that error, with its one-line message,
    rather than the executor's wrapper."""
    try:
        yield
    except JobFailedError as error:
        if isinstance(error.cause, MiauditError):
            raise error.cause from None
        raise


def resolve(value: Any) -> Any:
    """The object behind a :class:`SharedRef`; any other value unchanged, so work functions
    can be handed either."""
    return value.get() if isinstance(value, SharedRef) else value


@runtime_checkable
class Executor(Protocol):
    """Runs jobs and reports each finished one to the driver.

    ``run`` calls ``work(job)`` for every job (wherever the executor runs it) and, in the
    driver process, ``on_done(job, result, seconds)`` with the value ``work`` returned and the
    seconds ``work`` took, as each job finishes (completion order, not index order).
    ``on_progress(job)``, if given, is called in the driver when a job is started (local) or
    handed to the cluster (Ray). A job that fails for good raises :class:`JobFailedError`
    after the unfinished jobs are cancelled; jobs already reported through ``on_done`` stay
    done, so a driver that writes artefacts in ``on_done`` resumes on rerun.
    """

    def run(self, jobs: Sequence[Job], work: Work, on_done: OnDone,
            on_progress: OnProgress | None = None) -> None: ...

    def put(self, value: Any) -> SharedRef: ...

    def close(self) -> None: ...
