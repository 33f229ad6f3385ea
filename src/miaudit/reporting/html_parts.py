"""The HTML reports' shared parts: the style sheet and the cell, table and image formatting
that the run report, the comparison and the DP audit report all use.
"""

from __future__ import annotations

import base64
import io
from html import escape

import numpy as np

from miaudit.reporting.run_view import Metric

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2430;
background:#f6f7f9;line-height:1.4}
main{max-width:1240px;margin:0 auto;padding:18px 24px 40px}
h1{font-size:1.6em;margin:.2em 0}h2{font-size:1.2em;margin:1.6em 0 .5em;border-bottom:1px solid
#d5d9e0;padding-bottom:.2em}h3{font-size:1em;margin:.8em 0 .3em}
.sub{color:#5a6473;margin:0 0 1em}
.card{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:12px 16px;margin:8px 0}
.headline{display:flex;flex-wrap:wrap;gap:14px}
.kpi{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:10px 16px;min-width:180px}
.kpi .v{font-size:1.7em;font-weight:600}.kpi .l{color:#5a6473;font-size:.85em}
.kpi .ci{color:#5a6473;font-size:.85em}
.cols{display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:12px}
.figs{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:12px}
.figs figure,.card figure{margin:0;background:#fff;border:1px solid #dde1e7;border-radius:6px;
padding:6px}
figure svg{width:100%;height:auto;display:block}figure.pu{max-width:860px}
figcaption{font-size:.85em;color:#5a6473;padding:2px 6px}
table{border-collapse:collapse;background:#fff;font-size:.88em}
th,td{border:1px solid #dde1e7;padding:3px 8px;vertical-align:top}
th{background:#eef1f5;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums;
white-space:nowrap}
td .s{display:block;color:#6b7482;font-size:.85em}
table.kv th{width:11em}table.kv td{word-break:break-word}
.bar{display:inline-block;height:.7em;background:#4c78a8;vertical-align:middle;margin-left:4px}
.thumbs{display:flex;flex-wrap:wrap;gap:10px}
.thumb{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:6px;text-align:center;
font-size:.78em;width:104px}
.thumb img{width:88px;height:88px;image-rendering:pixelated;display:block;margin:0 auto 4px}
.thumb:has(pre.text){width:300px;text-align:left}
pre.text{white-space:pre-wrap;font-size:.95em;margin:0 0 4px;max-height:12em;overflow:auto}
.note{color:#5a6473;font-size:.85em}
.caveat{background:#fff1f0;border-left:4px solid #c0392b;padding:.4em .7em}
tr.best td{background:#fff7e0;font-weight:600}
.bad{color:#b3261e;font-weight:600}.ok{color:#1e7b34;font-weight:600}
pre{background:#fff;border:1px solid #dde1e7;padding:8px;overflow:auto;font-size:.8em}
"""


def pct(value: float | None, digits: int = 2) -> str:
    """A fraction as a percent with ``digits`` decimals ("n/a" when missing)."""
    return "n/a" if value is None or not np.isfinite(value) else f"{100 * value:.{digits}f}"


def interval(metric: Metric) -> str:
    """A metric's interval in percent, "" when it has none."""
    return "" if metric.ci is None else f"[{pct(metric.ci[0])}, {pct(metric.ci[1])}]"


def metric_cell(metric: Metric, spread: bool = True) -> str:
    """Pooled value [CI] and, under it, mean ± std over targets; "n/m" where no threshold
    reaches the FPR level (tied top scores, or too few non-members)."""
    if not metric.measurable:
        return '<td class="n" title="not measurable: no threshold reaches this FPR">n/m</td>'
    text = f"{pct(metric.value)} {interval(metric)}".strip()
    if spread and metric.mean is not None and metric.std is not None:
        text += f'<span class="s">{pct(metric.mean)} ± {pct(metric.std)}</span>'
    return f'<td class="n">{text}</td>'


def kv_table(rows: dict[str, str]) -> str:
    """A two-column table of names and values (escaped)."""
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>"
                   for k, v in rows.items())
    return f'<table class="kv">{body}</table>'


def section(title: str, body: str, anchor: str) -> str:
    """A titled report section with an anchor."""
    return f'<section id="{anchor}"><h2>{escape(title)}</h2>{body}</section>'


def png_data_uri(data: bytes) -> str:
    """PNG bytes as an inline data URI (the report loads nothing)."""
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def array_png(image: np.ndarray) -> bytes:
    """(H, W, C) uint8 -> PNG bytes (Pillow)."""
    from PIL import Image

    mode_image = image[..., 0] if image.shape[-1] == 1 else image
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(mode_image)).save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()
