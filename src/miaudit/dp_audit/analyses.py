"""The analyses of an empirical DP audit's canary scores (pure numpy: the bounds are in
:mod:`miaudit.privacy`) and :class:`DPAuditReport`, what one audit produced. The training
harness that makes the scores is :mod:`miaudit.dp_audit.canary`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from miaudit._runtime.io import write_json
from miaudit.dp_audit.settings import DPAuditConfig
from miaudit.privacy import auditing, fdp_audit, gaussian_audit


@dataclass
class DPAuditReport:
    """Everything one audit produced (JSON-able through :meth:`as_dict`)."""

    mode: str  # "one_run" | "multi_run" | "all_iterates"
    audit: dict[str, Any]
    claimed_epsilon: float | None
    claimed_source: str | None
    test_accuracy: float
    test_accuracy_std: float
    train_seconds: float
    config: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def epsilon_lower(self) -> float:
        return float(self.audit["epsilon_lower"])

    @property
    def verdict(self) -> str | None:
        if self.claimed_epsilon is None:
            return None
        return "contradicted" if self.epsilon_lower > self.claimed_epsilon else "consistent"

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "epsilon_lower": self.epsilon_lower,
                "claimed_epsilon": self.claimed_epsilon, "claimed_source": self.claimed_source,
                "verdict": self.verdict, "test_accuracy": self.test_accuracy,
                "test_accuracy_std": self.test_accuracy_std,
                "train_seconds": round(self.train_seconds, 2), "audit": self.audit,
                **self.extra, "config": self.config}

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        write_json(path, self.as_dict())
        return path


def claim(cfg: DPAuditConfig, recorded: list[float | None]) -> tuple[float | None, str | None]:
    """The claimed epsilon and where it comes from: the config's, else the largest of the
    runs' accountants (None when a run recorded none)."""
    if cfg.claimed_epsilon is not None:
        return cfg.claimed_epsilon, "config (claimed_epsilon)"
    if all(value is not None for value in recorded) and recorded:
        return max(v for v in recorded if v is not None), f"{cfg.train.recipe} accountant"
    return None, None


def cpu_timed(compute: Any) -> tuple[dict[str, Any], float]:
    """``compute()`` and the CPU seconds it took (this process)."""
    started = time.process_time()
    result = compute()
    return result, time.process_time() - started


def _one_run_analysis(name: str, cfg: DPAuditConfig, scores: np.ndarray,
                      included: np.ndarray) -> dict[str, Any]:
    """One analysis of m canaries' scores (higher = "in") and their coins: its bound, what a
    perfect attack could prove with the same canaries, and the CPU seconds it took."""
    grid, m = cfg.guess_grid(), scores.size
    if name == "steinke":
        audit = auditing.one_run_audit(scores, included, grid, cfg.delta, cfg.confidence)
        best = auditing.max_one_run_epsilon(grid, cfg.delta, cfg.confidence, m)
        return {**audit.as_dict(), "max_provable": best}
    if name == "fdp":
        family, *others = cfg.fdp_families()
        audit = fdp_audit.fdp_one_run_audit(scores, included, grid, cfg.delta, cfg.confidence,
                                            family)
        extra = {f"epsilon_lower_{other}_family": fdp_audit.fdp_one_run_audit(
            scores, included, grid, cfg.delta, cfg.confidence, other).epsilon_lower
            for other in others}
        best = fdp_audit.max_fdp_epsilon(m, grid, cfg.delta, cfg.confidence, family)
        return {**audit.as_dict(), **extra, "max_provable": best}
    if name == "gaussian":
        audit = gaussian_audit.one_run_gaussian_audit(scores, included, cfg.delta,
                                                      cfg.confidence)
        return {**audit.as_dict(), "max_provable": None}  # unbounded: mu_hat can grow freely
    if name == "clopper_pearson":  # the m canaries as independent trials (all_iterates)
        audit = auditing.multi_run_audit(scores[included], scores[~included], cfg.delta,
                                         cfg.confidence, cfg.selection, cfg.seed)
        best = auditing.max_multi_run_epsilon(int(included.sum()), int((~included).sum()),
                                              cfg.delta, cfg.confidence, cfg.selection)
        return {**audit.as_dict(), "max_provable": best}
    raise ValueError(f"unknown analysis {name!r}")


def analyse_one_run(cfg: DPAuditConfig, scores: np.ndarray,
                    included: np.ndarray) -> dict[str, dict[str, Any]]:
    """Every configured analysis of one run's canary scores, with its CPU seconds."""
    results = {}
    for name in cfg.analysis_names():
        result, seconds = cpu_timed(lambda n=name: _one_run_analysis(n, cfg, scores, included))
        results[name] = {**result, "cpu_seconds": round(seconds, 4)}
    return results


def headline_analysis(analyses: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The headline: the first analysis (the config lists the headline first)."""
    return next(iter(analyses.values()))
