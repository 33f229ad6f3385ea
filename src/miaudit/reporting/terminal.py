"""Human-facing outputs of a run: the attack table (rich) and the log-log ROC plot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from miaudit._runtime.io import save_figure
from miaudit.auditor.rundir import audited_members, read_scores
from miaudit.auditor.runfiles import REPORT_FILE, ROC_DP_BOUND_FILE, ROC_FILE
from miaudit.reporting.figures import roc_figure
from miaudit.results import STRONGEST_KEY, AttackRecord, Summary, roc_title
from miaudit.stats import metrics

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
    blind = summary.blind_baseline is not None
    if blind:
        caption += ("; AUC - blind: the attack's AUC minus the blind baseline's, percentage points "
                    "[paired 95% CI]")
    table = Table(title=title, caption=caption, show_lines=rotation)
    table.add_column("attack")
    for key in TABLE_KEYS:
        table.add_column(key.replace("balanced_accuracy", "bal. acc"), justify="right")
    if blind:
        table.add_column("AUC - blind", justify="right")
    for label, attack in summary.attacks.items():
        marker = " *" if attack.caveats else ""
        table.add_row(escape(label) + marker,
                      *(_cell(attack, key, rotation) for key in TABLE_KEYS),
                      *([over_blind_cell(attack)] if blind else []))
    return table


def over_blind_cell(attack: AttackRecord) -> str:
    """The attack's AUC minus the blind baseline's, percent points [paired 95% CI]."""
    difference = (attack.over_blind or {}).get("auc")
    if difference is None:
        return "-"
    low, high = difference.ci
    return f"{_percent(difference.value)} [{_percent(low)}, {_percent(high)}]"


def blind_line(summary: Summary) -> str | None:
    """The blind baseline (texts alone, no model) with its intervals, and its warning."""
    blind = summary.blind_baseline
    if blind is None:
        return None
    pooled = blind.pooled
    low, high = pooled["auc_ci"]
    tpr_low, tpr_high = pooled["tpr@1%_ci"]
    line = (f"blind baseline (texts alone, no model): AUC {blind.auc:.3f} [{low:.3f}, "
            f"{high:.3f}], TPR@1% {_percent(pooled['tpr@1%'])} [{_percent(tpr_low)}, "
            f"{_percent(tpr_high)}] percent")
    return line + ("" if blind.warning is None else f"\nWARNING {blind.warning}")


def interval_sentence(rotation: bool) -> str:
    """What the table's interval covers, in one sentence."""
    if rotation:
        return ("bootstrap over samples and target models, covers what a rerun with new "
                "models and samples would see")
    return "bootstrap over samples for this one target, conditional on the trained model: " \
        "model randomness is not covered"


def strongest(summary: Summary, key: str = STRONGEST_KEY) -> str | None:
    """The strongest attack (:meth:`Summary.strongest`) when it measures ``key``, else None."""
    return summary.strongest(key, measurable_only=True)


#: the levels the headline ranks attacks by, the first measurable one for some attack
HEADLINE_LEVELS = ("tpr@0.1%", "tpr@1%", "auc")


def headline_key(summary: Summary) -> str:
    """The first of :data:`HEADLINE_LEVELS` that some attack measures (a text audit of few
    samples measures no TPR@0.1%: the headline then ranks by TPR@1%, and says so)."""
    for key in HEADLINE_LEVELS[:-1]:
        if strongest(summary, key) is not None:
            return key
    return "auc"


def strongest_line(summary: Summary) -> str | None:
    """The strongest attack by the headline level (TPR@0.1%, else the first measurable one)
    with its simultaneous band over all attacks."""
    key = headline_key(summary)
    if key == "auc":
        label = max(summary.attacks, key=lambda name: summary.attacks[name].auc)
        return (f"strongest attack (largest AUC; no TPR level is measurable for any attack): "
                f"{label}: AUC {_percent(summary.attacks[label].auc)} percent")
    label = strongest(summary, key)
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
    ranked = key.upper() + (
        "" if key == HEADLINE_LEVELS[0] else "; TPR@0.1% is not measurable for any attack")
    return (f"strongest attack (largest {ranked}): {label}: {', '.join(cells)} percent; "
            f"95% band simultaneous over all {count} attacks, so it holds for the attack "
            "picked after looking")


def print_summary(summary: Summary, console: Console) -> None:
    console.print(attack_table(summary))
    for line in summary.caveat_lines():
        console.print(line, markup=False, soft_wrap=True)
    if (line := blind_line(summary)) is not None:
        console.print(line, markup=False, soft_wrap=True)
    if (line := strongest_line(summary)) is not None:
        console.print(line, markup=False)
    console.print(summary.model_line(), markup=False)
    for caveat in summary.caveats:
        console.print(f"caveat: {caveat}", markup=False, soft_wrap=True)
    if summary.privacy is not None:
        console.print(summary.privacy_line(), markup=False)
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
    report = root / "report.html"
    console.print(f"run directory: {root}\n  results: {root / 'results.json'}\n"
                  f"  ROC plot: {root / 'roc.png'} (and .svg, .pdf)\n  per-sample scores: "
                  f"{root / summary.scores_dir}"
                  + (f"\n  leakage over training: {root / 'leakage_over_training.png'}"
                     if summary.snapshots else ""), markup=False, soft_wrap=True)
    if report.exists():  # last: the one file to open
        console.print(f"  HTML report: {report}", markup=False, soft_wrap=True)


def missing_report_note(run_root: Path, summary: Summary) -> str | None:
    """A line naming the report files a run stopped before rendering (they are removed when
    results.json is replaced, so what exists always renders the current results)."""
    expected = [ROC_FILE] + ([] if summary.external else [REPORT_FILE])
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
    return plot_roc_bounds(curves, [epsilon], delta, run_root / ROC_DP_BOUND_FILE,
                           title=f"{summary.name}: ROC under the claimed ({epsilon:.3g}, "
                                 f"{delta:g})-DP, {source}")


def plot_roc(run_root: Path, summary: Summary,
             curves: dict[str, tuple[np.ndarray, np.ndarray]]) -> Path:
    """Log-log ROC of every attack, pooled over targets, with the chance line (roc.png)."""
    import matplotlib

    matplotlib.use("Agg")
    figure = roc_figure(curves, {label: attack.auc for label, attack in summary.attacks.items()},
                        audited_members(run_root, summary.targets).ravel(), roc_title(summary))
    return save_figure(figure, run_root / ROC_FILE, dpi=120)
