"""``miaudit check``: the privacy gate for CI (:mod:`miaudit.analysis.gate`). Exit 0 when every
bound holds, 1 naming each violated bound, 2 for a bound that cannot be read or checked."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from miaudit.cli.errors import user_errors

console = Console() if sys.stdout.isatty() else Console(width=200)


@user_errors()
def check(
    run: Annotated[Path, typer.Argument(help="a run directory (miaudit audit or miaudit score) "
                                        "or its results.json")],
    max_: Annotated[list[str] | None, typer.Option("--max", help="a leakage bound "
                    "[ATTACK:]METRIC=LIMIT, e.g. 'rmia:tpr@0.1%=0.5%' or 'auc=0.60' (no "
                    "attack: every attack of the run); repeatable")] = None,
    use: Annotated[str, typer.Option(help="upper: the upper end of the 95% interval must be "
                   "within the limit (a pass means credibly below); point: the estimate")]
    = "upper",
    junit: Annotated[Path | None, typer.Option(help="also write the checks as JUnit XML "
                     "(one test case per bound and attack)")] = None,
) -> None:
    """Fail (exit 1) when the run leaks more than a bound allows: a privacy gate for CI."""
    from miaudit._runtime.io import write_bytes
    from miaudit.analysis.gate import USES, BoundError, evaluate, junit_xml, parse_bounds

    if use not in USES:
        raise BoundError(f"--use {use!r}: choose one of {', '.join(USES)}")
    bounds = parse_bounds(max_ or [])  # a bad expression fails before the run is read
    summary = _summary(run)
    checks = evaluate(summary, bounds, use)
    for line in (c.line() for c in checks):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if junit is not None:
        write_bytes(junit, junit_xml(checks, summary.name))
    failed = [c for c in checks if not c.passed]
    if failed:
        console.print(f"privacy gate FAILED: {len(failed)} of {len(checks)} bound check(s) "
                      "violated", markup=False, highlight=False)
        raise typer.Exit(1)
    console.print(f"privacy gate passed: {len(checks)} bound check(s) on the "
                  f"{'upper 95% interval ends' if use == 'upper' else 'estimates'}",
                  markup=False, highlight=False)


def _summary(run: Path):
    from miaudit.results import load_summary, parse_summary, read_results

    if run.is_file():
        return parse_summary(read_results(run), run)
    return load_summary(run)
