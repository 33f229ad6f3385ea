"""Where the per-model jobs of a stage run: in this process, or on Ray.

Config section (``executor:`` in an audit config)::

    executor: local                  # default: sequential, in-process
    executor:
      name: ray
      address: auto                  # null: start Ray here; auto; ray://head:10001; head:6379
      cpus_per_model: 1
      gpus_per_model: 0.25           # fractional: four models share a GPU
      max_retries: 2
      threads_per_model: null        # torch threads per task; null = floor(cpus_per_model)
    executor:
      name: processes                # a pool of worker processes on this machine, no Ray
      workers: 4                     # jobs at once (e.g. four small models on one GPU)
      threads_per_model: 1
    executor:
      checkpoint_minutes: 10         # any executor: epoch checkpoints at most this often; 0: off

``RayExecutor`` lives in :mod:`miaudit.executors.ray`, imported on first use so that Ray stays
an optional dependency.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from miaudit.executors._base import (
    Executor,
    Job,
    JobFailedError,
    LocalRef,
    SharedRef,
    own_errors_raised,
    resolve,
)
from miaudit.executors.local import LocalExecutor
from miaudit.executors.processes import ProcessExecutor

__all__ = ["Executor", "ExecutorConfig", "Job", "JobFailedError", "LocalExecutor", "LocalRef",
           "ProcessExecutor", "RayExecutor", "SharedRef", "make_executor", "own_errors_raised",
           "resolve"]

# The options each executor reads; any other option given away from its default is an error.
_OPTIONS = {
    "local": ("checkpoint_minutes",),
    "ray": ("address", "cpus_per_model", "gpus_per_model", "max_retries", "threads_per_model",
            "max_in_flight", "runtime_env", "checkpoint_minutes"),
    "processes": ("workers", "threads_per_model", "checkpoint_minutes"),
}


class ExecutorConfig(BaseModel):
    """The ``executor`` config section; a bare string is the executor's name."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True,
                              use_attribute_docstrings=True)

    name: Literal["local", "ray", "processes"] = "local"
    """``local`` (one model after another in this process), ``processes`` (a worker pool on
    this machine) or ``ray``."""
    address: str | None = None
    """Ray: None starts Ray here; ``auto`` joins this machine's cluster; ``head:6379`` joins
    that cluster; ``ray://head:10001`` uses Ray Client."""
    cpus_per_model: float = Field(1.0, gt=0)
    """Ray: CPUs reserved per model task."""
    gpus_per_model: float = Field(0.0, ge=0)
    """Ray: GPUs per model task; fractional packs several small models on one GPU."""
    max_retries: int = Field(2, ge=0)
    """Ray: resubmissions of a task after a worker or node dies or the training raises."""
    threads_per_model: int | None = Field(None, ge=1)
    """Torch threads per model task (Ray: default ``cpus_per_model``)."""
    max_in_flight: int | None = Field(None, ge=1)
    """Ray: at most this many tasks submitted at once (None: all)."""
    runtime_env: dict[str, Any] | None = None
    """Ray: the tasks' runtime environment."""
    workers: int = Field(2, ge=1)
    """Processes: worker processes (models trained at once)."""
    checkpoint_minutes: float = Field(10.0, ge=0)
    """Epoch checkpoints of each model in training, at most this often (0: none): a killed
    run resumes its models mid-training. On a Ray cluster the run directory must be on a file
    system the nodes share for a retried task to find them."""

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _options_of_this_executor(self) -> ExecutorConfig:
        # A cluster option under `executor: local` is a config mistake, not something to ignore.
        # (Options at their defaults pass: a dumped config must load back.)
        foreign = sorted(name for name in self.model_fields_set - {"name"}
                         if name not in _OPTIONS[self.name]
                         and getattr(self, name) != type(self).model_fields[name].default)
        if foreign:
            takes = ", ".join(_OPTIONS[self.name]) or "no options"
            raise ValueError(f"executor {self.name!r} takes {takes}; got {foreign}")
        return self


def make_executor(spec: ExecutorConfig | dict[str, Any] | str | None = None) -> Executor:
    """The executor a config section describes (``None``: local)."""
    cfg = spec if isinstance(spec, ExecutorConfig) else ExecutorConfig.model_validate(
        spec or "local")
    if cfg.name == "local":
        return LocalExecutor()
    if cfg.name == "processes":
        return ProcessExecutor(cfg.workers, threads_per_model=cfg.threads_per_model or 1)
    from miaudit.executors.ray import RayExecutor

    return RayExecutor(cfg.address, cpus_per_model=cfg.cpus_per_model,
                       gpus_per_model=cfg.gpus_per_model, max_retries=cfg.max_retries,
                       threads_per_model=cfg.threads_per_model,
                       max_in_flight=cfg.max_in_flight, runtime_env=cfg.runtime_env)


def __getattr__(name: str) -> Any:
    # `from miaudit.executors import RayExecutor` imports Ray only when asked for.
    if name == "RayExecutor":
        from miaudit.executors.ray import RayExecutor

        return RayExecutor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
