"""The report's per-record risk section, from the run's records.csv
(:mod:`miaudit.analysis.record_risk`): the risk distribution, the share of records whose risk
is credibly positive, and the most exposed records (only those whose interval excludes zero)."""

from __future__ import annotations

import csv
from html import escape
from pathlib import Path
from typing import Any

import numpy as np

from miaudit.analysis.record_risk import RECORDS_FILE, read_records_header
from miaudit.reporting import figures

TOP = 20


def read_records(run_dir: Path) -> dict[str, Any] | None:
    """records.csv as {column: array} plus ``attack`` and ``level``; None without one."""
    path = Path(run_dir) / RECORDS_FILE
    if not path.exists():
        return None
    header = read_records_header(path)
    with open(path, newline="") as handle:
        handle.readline()  # the comment line
        rows = list(csv.DictReader(handle))
    columns = {key: np.array([row[key] for row in rows]) for key in (rows[0] if rows else {})}
    for key in ("risk", "risk_low", "risk_high"):
        columns[key] = columns[key].astype(np.float64)
    attack, level = header or ("?", float("nan"))
    return {**columns, "attack": attack, "level": level}


def risk_histogram(risk: np.ndarray, significant: np.ndarray, key: str) -> str:
    plt = figures._pyplot()
    figure, axis = plt.subplots(figsize=(6.0, 3.0))
    bins = np.linspace(-1.0, 1.0, 41)
    axis.hist([risk[~significant], risk[significant]], bins=bins, stacked=True,
              color=["#9aa5b4", "#b3261e"], label=["interval covers 0", "interval above 0"])
    axis.set_xlabel("per-record risk (flag rate IN - OUT)")
    axis.set_ylabel("records")
    axis.legend(fontsize=8)
    figure.tight_layout()
    return figures.to_svg(figure, key)


def record_risk_section(run_dir: Path) -> str | None:
    """The section's HTML, or None when the run has no records.csv."""
    records = read_records(run_dir)
    if records is None or not len(records["risk"]):
        return None
    risk, low, high = records["risk"], records["risk_low"], records["risk_high"]
    rated = np.isfinite(risk)
    significant = np.nan_to_num(low, nan=-1.0) > 0
    share = significant[rated].mean() if rated.any() else float("nan")
    order = [i for i in np.lexsort((-risk, -np.nan_to_num(low, nan=-1.0))) if significant[i]]
    rows = "".join(
        f'<tr><td class="n">{escape(str(records["index"][i]))}</td>'
        f'<td>{escape(str(records["class"][i]))}</td>'
        f'<td class="n">{records["flagged_in"][i]}/{records["n_in"][i]}</td>'
        f'<td class="n">{records["flagged_out"][i]}/{records["n_out"][i]}</td>'
        f'<td class="n">{risk[i]:.2f} [{low[i]:.2f}, {high[i]:.2f}]</td></tr>'
        for i in order[:TOP])
    table = ("<table><tr><th>pool index</th><th>class</th><th>flagged IN</th>"
             "<th>flagged OUT</th><th>risk [95% CI]</th></tr>" + rows + "</table>"
             if rows else "<p>No record's interval excludes zero.</p>")
    figure = risk_histogram(risk[rated], significant[rated], "record-risk")
    level = f"{100 * records['level']:g}%"
    return (f"<p>For every audited record, how much more often <b>{escape(records['attack'])}"
            f"</b> flags it (score above the global threshold of {level} FPR) in the targets "
            "that trained on it than in those that did not, with a 95% interval over the "
            "targets (Newcombe's difference of two Clopper-Pearson intervals). "
            f"<b>{100 * share:.1f}%</b> of {int(rated.sum())} records have a risk whose "
            f"interval excludes zero; at 95% a record without risk does so at most 2.5% of the "
            "time.</p>"
            f'<div class="cols"><div><figure>{figure}</figure></div><div>'
            f"<h3>most exposed records (interval above zero, top {TOP})</h3>{table}</div></div>"
            "<p class=\"note\">Full table: records.csv in the run directory, or "
            "<code>Results.records()</code>.</p>")
