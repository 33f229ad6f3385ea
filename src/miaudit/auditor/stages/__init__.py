"""The audit as stages with their own identities.

``audit(config) -> Results`` runs, for the run directory of ``config``:

1. **plan** (:mod:`.plan`): load the data, split the pool, plan memberships, derive every
   model's identity; nothing is written before it succeeds;
2. **train** (:mod:`.train`): weights of every model; hands on the targets' DP guarantee and
   training time;
3. **query** (:mod:`.query`): logits of every pool sample under every query spec, from the
   reloaded weights;
4. **evaluate** (:mod:`.evaluate`): robust accuracy and the NSDE guarantee of the targets;
5. **score** (:mod:`.score`): attacks and metrics over stored outputs, never touching a model,
   written as one atomic generation;
6. **report** (:mod:`.report`): plots and the HTML report.

Each stage resumes on its own: a killed run, rerun with the same command, recomputes only
what is missing, stale (another identity) or damaged (digest mismatch).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console

from miaudit._runtime.machine import describe
from miaudit.auditor.rundir import RunDir
from miaudit.auditor.stages.evaluate import evaluate_stage
from miaudit.auditor.stages.plan import Audit, load_pool, plan_audit, train_device
from miaudit.auditor.stages.query import query_stage
from miaudit.auditor.stages.report import report_stage
from miaudit.auditor.stages.score import load_all_outputs, score_stage
from miaudit.auditor.stages.train import train_stage
from miaudit.config import AuditConfig, load_config, validate_config
from miaudit.results import Results, Timing
from miaudit.results.scoring import publish

__all__ = ["Audit", "Results", "RunDir", "audit", "load_all_outputs", "load_pool", "plan_audit"]


def audit(config: AuditConfig | dict[str, Any] | str | Path | None = None, *,
          console: Console | None = None, show_progress: bool = True,
          wait: bool = False) -> Results:
    """Run (or resume, or grow) the audit described by ``config`` and return its results."""
    cfg = _coerce_config(config)
    console = console or Console(stderr=True)
    started = time.perf_counter()
    planned = plan_audit(cfg)
    run = RunDir(planned.run_dir)
    made_output_dir = not cfg.output_dir.exists()
    with run.lock(wait=wait), _removed_if_failed(run, made_output_dir):
        swept = run.sweep() + (planned.cache.sweep() if planned.cache is not None else 0)
        if swept:
            console.print(f"[dim]removed {swept} temporary file(s) a killed run left[/dim]")
        run.claim(planned.run_identity, cfg.model_dump(mode="json"))
        run.write_plan(planned.plan.keep, {"audited": planned.plan.split.audited,
                                           "population": planned.plan.split.population,
                                           "holdout": planned.plan.split.holdout})
        trained = train_stage(run, planned, console, show_progress)
        query_seconds = query_stage(run, planned, console, show_progress)
        evaluated = evaluate_stage(run, planned, trained.privacy)
        score_started = time.perf_counter()
        summary = score_stage(run, planned, trained, evaluated)
        timing = Timing.model_validate({
            "train_seconds_this_run": round(trained.seconds, 2),
            "query_seconds_this_run": round(query_seconds, 2),
            "attack_seconds": round(time.perf_counter() - score_started, 2),
            "total_seconds_this_run": round(time.perf_counter() - started, 2),
            "device": str(planned.device),
            "machine": None if cfg.executor.name == "ray" else describe(
                train_device(cfg, planned.device)),
        })
        results = publish(run, summary.model_copy(update={"timing": timing}))
        report_stage(run, planned, results.summary)
    return results


@contextmanager
def _removed_if_failed(run: RunDir, made_output_dir: bool) -> Iterator[None]:
    """A run that fails before its first model is saved (a diverging first model, an error
    found while training) leaves no empty run directory behind, nor the output directory it
    created; one holding a training checkpoint is kept (it resumes). Runs under the lock; a
    run directory that existed before is never touched."""
    fresh = not (run.root / "manifest.json").exists()
    try:
        yield
    except BaseException:
        progress = any(run.checkpoint_dir().glob("*"))
        if fresh and not (run.root / "models").exists() and not progress:
            run.remove()
            if made_output_dir:
                try:
                    run.root.parent.rmdir()  # only when empty: another run may have started
                except OSError:
                    pass
        raise


def _coerce_config(config: AuditConfig | dict[str, Any] | str | Path | None) -> AuditConfig:
    if isinstance(config, AuditConfig):
        return config
    if isinstance(config, dict):
        return validate_config(config)
    return load_config(None if config is None else Path(config))
