"""Load a finished audit's run directory into an :class:`AttackInput`, for benchmarks that
re-run attacks on stored outputs (through the pipeline's own plan and query records, so the
layout is read in one place)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from miaudit._runtime.io import read_json
from miaudit.attacks import AttackInput
from miaudit.auditor import stages as pipeline
from miaudit.auditor.rundir import RunDir
from miaudit.config import validate_config


def load_run(run_dir: str | Path) -> tuple[AttackInput, dict[str, Any]]:
    """(AttackInput of every model's stored logits, the run's config as a dict)."""
    root = Path(run_dir)
    config = read_json(root / "manifest.json")["config"]
    planned = pipeline.plan_audit(validate_config(config))
    logits = pipeline.load_all_outputs(RunDir(root), planned)
    plan = planned.plan
    return AttackInput(logits=logits, labels=planned.pool.y.numpy(), keep=plan.keep,
                       query_names=list(config["queries"]),
                       population=plan.split.population), config
