"""Human-facing outputs of a run: the attack table (rich) and the log-log ROC plot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from miaudit import metrics
from miaudit.io import save_figure
from miaudit.reporting.figures import roc_figure
from miaudit.results import AttackRecord, Summary, roc_title
from miaudit.rundir import audited_members, read_scores

TABLE_KEYS = (*(metrics.tpr_key(level) for level in metrics.DEFAULT_FPR_LEVELS), "auc",
              "balanced_accuracy")


def _percent(value: float) -> str:
    return f"{100 * value:.2f}"


def _cell(attack: AttackRecord, key: str, rotation: bool) -> str:
    if not attack.measurable(key):  # no threshold fits the FPR
        return "n/m"
    pooled = _percent(attack.pooled[key])
    interval = attack.interval(key)
    if interval is not None:
        pooled += f" [{_percent(interval[0])}, {_percent(interval[1])}]"
    if rotation and key in attack.mean:
        pooled += f"\n{_percent(attack.mean[key])} ± {_percent(attack.std[key])}"
    return pooled


def attack_table(summary: Summary) -> Table:
    """One row per attack: pooled value [95% CI] and, under rotation, mean ± std over targets."""
    rotation = len(summary.targets) > 1
    title = (f"{escape(summary.name)}: {len(summary.targets)} target(s), "
             f"{summary.num_models} models")
    caption = f"percent; pooled over targets [95% CI: {interval_sentence(rotation)}]; n/m: " \
        "not measurable (below 1/non-members, or tied top scores exceed the FPR)" + (
        "; second line: mean ± std across targets" if rotation else "")
    table = Table(title=title, caption=caption, show_lines=rotation)
    table.add_column("attack")
    for key in TABLE_KEYS:
        table.add_column(key.replace("balanced_accuracy", "bal. acc"), justify="right")
    for label, attack in summary.attacks.items():
        marker = " *" if attack.caveats else ""
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


def strongest(summary: Summary, key: str = "tpr@0.1%") -> str | None:
    """The attack with the largest measurable pooled ``key`` (ties: larger AUC), or None."""
    measurable = {label: attack for label, attack in summary.attacks.items()
                  if attack.measurable(key)}
    if not measurable:
        return None
    return max(measurable, key=lambda label: (measurable[label].pooled[key],
                                              measurable[label].auc))


def strongest_line(summary: Summary) -> str | None:
    """The strongest attack by TPR@0.1% with its simultaneous band over all attacks."""
    label = strongest(summary)
    if label is None:
        return None
    attack = summary.attacks[label]
    cells = []
    for key in ("tpr@0.1%", "tpr@1%"):
        band = attack.interval(key, "simultaneous")
        if not attack.measurable(key):
            cells.append(f"{key} n/m")
        elif band is not None:
            cells.append(f"{key} {_percent(attack.pooled[key])} [{_percent(band[0])}, "
                         f"{_percent(band[1])}]")
    count = len(summary.attacks)
    return (f"strongest attack (largest TPR@0.1%): {label}: {', '.join(cells)} percent; "
            f"95% band simultaneous over all {count} attacks, so it holds for the attack "
            "picked after looking")


def model_line(summary: Summary) -> str:
    stats = summary.target_models
    return (f"target models: train acc {_percent(stats.train_accuracy)}%, "
            f"test acc {_percent(stats.test_accuracy)}%, "
            f"generalization gap {_percent(stats.generalization_gap)} points"
            + (f" ({escape(stats.accuracy_note)})" if stats.accuracy_note else ""))


def print_summary(summary: Summary, console: Console) -> None:
    console.print(attack_table(summary))
    for line in summary.caveat_lines():
        console.print(line, markup=False, soft_wrap=True)
    if (line := strongest_line(summary)) is not None:
        console.print(line, markup=False)
    console.print(model_line(summary))
    if summary.privacy is not None:
        console.print(privacy_line(summary))
    if summary.snapshots:
        from miaudit.reporting.leakage_over_training import over_training_line

        console.print(over_training_line(summary.snapshots), markup=False, soft_wrap=True)
    timing = summary.timing
    if timing:
        console.print(f"time: {timing.total_seconds_this_run:.1f} s this run "
                      f"(training {timing.train_seconds_this_run:.1f} s, attacks "
                      f"{timing.attack_seconds:.1f} s, device {timing.device}"
                      + (f": {escape(timing.machine.text())}" if timing.machine else "") + ")")
    root = Path(summary.run_dir)
    console.print(f"run directory: {root}\n  results: {root / 'results.json'}\n"
                  f"  ROC plot: {root / 'roc.png'}\n  per-sample scores: "
                  f"{root / summary.scores_dir}"
                  + (f"\n  leakage over training: {root / 'leakage_over_training.png'}"
                     if summary.snapshots else ""), markup=False, soft_wrap=True)


def privacy_line(summary: Summary) -> str:
    """The claimed DP guarantee beside the largest empirical lower bound of any attack."""
    privacy = summary.privacy
    bounds = {label: attack.empirical_epsilon.epsilon_lower
              for label, attack in summary.attacks.items()
              if attack.empirical_epsilon is not None}
    best = max(bounds, key=bounds.get) if bounds else None
    line = (f"DP-SGD targets: epsilon {privacy.epsilon:.3g} at delta {privacy.delta:.0e} "
            f"(noise multiplier {privacy.noise_multiplier:.3g})")
    if best is not None:
        verdict = summary.attacks[best].empirical_epsilon.verdict
        line += (f"; largest empirical lower bound {bounds[best]:.3g} ({best}): "
                 f"guarantee {verdict}")
    return line


def missing_report_note(run_root: Path, summary: Summary) -> str | None:
    """A line naming the report files a run stopped before rendering (they are removed when
    results.json is replaced, so what exists always renders the current results)."""
    expected = ["roc.png"] + ([] if summary.external else ["report.html"])
    missing = [name for name in expected if not (Path(run_root) / name).exists()]
    if not missing:
        return None
    return (f"{' and '.join(missing)} missing (the run stopped before its report stage): "
            f"miaudit report {run_root} --plots --html renders them")


def render_plots(run_root: Path, summary: Summary) -> None:
    """Every plot of a finished run: the ROC plot, and for DP-SGD targets the ROCs under the
    claimed bound. The pooled ROCs are computed once for both."""
    curves = pooled_rocs(run_root, summary)
    plot_roc(run_root, summary, curves)
    if summary.privacy is not None or summary.nsde is not None:
        plot_dp_bounds(run_root, summary, curves)
    if summary.snapshots:
        from miaudit.reporting.leakage_over_training import write_leakage_figure

        write_leakage_figure(run_root, summary)


def pooled_rocs(run_root: Path,
                summary: Summary) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{attack label: (fpr, tpr)} of the scores pooled over the run's targets."""
    members = audited_members(run_root, summary.targets).ravel()
    curves = {}
    for label in summary.attacks:
        scores = read_scores(run_root, summary.scores_dir, label)
        fpr, tpr, _ = metrics.roc_curve(scores.ravel(), members)
        curves[label] = (fpr, tpr)
    return curves


