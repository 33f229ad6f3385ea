"""Human-facing outputs of a run: the attack table (rich) and the log-log ROC plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from miaudit import metrics
from miaudit.io import save_figure
from miaudit.results import EXTERNAL_SOURCE, caveat_lines
from miaudit.rundir import audited_members, read_scores

TABLE_KEYS = (*(metrics.tpr_key(level) for level in metrics.DEFAULT_FPR_LEVELS), "auc",
              "balanced_accuracy")


def _percent(value: float) -> str:
    return f"{100 * value:.2f}"


def _cell(attack: dict[str, Any], key: str, rotation: bool) -> str:
    if attack["pooled"].get(f"{key}_measurable") is False:  # no threshold fits the FPR
        return "n/m"
    pooled = _percent(attack["pooled"][key])
    interval = attack["pooled"].get(f"{key}_ci")
    if interval is not None:
        pooled += f" [{_percent(interval[0])}, {_percent(interval[1])}]"
    if rotation and key in attack.get("mean", {}):
        pooled += f"\n{_percent(attack['mean'][key])} ± {_percent(attack['std'][key])}"
    return pooled


def attack_table(summary: dict[str, Any]) -> Table:
    """One row per attack: pooled value [95% CI] and, under rotation, mean ± std over targets."""
    rotation = len(summary["targets"]) > 1
    title = (f"{escape(summary['name'])}: {len(summary['targets'])} target(s), "
             f"{summary['num_models']} models")
    caption = f"percent; pooled over targets [95% CI: {interval_sentence(rotation)}]; n/m: " \
        "not measurable (below 1/non-members, or tied top scores exceed the FPR)" + (
        "; second line: mean ± std across targets" if rotation else "")
    table = Table(title=title, caption=caption, show_lines=rotation)
    table.add_column("attack")
    for key in TABLE_KEYS:
        table.add_column(key.replace("balanced_accuracy", "bal. acc"), justify="right")
    for label, attack in summary["attacks"].items():
        marker = " *" if attack.get("caveats") else ""
        table.add_row(escape(label) + marker,
                      *(_cell(attack, key, rotation) for key in TABLE_KEYS))
    return table


def interval_sentence(rotation: bool) -> str:
    """What the table's interval covers, in one sentence."""
    if rotation:
        return ("bootstrap over samples and target models, covers what a rerun with new "
                "models and samples would see")
    return "bootstrap over samples for this one target, conditional on the trained model: " \
        "model randomness is not covered"


def strongest(summary: dict[str, Any], key: str = "tpr@0.1%") -> str | None:
    """The attack with the largest measurable pooled ``key`` (ties: larger AUC), or None."""
    measurable = {label: attack for label, attack in summary["attacks"].items()
                  if attack["pooled"].get(f"{key}_measurable") is not False}
    if not measurable:
        return None
    return max(measurable, key=lambda label: (measurable[label]["pooled"][key],
                                              measurable[label]["pooled"]["auc"]))


def strongest_line(summary: dict[str, Any]) -> str | None:
    """The strongest attack by TPR@0.1% with its simultaneous band over all attacks."""
    label = strongest(summary)
    if label is None:
        return None
    pooled = summary["attacks"][label]["pooled"]
    cells = []
    for key in ("tpr@0.1%", "tpr@1%"):
        band = pooled.get(f"{key}_ci_simultaneous")
        if pooled.get(f"{key}_measurable") is False:
            cells.append(f"{key} n/m")
        elif band is not None:
            cells.append(f"{key} {_percent(pooled[key])} [{_percent(band[0])}, "
                         f"{_percent(band[1])}]")
    count = len(summary["attacks"])
    return (f"strongest attack (largest TPR@0.1%): {label}: {', '.join(cells)} percent; "
            f"95% band simultaneous over all {count} attacks, so it holds for the attack "
            "picked after looking")


def model_line(summary: dict[str, Any]) -> str:
    stats = summary["target_models"]
    return (f"target models: train acc {_percent(stats['train_accuracy'])}%, "
            f"test acc {_percent(stats['test_accuracy'])}%, "
            f"generalization gap {_percent(stats['generalization_gap'])} points"
            + (f" ({escape(stats['accuracy_note'])})" if stats.get("accuracy_note") else ""))


def print_summary(summary: dict[str, Any], console: Console) -> None:
    console.print(attack_table(summary))
    for line in caveat_lines(summary):
        console.print(line, markup=False, soft_wrap=True)
    if (line := strongest_line(summary)) is not None:
        console.print(line, markup=False)
    console.print(model_line(summary))
    if "privacy" in summary:
        console.print(privacy_line(summary))
    timing = summary.get("timing", {})
    if timing:
        console.print(f"time: {timing['total_seconds_this_run']:.1f} s this run "
                      f"(training {timing['train_seconds_this_run']:.1f} s, attacks "
                      f"{timing['attack_seconds']:.1f} s, device {timing['device']})")
    root = Path(summary["run_dir"])
    console.print(f"run directory: {root}\n  results: {root / 'results.json'}\n"
                  f"  ROC plot: {root / 'roc.png'}\n  per-sample scores: "
                  f"{root / summary['scores_dir']}", markup=False, soft_wrap=True)


