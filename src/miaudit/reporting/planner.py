"""The report's reference-planner section (``miaudit plan``): TPR against the number of
reference models, and how many are enough."""

from __future__ import annotations

from html import escape
from typing import Any

from miaudit.reporting import figures


def planner_section(planner: dict[str, Any]) -> str:
    """The reference planner (``miaudit plan``): TPR against the number of references."""
    planned = planner["attacks"]
    figures_html = "".join(
        f"<figure>{figures.to_svg(figures.planner_curves(planned, key), f'plan{i}')}</figure>"
        for i, key in enumerate(("tpr@0.1%", "tpr@1%")))
    rows = "".join(
        f"<tr><td>{escape(label)}</td><td class=\"n\">{rows['references'][-1]}</td>"
        f"<td class=\"n\">{rows['enough_references'] or 'n/a'}</td>"
        f"<td>{escape(rows['how'])}</td></tr>" for label, rows in planned.items())
    table = ("<table><tr><th>attack</th><th>references in this audit</th>"
             f"<th>enough references</th><th>how</th></tr>{rows}</table>")
    return (f'<div class="figs">{figures_html}</div>{table}'
            f'<p class="note">{escape(planner["interval"])}</p>')
