"""Figures of the HTML report as inline SVG text (matplotlib, Agg backend), and the colours.

Log-log ROC curves follow Carlini et al. 2022 ("Membership Inference Attacks From First
Principles", Sec. III-C): the low-FPR region is where an attack is meaningful, so both axes are
logarithmic and the chance line is the diagonal.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from miaudit._runtime.io import plain_text, strip_svg_comments
from miaudit.stats.metrics import MetricKeys

# Attack families: one ROC panel each, so a panel compares variants of one method.
FAMILIES = {
    "lira": "LiRA", "rmia": "RMIA", "rmia_simple": "RMIA", "attack_p": "Attack-P / Attack-R",
    "attack_r": "Attack-P / Attack-R", "song_mittal": "Song & Mittal / correctness",
    "correctness": "Song & Mittal / correctness",
}
OTHER_FAMILY = "loss, calibrated and learned baselines"
ROC_POINTS = 240  # log-spaced FPR levels per curve: visually exact, a few KB of SVG per curve


def family(attack_name: str) -> str:
    return FAMILIES.get(attack_name, OTHER_FAMILY)


def distinct_colors(n: int) -> list[str]:
    """``n`` pairwise different colours: tab10 up to 10, then tab20 ordered dark shades first
    (so the 11th colour is a light shade, not tab10's first colour again), beyond 20 evenly
    spaced samples of the 'turbo' colormap."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    if n <= 10:
        return [to_hex(c) for c in colormaps["tab10"].colors[:n]]
    if n <= 20:
        tab20 = colormaps["tab20"].colors
        return [to_hex(c) for c in (tab20[0::2] + tab20[1::2])[:n]]
    return [to_hex(colormaps["turbo"](v)) for v in np.linspace(0.03, 0.97, n)]


def line_styles(n: int) -> list[str]:
    """Solid for the first ten curves, dashed after, so light tab20 shades stand apart too."""
    return ["-" if i < 10 else "--" for i in range(n)]


def log_grid(floor: float, points: int = ROC_POINTS) -> np.ndarray:
    return np.logspace(np.log10(floor), 0.0, points)


def resample_roc(fpr: np.ndarray, tpr: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """TPR at each FPR level of ``grid``: the largest TPR whose FPR does not exceed the level,
    as :func:`miaudit.stats.metrics.tpr_at_fpr`, vectorized over the grid (fpr and tpr of an exact
    ROC are non-decreasing, so the last point with fpr <= level has the largest TPR)."""
    index = np.searchsorted(fpr, grid, side="right") - 1
    return np.where(index >= 0, np.asarray(tpr)[np.maximum(index, 0)], 0.0)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def to_svg(figure: Any, key: str) -> str:
    """The figure as SVG markup for inlining in HTML (no XML prolog; text as text, not paths;
    element ids salted with ``key`` so several figures in one page never share an id)."""
    import matplotlib

    plt = _pyplot()
    buffer = io.StringIO()
    plain_text(figure)
    try:
        with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": key}):
            figure.savefig(buffer, format="svg", metadata={"Date": None})
    finally:
        plt.close(figure)
    text = strip_svg_comments(buffer.getvalue())
    return re.sub(r"^.*?(<svg\b)", r"\1", text, count=1, flags=re.S)


def roc_panel(title: str, curves: Sequence[dict[str, Any]], floor: float,
              bound: dict[str, Any] | None = None) -> Any:
    """One log-log ROC panel. Each curve: label, grid, tpr (pooled) and optionally band_low /
    band_high (spread over targets, drawn where defined). ``bound``: an extra dashed curve (the
    DP upper bound). The legend sits right of the axes, never over the curves."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
    colors, styles = distinct_colors(len(curves)), line_styles(len(curves))
    for curve, color, style in zip(curves, colors, styles):
        grid = curve["grid"]
        if curve.get("band_low") is not None:
            defined = grid >= curve["band_floor"]
            axis.fill_between(grid[defined], np.maximum(curve["band_low"][defined], floor),
                              np.maximum(curve["band_high"][defined], floor), color=color,
                              alpha=0.15, linewidth=0)
        axis.plot(grid, np.maximum(curve["tpr"], floor), style, color=color, linewidth=1.4,
                  label=curve["label"], drawstyle="steps-post")
    if bound is not None:
        axis.plot(bound["fpr"], np.maximum(bound["tpr"], floor), color="black", linewidth=1.6,
                  linestyle=":", label=bound["label"])
    axis.plot([floor, 1], [floor, 1], color="0.5", linestyle="--", linewidth=0.8, label="chance")
    axis.set(xscale="log", yscale="log", xlim=(floor, 1), ylim=(floor, 1),
             xlabel="false positive rate", ylabel="true positive rate", title=title)
    axis.title.set_fontsize(10)
    axis.grid(True, which="major", linewidth=0.3, alpha=0.5)
    axis.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, frameon=False)
    return figure


def privacy_utility(points: Sequence[dict[str, Any]]) -> Any:
    """Test accuracy (x, with std over targets) against TPR at 0.1% FPR (y, with its 95% CI),
    one colour per attack, each point labelled with its run."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6.4, 4.0), layout="constrained")
    attacks = list(dict.fromkeys(p["attack"] for p in points))
    colors = dict(zip(attacks, distinct_colors(len(attacks))))
    for attack in attacks:
        mine = [p for p in points if p["attack"] == attack]
        x = 100 * np.array([p["accuracy"] for p in mine])
        y = 100 * np.array([p["tpr"] for p in mine])
        xerr = 100 * np.array([p["accuracy_std"] or 0.0 for p in mine])
        low = 100 * np.array([p["ci"][0] if p["ci"] else p["tpr"] for p in mine])
        high = 100 * np.array([p["ci"][1] if p["ci"] else p["tpr"] for p in mine])
        axis.errorbar(x, y, xerr=xerr, yerr=[y - low, high - y], fmt="o", capsize=3,
                      color=colors[attack], label=attack, markersize=5)
        for p, xi, yi in zip(mine, x, y):
            axis.annotate(p["run"], (xi, yi), textcoords="offset points", xytext=(5, 4),
                          fontsize=7)
    axis.set(xlabel="test accuracy (%)", ylabel="TPR at 0.1% FPR (%)",
             title="privacy-utility: each point a run (bars: std over targets, 95% CI)")
    axis.title.set_fontsize(9)
    axis.grid(True, linewidth=0.3, alpha=0.5)
    if attacks:  # no measurable point: no legend (matplotlib warns on an empty one)
        axis.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, frameon=False)
    return figure


def planner_curves(planned: dict[str, dict[str, Any]], key: str) -> Any:
    """TPR at one FPR level (``key``, e.g. "tpr@0.1%") against the number of reference models
    (log2 axis), one line per attack with its interval as error bars."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
    colors = distinct_colors(len(planned))
    for (label, rows), color in zip(planned.items(), colors):
        counts = np.array(rows["references"])
        tpr = 100 * np.array(rows[key])
        ci = 100 * np.array(rows[MetricKeys(key).ci])
        axis.errorbar(counts, tpr, yerr=[tpr - ci[:, 0], ci[:, 1] - tpr], color=color,
                      marker="o", markersize=3, linewidth=1.2, capsize=2, label=label)
        if rows.get("enough_references"):
            axis.axvline(rows["enough_references"], color=color, linestyle=":", linewidth=0.8)
    axis.set(xscale="log", xlabel="reference models", ylabel=f"{key.upper()} FPR (%)",
             title=f"{key.upper()} against the number of references (dotted: enough)")
    axis.set_xscale("log", base=2)
    # the counts planned, as plain numbers (a log2 axis would print 2^k between them)
    counts = sorted({int(c) for rows in planned.values() for c in rows["references"]})
    axis.set_xticks(counts, [str(c) for c in counts])
    axis.xaxis.set_minor_locator(_null_locator())
    axis.title.set_fontsize(10)
    axis.grid(True, which="major", linewidth=0.3, alpha=0.5)
    axis.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, frameon=False)
    return figure


def _null_locator() -> Any:
    from matplotlib.ticker import NullLocator

    return NullLocator()


def roc_figure(curves: dict[str, tuple[np.ndarray, np.ndarray]], aucs: dict[str, float],
               members: np.ndarray, title: str) -> Any:
    """The log-log ROC of every attack (``curves``: label -> (fpr, tpr), pooled over
    targets), with the chance line, as a matplotlib figure (roc.png); ``aucs``: label ->
    pooled AUC for the legend, ``members``: the pooled ground truth."""
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8.5, 5), layout="constrained")
    floor = 1.0 / max(1, int((~members).sum()))
    count = len(aucs)
    for (label, auc), color, style in zip(aucs.items(), distinct_colors(count),
                                          line_styles(count)):
        fpr, tpr = curves[label]
        # steps, as the HTML panels and tpr@FPR read the ROC: at an FPR, the largest TPR
        # whose FPR does not exceed it (a tie group is a jump, not a slanted line)
        axis.plot(np.maximum(fpr, floor), np.maximum(tpr, floor), style, color=color,
                  label=f"{label} (AUC {auc:.3f})", drawstyle="steps-post")
    axis.plot([floor, 1], [floor, 1], "k--", linewidth=0.8, label="chance")
    axis.set(xscale="log", yscale="log", xlim=(floor, 1), ylim=(floor, 1),
             xlabel="false positive rate", ylabel="true positive rate", title=title)
    # Outside the axes: inside, a legend of 16 attacks hides the low-FPR region it describes.
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    return figure