def privacy_line(summary: dict[str, Any]) -> str:
    """The claimed DP guarantee beside the largest empirical lower bound of any attack."""
    privacy = summary["privacy"]
    bounds = {label: attack["empirical_epsilon"]["epsilon_lower"]
              for label, attack in summary["attacks"].items() if "empirical_epsilon" in attack}
    best = max(bounds, key=bounds.get) if bounds else None
    line = (f"DP-SGD targets: epsilon {privacy['epsilon']:.3g} at delta {privacy['delta']:.0e} "
            f"(noise multiplier {privacy['noise_multiplier']:.3g})")
    if best is not None:
        verdict = summary["attacks"][best]["empirical_epsilon"]["verdict"]
        line += (f"; largest empirical lower bound {bounds[best]:.3g} ({best}): "
                 f"guarantee {verdict}")
    return line


def missing_report_note(run_root: Path, summary: dict[str, Any]) -> str | None:
    """A line naming the report files a run stopped before rendering (they are removed when
    results.json is replaced, so what exists always renders the current results)."""
    external = summary.get("config", {}).get("source") == EXTERNAL_SOURCE
    expected = ["roc.png"] + ([] if external else ["report.html"])
    missing = [name for name in expected if not (Path(run_root) / name).exists()]
    if not missing:
        return None
    return (f"{' and '.join(missing)} missing (the run stopped before its report stage): "
            f"miaudit report {run_root} --plots --html renders them")


def render_plots(run_root: Path, summary: dict[str, Any]) -> None:
    """Every plot of a finished run: the ROC plot, and for DP-SGD targets the ROCs under the
    claimed bound. The pooled ROCs are computed once for both."""
    curves = pooled_rocs(run_root, summary)
    plot_roc(run_root, summary, curves)
    if "privacy" in summary or "nsde" in summary:
        plot_dp_bounds(run_root, summary, curves)


def pooled_rocs(run_root: Path,
                summary: dict[str, Any]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{attack label: (fpr, tpr)} of the scores pooled over the run's targets."""
    members = audited_members(run_root, summary).ravel()
    curves = {}
    for label in summary["attacks"]:
        fpr, tpr, _ = metrics.roc_curve(read_scores(run_root, summary, label).ravel(), members)
        curves[label] = (fpr, tpr)
    return curves


def plot_dp_bounds(run_root: Path, summary: dict[str, Any],
                   curves: dict[str, tuple[np.ndarray, np.ndarray]]) -> Path:
    """Pooled ROCs under the claimed (epsilon, delta) bound: the DP-SGD accountant's, or for
    SDE targets the epsilon paper A's Theorem 4.1 implies (the study's Fig. 5)."""
    from miaudit.privacy.bounds import plot_roc_bounds

    if "privacy" in summary:
        epsilon, delta = summary["privacy"]["epsilon"], summary["privacy"]["delta"]
        source = "DP-SGD accountant"
    else:
        nsde = summary["nsde"]
        epsilon, delta = nsde["epsilon_implied"], nsde["delta"]
        source = f"NSDE Thm 4.1 ({nsde['form']} form)"
    return plot_roc_bounds(curves, [epsilon], delta, run_root / "roc_dp_bound.png",
                           title=f"{summary['name']}: ROC under the claimed ({epsilon:.3g}, "
                                 f"{delta:g})-DP, {source}")


def plot_roc(run_root: Path, summary: dict[str, Any],
             curves: dict[str, tuple[np.ndarray, np.ndarray]]) -> Path:
    """Log-log ROC of every attack, pooled over targets, with the chance line (roc.png)."""
    import matplotlib

    matplotlib.use("Agg")
    figure = roc_figure(summary, curves, audited_members(run_root, summary).ravel())
    return save_figure(figure, run_root / "roc.png", dpi=120)


def roc_figure(summary: dict[str, Any], curves: dict[str, tuple[np.ndarray, np.ndarray]],
               members: np.ndarray) -> Any:
    """The matplotlib figure of :func:`plot_roc`; ``members``: the pooled ground truth."""
    import matplotlib.pyplot as plt

    from miaudit.reporting.figures import distinct_colors, line_styles

    figure, axis = plt.subplots(figsize=(8.5, 5), layout="constrained")
    floor = 1.0 / max(1, int((~members).sum()))
    count = len(summary["attacks"])
    for (label, attack), color, style in zip(summary["attacks"].items(), distinct_colors(count),
                                             line_styles(count)):
        fpr, tpr = curves[label]
        # steps, as the HTML panels and tpr@FPR read the ROC: at an FPR, the largest TPR
        # whose FPR does not exceed it (a tie group is a jump, not a slanted line)
        axis.plot(np.maximum(fpr, floor), np.maximum(tpr, floor), style, color=color,
                  label=f"{label} (AUC {attack['pooled']['auc']:.3f})", drawstyle="steps-post")
    axis.plot([floor, 1], [floor, 1], "k--", linewidth=0.8, label="chance")
    axis.set(xscale="log", yscale="log", xlim=(floor, 1), ylim=(floor, 1),
             xlabel="false positive rate", ylabel="true positive rate",
             title=f"{summary['name']} (pooled over {len(summary['targets'])} targets)")
    # Outside the axes: inside, a legend of 16 attacks hides the low-FPR region it describes.
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    return figure
