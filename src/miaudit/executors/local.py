"""Sequential, in-process execution: the pipeline's behaviour before executors existed."""

from __future__ import annotations

from collections.abc import Sequence
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


class LocalExecutor:
    """Runs the jobs one after another in this process, in the order given."""

    def run(self, jobs: Sequence[Job], work: Work, on_done: OnDone,
            on_progress: OnProgress | None = None) -> None:
        for job in jobs:
            if on_progress is not None:
                on_progress(job)
            try:
                result, seconds = timed(work, job)
            except Exception as exc:  # KeyboardInterrupt etc. propagate unwrapped
                raise JobFailedError(job, exc) from exc
            on_done(job, result, seconds)

    def put(self, value: Any) -> LocalRef:
        return LocalRef(value)

    def close(self) -> None:
        """Nothing to release; present so callers treat every executor alike."""

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
