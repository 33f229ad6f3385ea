"""Compatibility module: the audit pipeline now lives in :mod:`miaudit.stages` (one module per
stage) and the model factory in :mod:`miaudit.modeljob`. Re-exports the names scripts import."""

from miaudit.results import Results
from miaudit.rundir import RunDir
from miaudit.stages import audit
from miaudit.stages.plan import Audit, load_pool, plan_audit
from miaudit.stages.score import load_all_outputs

__all__ = ["Audit", "Results", "RunDir", "audit", "load_all_outputs", "load_pool", "plan_audit"]
