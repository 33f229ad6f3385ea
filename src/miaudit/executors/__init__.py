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
    resolve,
)
from miaudit.executors.local import LocalExecutor

__all__ = ["Executor", "ExecutorConfig", "Job", "JobFailedError", "LocalExecutor", "LocalRef",
           "RayExecutor", "SharedRef", "make_executor", "resolve"]

_RAY_ONLY = ("address", "cpus_per_model", "gpus_per_model", "max_retries", "threads_per_model",
             "max_in_flight", "runtime_env")


class ExecutorConfig(BaseModel):
    """The ``executor`` config section; a bare string is the executor's name."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: Literal["local", "ray"] = "local"
    address: str | None = None
    cpus_per_model: float = Field(1.0, gt=0)
    gpus_per_model: float = Field(0.0, ge=0)
    max_retries: int = Field(2, ge=0)
    threads_per_model: int | None = Field(None, ge=1)
    max_in_flight: int | None = Field(None, ge=1)
    runtime_env: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _ray_options_need_ray(self) -> ExecutorConfig:
        # A cluster option under `executor: local` is a config mistake, not something to ignore.
        # (Options at their defaults pass: a dumped config must load back.)
        given = sorted(name for name in self.model_fields_set & set(_RAY_ONLY)
                       if getattr(self, name) != type(self).model_fields[name].default)
        if self.name == "local" and given:
            raise ValueError(f"executor 'local' takes no options, got {given}")
        return self


def make_executor(spec: ExecutorConfig | dict[str, Any] | str | None = None) -> Executor:
    """The executor a config section describes (``None``: local)."""
    cfg = spec if isinstance(spec, ExecutorConfig) else ExecutorConfig.model_validate(
        spec or "local")
    if cfg.name == "local":
        return LocalExecutor()
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
