"""The HTML report of ``miaudit dp-audit``: its DP section puts the claimed epsilon beside the
audited lower bound of every analysis (and what a perfect attack could prove with the same
canaries), one page, self-contained."""

from __future__ import annotations

from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any

from miaudit._runtime.io import write_bytes
from miaudit.reporting.html_parts import CSS, kv_table, section

#: what each analysis proves, one line (docs/dp-audits.md has the long form)
PROVES = {
    "steinke": "refutes (eps, delta)-DP; any mechanism (Steinke, Nasr & Jagielski 2023)",
    "fdp": "refutes f-DP of the stated family (Mahloujifar, Melis & Chaudhuri 2024)",
    "gaussian": "bounds mu of a Gaussian-DP curve; exact when the statistic is Gaussian "
                "(Nasr et al. 2023)",
    "clopper_pearson": "refutes (eps, delta)-DP from independent trials (Jagielski et al. "
                       "2020)",
}


def _number(value: Any) -> str:
    return "no ceiling" if value is None else f"{value:.3g}"


def dp_audit_section(report: dict[str, Any]) -> str:
    """The claimed-vs-audited table of a dp-audit report (``DPAuditReport.as_dict()``)."""
    claimed = report.get("claimed_epsilon")
    rows = []
    for name, audit in report.get("analyses", {"headline": report["audit"]}).items():
        bound = float(audit["epsilon_lower"])
        verdict = "n/a" if claimed is None else (
            "contradicted" if bound > claimed else "consistent")
        ratio = "" if not claimed else f"{bound / claimed:.2f}"
        css = "bad" if verdict == "contradicted" else "ok"
        rows.append(
            f"<tr><td>{escape(name)}</td><td class=\"n\">{bound:.3g}</td>"
            f"<td class=\"n\">{'none' if claimed is None else f'{claimed:.3g}'}</td>"
            f"<td class=\"n\">{ratio}</td><td class=\"n\">"
            f"{_number(audit.get('max_provable'))}</td><td class=\"n\">"
            f"{audit.get('cpu_seconds', float('nan')):.3g}</td><td class=\"{css}\">"
            f"{escape(verdict)}</td><td>{escape(PROVES.get(name, ''))}</td></tr>")
    head = ("<tr><th>analysis</th><th>audited ε ≥</th><th>claimed ε</th><th>audited / "
            "claimed</th><th>most a perfect attack proves</th><th>CPU s</th><th>verdict</th>"
            "<th>what it proves</th></tr>")
    config = report.get("config", {})
    facts = kv_table({
        "threat model": str(report.get("threat_model", "final_model")),
        "protocol": str(report.get("mode")),
        "canaries": str(config.get("canaries")),
        "delta": f"{config.get('delta', float('nan')):g}",
        "confidence": f"{config.get('confidence', float('nan')):g}",
        "claim source": str(report.get("claimed_source")),
        "test accuracy": f"{100 * report.get('test_accuracy', float('nan')):.1f}%",
    })
    return f"{facts}<table>{head}{''.join(rows)}</table>"


def render_dp_audit_html(report: dict[str, Any]) -> str:
    from miaudit.version import __version__

    name = str(report.get("config", {}).get("name", "dp_audit"))
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = section("Differential privacy: claimed vs audited", dp_audit_section(report),
                   "privacy")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>miaudit dp-audit: {escape(name)}</title><style>{CSS}</style></head>"
            f"<body><main><h1>DP audit: {escape(name)}</h1><p class=\"sub\">report by "
            f"miaudit {escape(__version__)}, {stamp}</p>{body}</main></body></html>\n")


def write_dp_audit_html(report: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    write_bytes(path, render_dp_audit_html(report).encode("utf-8"))
    return path
