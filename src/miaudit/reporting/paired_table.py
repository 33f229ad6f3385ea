"""``miaudit compare --paired``: each run minus the first, per attack, with the paired
interval of the difference when the runs share their memberships (same data, seed, number of
models and protocol; :mod:`miaudit.analysis.paired_runs`)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.markup import escape as rich_escape
from rich.table import Table

from miaudit.analysis.paired_runs import NotPaired, paired_run_difference
from miaudit.reporting.run_view import RunView
from miaudit.stats.metrics import HEADLINE_KEYS

CAPTION = ("run minus run 1, same attack; in percentage points; [95% interval of "
           "the difference]: two-way bootstrap over targets and samples, both runs recomputed "
           "on the same resamples (paired); n/m: not measurable in one of the runs")
NAMES = {"tpr@0.1%": "TPR@0.1%", "tpr@1%": "TPR@1%", "auc": "AUC"}


def paired_rows(views: Sequence[RunView], labels: Sequence[str], attacks: Sequence[str]
                ) -> list[list[str]]:
    """One row per (run after the first, attack): the differences, or why there are none."""
    rows = []
    for view, label in zip(views[1:], labels[1:]):
        for attack in attacks:
            try:
                found = paired_run_difference(view, attack, views[0], attack)
            except NotPaired as error:
                rows.append([label, attack, f"not paired: {error}", "", ""])
                continue
            rows.append([label, attack,
                         *(_cell(key, found.get(key)) for key in HEADLINE_KEYS)])
    return rows


def _cell(key: str, difference: dict | None) -> str:
    if difference is None:
        return "n/m"
    scale, digits = 100, 2  # percentage points, as the audit tables' percent
    low, high = (scale * value for value in difference["ci"])
    return f"{scale * difference['value']:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"


def paired_table(rows: list[list[str]]) -> Table:
    out = Table(title="paired differences (run - run 1)", caption=CAPTION)
    for name in ("run", "attack", *(NAMES[key] for key in HEADLINE_KEYS)):
        out.add_column(name, justify="left" if name in ("run", "attack") else "right",
                       overflow="fold")  # full labels, folded, never cut with an ellipsis
    for row in rows:
        out.add_row(*(rich_escape(cell) for cell in row))
    return out


def paired_html(rows: list[list[str]]) -> str:
    """The paired differences as an HTML table (for ``miaudit compare --paired --html``)."""
    from html import escape

    head = "".join(f"<th>{escape(name)}</th>" for name in
                   ("run", "attack", *(NAMES[key] for key in HEADLINE_KEYS)))
    body = "".join("<tr>" + "".join(
        f'<td class="{"t" if i < 2 or cell.startswith("not paired") else "n"}">'
        f"{escape(cell)}</td>" for i, cell in enumerate(row)) + "</tr>" for row in rows)
    return (f'<div class="scroll"><table id="paired"><thead><tr>{head}</tr></thead>'
            f'<tbody>{body}</tbody></table></div><p class="note">{escape(CAPTION)}</p>')