def plot_dp_bounds(run_root: Path, summary: Summary,
                   curves: dict[str, tuple[np.ndarray, np.ndarray]]) -> Path:
    """Pooled ROCs under the claimed (epsilon, delta) bound: the DP-SGD accountant's, or for
    SDE targets the epsilon paper A's Theorem 4.1 implies (the study's Fig. 5)."""
    from miaudit.privacy.bounds import plot_roc_bounds

    if summary.privacy is not None:
        epsilon, delta = summary.privacy.epsilon, summary.privacy.delta
        source = "DP-SGD accountant"
    else:
        nsde = summary.nsde
        epsilon, delta = nsde.epsilon_implied, nsde.delta
        source = f"NSDE Thm 4.1 ({nsde.form} form)"
    return plot_roc_bounds(curves, [epsilon], delta, run_root / "roc_dp_bound.png",
                           title=f"{summary.name}: ROC under the claimed ({epsilon:.3g}, "
                                 f"{delta:g})-DP, {source}")


def plot_roc(run_root: Path, summary: Summary,
             curves: dict[str, tuple[np.ndarray, np.ndarray]]) -> Path:
    """Log-log ROC of every attack, pooled over targets, with the chance line (roc.png)."""
    import matplotlib

    matplotlib.use("Agg")
    figure = roc_figure(curves, {label: attack.auc for label, attack in summary.attacks.items()},
                        audited_members(run_root, summary.targets).ravel(), roc_title(summary))
    return save_figure(figure, run_root / "roc.png", dpi=120)
