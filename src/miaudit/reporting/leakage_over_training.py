"""Leakage over training (train.snapshots): every attack's TPR at 0.1% and 1% FPR and AUC, each
with its pooled 95% interval, and the targets' train and test accuracy against the epoch, from
results.json's ``snapshots`` (one entry per snapshot epoch and the final one). Where leakage
rises while test accuracy has stopped improving, stopping earlier buys privacy for free."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

import numpy as np

from miaudit._runtime.io import save_figure
from miaudit.reporting import figures

FIGURE_FILE = "leakage_over_training.png"
#: (results key, axis label, percent scale) of the leakage panels
PANELS = (("tpr@0.1%", "TPR at 0.1% FPR (%)", 100.0), ("tpr@1%", "TPR at 1% FPR (%)", 100.0),
          ("auc", "AUC", 1.0))


def series(snapshots: dict[str, dict[str, Any]], label: str, key: str
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(epochs, value, interval low, interval high) of attack ``label``'s pooled ``key``;
    NaN where the level is not measurable or no interval was computed."""
    epochs = np.array(sorted(int(epoch) for epoch in snapshots))
    rows = [snapshots[str(epoch)]["attacks"][label]["pooled"] for epoch in epochs]
    nan = float("nan")
    value = np.array([row.get(key, nan) if row.get(f"{key}_measurable") is not False else nan
                      for row in rows], dtype=float)
    ci = np.array([row.get(f"{key}_ci") or (nan, nan) for row in rows], dtype=float)
    return epochs, value, ci[:, 0], ci[:, 1]


def leakage_figure(snapshots: dict[str, dict[str, Any]], title: str) -> Any:
    """Four panels sharing the epoch axis (integer ticks at the audited epochs): TPR@0.1%,
    TPR@1% and AUC per attack with 95% intervals as error bars; train and test accuracy (test
    with its exact interval)."""
    plt = figures._pyplot()
    figure, axes = plt.subplots(1, 4, figsize=(12.8, 3.4), layout="constrained")
    labels = list(next(iter(snapshots.values()))["attacks"])
    colors = figures.distinct_colors(len(labels))
    epochs = np.array(sorted(int(epoch) for epoch in snapshots))
    for axis, (key, ylabel, scale) in zip(axes, PANELS):
        for label, color in zip(labels, colors):
            x, value, low, high = series(snapshots, label, key)
            value, low, high = scale * value, scale * low, scale * high
            error = np.nan_to_num(np.stack([value - low, high - value]), nan=0.0)
            axis.errorbar(x, value, yerr=np.maximum(error, 0), color=color, marker="o",
                          markersize=3, linewidth=1.2, capsize=2, label=label)
        if key == "auc":
            axis.axhline(0.5, color="0.5", linestyle="--", linewidth=0.8)
        axis.set(xlabel="epoch", ylabel=ylabel)
    models = [snapshots[str(epoch)]["target_models"] for epoch in epochs]
    train = 100 * np.array([m["train_accuracy"] for m in models])
    test = 100 * np.array([m["test_accuracy"] for m in models])
    ci = 100 * np.array([m.get("test_accuracy_ci") or (t / 100, t / 100)
                         for m, t in zip(models, test)], dtype=float)
    axes[3].plot(epochs, train, marker="o", markersize=3, color="#1f77b4", label="train")
    axes[3].errorbar(epochs, test, yerr=np.maximum([test - ci[:, 0], ci[:, 1] - test], 0),
                     marker="s", markersize=3, capsize=2, color="#d62728", label="test")
    axes[3].set(xlabel="epoch", ylabel="target accuracy (%)")
    axes[3].legend(fontsize=7, frameon=False)
    for axis in axes:
        axis.set_xticks(epochs, [str(epoch) for epoch in epochs])
        axis.grid(True, linewidth=0.3, alpha=0.5)
        axis.tick_params(labelsize=7)
    axes[2].legend(loc="upper left", bbox_to_anchor=(0.0, -0.22), fontsize=7, frameon=False,
                   ncol=max(1, min(4, len(labels))))
    figure.suptitle(title, fontsize=10)
    return figure


