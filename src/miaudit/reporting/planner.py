"""The report's reference-planner section (``miaudit plan``): TPR against the number of
reference models, and how many are enough."""

from __future__ import annotations

from html import escape
from typing import Any

from miaudit.reporting import figures


def planner_section(planner: dict[str, Any]) -> str:
    """The reference planner (``miaudit plan``): TPR against the number of references."""
    planned = planner["attacks"]
    drawn = {label: rows for label, rows in planned.items() if rows["references"]}
    figures_html = "".join(
        f"<figure>{figures.to_svg(figures.planner_curves(drawn, key), f'plan{i}')}</figure>"
        for i, key in enumerate(("tpr@0.1%", "tpr@1%"))) if drawn else ""
    rows = "".join(
        f"<tr><td>{escape(label)}</td>"
        f"<td class=\"n\">{rows['references'][-1] if rows['references'] else 'n/a'}</td>"
        f"<td class=\"n\">{rows['enough_references'] or 'not determined'}</td>"
        f"<td>{escape(rows['how'])}</td></tr>" for label, rows in planned.items())
    table = ("<table><tr><th>attack</th><th>references in this audit</th>"
             f"<th>enough references</th><th>how</th></tr>{rows}</table>")
    return (f'<div class="figs">{figures_html}</div>{table}'
            f'<p class="note">{escape(planner["interval"])}</p>')
