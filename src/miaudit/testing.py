"""Helpers for test suites: a privacy gate inside pytest.

    from miaudit import Results
    from miaudit.testing import assert_leakage

    def test_model_does_not_leak():
        results = Results.load("runs/my-audit")
        assert_leakage(results, "rmia:tpr@0.1%=0.5%", "auc=0.60")

Bounds are read as ``miaudit check --max`` reads them (:mod:`miaudit.analysis.gate`): a bound
without an attack applies to every attack of the run; by default the upper end of the 95%
interval must be within the limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["assert_leakage"]


def assert_leakage(results: Any, *bounds: str, use: str = "upper",
                   limits: Mapping[str, float] | None = None) -> list:
    """Raise ``AssertionError`` naming every violated bound (value and interval) of
    ``results`` (a :class:`miaudit.Results`, its ``summary``, or a run directory). ``bounds``:
    expressions such as ``"rmia:tpr@0.1%=0.5%"``; ``limits``: the same as a mapping
    ``{"rmia:tpr@0.1%": 0.005}``. A bound that cannot be read or checked raises
    ``miaudit.analysis.gate.BoundError`` (a ValueError-like user error, not a failed gate).
    Returns the checks (:class:`miaudit.analysis.gate.Check`) when every bound holds."""
    from miaudit.analysis.gate import evaluate, parse_bounds
    from miaudit.results import Summary, load_summary

    texts = [*bounds, *(f"{key}={value!r}" for key, value in (limits or {}).items())]
    parsed = parse_bounds(texts)
    if isinstance(results, (str, Path)):
        summary = load_summary(Path(results))
    else:
        summary = results if isinstance(results, Summary) else results.summary
    checks = evaluate(summary, parsed, use)
    failed = [check.line() for check in checks if not check.passed]
    if failed:
        raise AssertionError(f"{len(failed)} leakage bound(s) violated in {summary.name}:\n"
                             + "\n".join(failed))
    return checks