def write_leakage_figure(run_root: Path, summary: Any) -> Path | None:
    """leakage_over_training.png of a run with train.snapshots (None for one without)."""
    if not summary.snapshots:
        return None
    figure = leakage_figure(summary.snapshots, f"{summary.name}: leakage over training "
                                               "(pooled over targets, 95% intervals)")
    return save_figure(figure, Path(run_root) / FIGURE_FILE, dpi=120)


def leakage_section(snapshots: dict[str, dict[str, Any]] | None) -> str | None:
    """The HTML report's section: the figure (inline SVG) and a table per epoch."""
    if not snapshots:
        return None
    svg = figures.to_svg(leakage_figure(snapshots, "leakage over training"), "leakage")
    labels = list(next(iter(snapshots.values()))["attacks"])
    head = "".join(f"<th>{escape(label)} AUC</th><th>{escape(label)} TPR@0.1%</th>"
                   for label in labels)
    rows = []
    for epoch in sorted(snapshots, key=int):
        entry = snapshots[epoch]
        models = entry["target_models"]
        cells = "".join(
            f"<td>{_number(entry['attacks'][label]['pooled'], 'auc', 1.0, '.3f')}</td>"
            f"<td>{_number(entry['attacks'][label]['pooled'], 'tpr@0.1%', 100.0, '.2f')}</td>"
            for label in labels)
        rows.append(f"<tr><td>{int(epoch)}</td><td>{100 * models['train_accuracy']:.1f}</td>"
                    f"<td>{100 * models['test_accuracy']:.1f}</td>{cells}</tr>")
    return (f"<figure>{svg}<figcaption>Every attack scored on the targets' (and references') "
            "weights at each kept epoch (train.snapshots) and at the final one. Where leakage "
            "rises while test accuracy no longer does, stopping earlier buys privacy."
            "</figcaption></figure><table><tr><th>epoch</th><th>train acc (%)</th>"
            f"<th>test acc (%)</th>{head}</tr>{''.join(rows)}</table>")


def compare_section(views: list[Any], labels: list[str], attacks: list[str]) -> str:
    """``miaudit compare --html``: one leakage-over-training figure per run that kept
    snapshots (the compared attacks only), headed by its row number and label; "" when none
    did."""
    blocks = []
    for number, (view, label) in enumerate(zip(views, labels), start=1):
        snapshots = view.summary.snapshots
        if not snapshots:
            continue
        chosen = {epoch: {**entry, "attacks": {a: entry["attacks"][a] for a in attacks
                                               if a in entry["attacks"]}}
                  for epoch, entry in snapshots.items()}
        svg = figures.to_svg(leakage_figure(chosen, f"{number}. {label}"), f"leak{number}")
        blocks.append(f"<figure>{svg}</figure>")
    if not blocks:
        return ""
    return ("<h2>Leakage over training</h2><p class=\"note\">Runs with train.snapshots: every "
            "compared attack at each kept epoch, pooled over targets, 95% intervals.</p>"
            + "".join(blocks))


def over_training_line(snapshots: dict[str, dict[str, Any]]) -> str:
    """One line for the terminal: per epoch, test accuracy and the largest pooled AUC of any
    attack (the figure and results.json hold every attack with intervals)."""
    parts = []
    for epoch in sorted(snapshots, key=int):
        entry = snapshots[epoch]
        auc = max(attack["pooled"]["auc"] for attack in entry["attacks"].values())
        parts.append(f"{int(epoch)}: test {100 * entry['target_models']['test_accuracy']:.1f}%"
                     f" AUC {100 * auc:.1f}")
    return "leakage over training (epoch: test accuracy, largest AUC): " + ", ".join(parts)


def _number(pooled: dict[str, Any], key: str, scale: float, spec: str) -> str:
    """A value with its interval, or n/a where the level is not measurable."""
    if pooled.get(f"{key}_measurable") is False or pooled.get(key) is None:
        return "n/a"
    text = format(scale * pooled[key], spec)
    if ci := pooled.get(f"{key}_ci"):
        text += f" [{format(scale * ci[0], spec)}, {format(scale * ci[1], spec)}]"
    return escape(text)
