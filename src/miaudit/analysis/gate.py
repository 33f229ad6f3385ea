"""A privacy gate: leakage bounds such as ``rmia:tpr@0.1%=0.5%`` or ``auc=0.60`` checked against
a finished run's results (``miaudit check``, :func:`miaudit.testing.assert_leakage`).

A bound is ``[ATTACK:]METRIC=LIMIT``: ATTACK an attack label of the run (labels may hold ``:``
and ``=``, e.g. ``lira:offline=true:auc=0.6``), METRIC a pooled metric of results.json
(``tpr@0.1%``, ``tpr@1%``, ``auc``, ``balanced_accuracy``, ...), LIMIT a fraction (``0.005``)
or a percentage (``0.5%``). Every metric here grows with leakage, so a bound is an upper limit.

A bound without an attack applies to **every** attack of the run. That is the strongest attack
on that very metric (the maximum over attacks is below the limit exactly when each one is), and
it avoids choosing "the strongest" by another metric than the one bounded.

By default a bound is checked on the upper end of the metric's pooled 95% interval (the
crossed bootstrap over samples and retrainings, :mod:`miaudit.stats.intervals`): a pass then means
the leakage is credibly below the limit, not just that this run's estimate happened to be.
``use="point"`` checks the estimate itself.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from xml.etree import ElementTree

from miaudit.errors import MiauditError
from miaudit.results import Summary

USES = ("upper", "point")
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(%?)\s*$")


class BoundError(MiauditError):
    """A bound expression that cannot be read, or names what the run does not have."""


@dataclass(frozen=True)
class Bound:
    """``attack`` (None: every attack) ``metric`` at most ``limit`` (a fraction)."""

    attack: str | None
    metric: str
    limit: float
    text: str  # as the user wrote it


@dataclass(frozen=True)
class Check:
    """One bound on one attack: the value compared (``upper`` or ``point``), the estimate and
    its interval."""

    bound: Bound
    attack: str
    estimate: float
    interval: tuple[float, float] | None
    compared: float
    use: str

    @property
    def passed(self) -> bool:
        return self.compared <= self.bound.limit

    def line(self) -> str:
        interval = ("" if self.interval is None
                    else f" [95% CI {_show(self.bound.metric, self.interval[0])}, "
                         f"{_show(self.bound.metric, self.interval[1])}]")
        verdict = "ok  " if self.passed else "FAIL"
        what = "upper end" if self.use == "upper" else "estimate"
        relation = "<=" if self.passed else ">"
        return (f"{verdict} {self.attack} {self.bound.metric} = "
                f"{_show(self.bound.metric, self.estimate)}{interval}: {what} "
                f"{_show(self.bound.metric, self.compared)} {relation} limit "
                f"{_show(self.bound.metric, self.bound.limit)} ({self.bound.text})")


def _show(metric: str, value: float) -> str:
    """Rates as percentages (as the tables print them), AUC-like scores as fractions."""
    return f"{value * 100:.3g}%" if metric.startswith(("tpr@", "fpr@")) else f"{value:.4g}"


def parse_bound(text: str) -> Bound:
    """``[ATTACK:]METRIC=LIMIT`` as a :class:`Bound` (see the module docstring); BoundError
    on one line naming what is wrong."""
    head, sep, limit_text = str(text).rpartition("=")
    if not sep or not head.strip():
        raise BoundError(f"bound {text!r}: expected [ATTACK:]METRIC=LIMIT, e.g. "
                         "'rmia:tpr@0.1%=0.5%' or 'auc=0.6'")
    match = _NUMBER.match(limit_text)
    if match is None:
        raise BoundError(f"bound {text!r}: limit {limit_text!r} is not a number (write 0.005 "
                         "or 0.5%)")
    # decimal division: '0.7%' is exactly the float 0.007, as a limit typed as 0.007 would be
    limit = float(Decimal(match.group(1)) / (100 if match.group(2) else 1))
    if not 0.0 <= limit <= 1.0:
        raise BoundError(f"bound {text!r}: limit {limit:g} is outside [0, 1] (rates and AUC "
                         "are fractions; write 0.5% or 0.005)")
    attack, colon, metric = head.strip().rpartition(":")
    if colon and not attack.strip():
        raise BoundError(f"bound {text!r}: empty attack name before ':'")
    return Bound(attack.strip() if colon else None, metric.strip().lower(), limit, str(text))


def parse_bounds(texts: Iterable[str]) -> list[Bound]:
    bounds = [parse_bound(text) for text in texts]
    if not bounds:
        raise BoundError("no bound given: add --max '[ATTACK:]METRIC=LIMIT', e.g. "
                         "--max 'auc=0.6'")
    return bounds


def evaluate(summary: Summary, bounds: Sequence[Bound | str], use: str = "upper") -> list[Check]:
    """Every bound checked on every attack it names (one :class:`Check` each). BoundError,
    before any check, for an unknown attack or metric, a level the run cannot measure, or a
    metric without an interval under ``use="upper"``."""
    if use not in USES:
        raise BoundError(f"--use {use!r}: choose one of {', '.join(USES)}")
    parsed = [parse_bound(b) if isinstance(b, str) else b for b in bounds]
    return [_check(summary, bound, label, use) for bound in parsed
            for label in _attacks_of(summary, bound)]


def _attacks_of(summary: Summary, bound: Bound) -> list[str]:
    if bound.attack is None:
        return list(summary.attacks)
    if bound.attack not in summary.attacks:
        raise BoundError(f"bound {bound.text!r}: the run has no attack {bound.attack!r}; its "
                         f"attacks: {', '.join(summary.attacks)}")
    return [bound.attack]


def _metrics_of(pooled: dict) -> list[str]:
    return [key for key, value in pooled.items() if isinstance(value, (int, float))
            and not isinstance(value, bool) and not key.startswith(("n_", "fpr@"))]


def _check(summary: Summary, bound: Bound, label: str, use: str) -> Check:
    record = summary.attacks[label]
    if bound.metric not in _metrics_of(record.pooled):
        raise BoundError(f"bound {bound.text!r}: attack {label!r} has no metric "
                         f"{bound.metric!r}; metrics: {', '.join(_metrics_of(record.pooled))}")
    estimate = record.value(bound.metric)
    if estimate is None:
        raise BoundError(f"bound {bound.text!r}: {bound.metric} cannot be measured for "
                         f"{label!r} in this run (too few non-members for that FPR, or tied "
                         "top scores); bound a higher FPR level")
    interval = record.interval(bound.metric)
    if use == "upper" and interval is None:
        raise BoundError(f"bound {bound.text!r}: {label!r} has no interval on {bound.metric}; "
                         "use --use point")
    interval = None if interval is None else (float(interval[0]), float(interval[1]))
    compared = interval[1] if use == "upper" else float(estimate)
    if not math.isfinite(compared):
        raise BoundError(f"bound {bound.text!r}: {label!r} {bound.metric} is not finite")
    return Check(bound, label, float(estimate), interval, float(compared), use)


def junit_xml(checks: Sequence[Check], run_name: str) -> bytes:
    """The checks as a JUnit XML report: one testsuite, one testcase per bound and attack, a
    ``<failure>`` for each violated bound (so CI systems list them as failed tests)."""
    failures = sum(not check.passed for check in checks)
    suite = ElementTree.Element("testsuite", name=f"miaudit check {run_name}",
                                tests=str(len(checks)), failures=str(failures), errors="0",
                                skipped="0")
    for check in checks:
        case = ElementTree.SubElement(suite, "testcase", classname=f"miaudit.{run_name}",
                                      name=f"{check.attack} {check.bound.metric} <= "
                                           f"{_show(check.bound.metric, check.bound.limit)}")
        if not check.passed:
            failure = ElementTree.SubElement(case, "failure", message=check.line(),
                                             type="LeakageAboveBound")
            failure.text = check.line()
    return ElementTree.tostring(ElementTree.ElementTree(suite).getroot(), encoding="utf-8",
                                xml_declaration=True)
