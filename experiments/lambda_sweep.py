"""Paper B's privacy-robustness trade-off as a curve (Fig. 2's logic, issue 26 item 2): LiRA's
leakage and the natural / robust accuracy of fast AT (lambda 0) and fast AT + DeMem at each
lambda, with the intervals ``claims.py`` decides by, from the committed results.json files.

Writes ``experiments/papers/B/lambda_sweep.md`` (the table) and ``lambda_sweep.png`` (leakage
and accuracy against lambda, one line per experiment, and leakage against natural accuracy with
the matched-accuracy controls: fast AT trained fewer epochs, so that DeMem's points can be read
against what a model that learned as little leaks anyway). A run that has not finished is left
out.

Usage:
    python experiments/lambda_sweep.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import claims as C  # noqa: E402  (intervals, formatting and the committed outputs)

HERE = Path(__file__).resolve().parent / "papers" / "B"
SWEEPS = {  # experiment -> what it is
    "papers/B/fast_at": "small VGG, seed 0",
    "papers/B/fast_at_seed1": "small VGG, seed 1",
    "papers/B/fast_at_resnet14": "ResNet-14, seed 0",
    "papers/B/fast_at_resnet14_seed1": "ResNet-14, seed 1",
}
CONTROLS = {  # experiment -> matched-accuracy control stem -> what it is
    "papers/B/fast_at_resnet14": {"5_fast_at_matched": "fast AT, 20 epochs"},
    "papers/B/fast_at_resnet14_seed1": {"5_fast_at_matched": "fast AT, 20 epochs"},
}
STEMS = {0.0: "1_fast_at", 0.2: "2_fast_at_demem_0.2", 0.5: "3_fast_at_demem_0.5",
         1.0: "4_fast_at_demem_1.0"}
ATTACK = "lira:fixed_variance=true"  # the DeMem claims' attack (RMIA saturates on DeMem models)
METRICS = ("test_accuracy", "robust_accuracy", "tpr@0.1%", "tpr@1%", "auc")
HEADERS = ("natural acc", "PGD-20 acc", "TPR@0.1%", "TPR@1%", "AUC")


def point(experiment: str, stem: str) -> dict[str, C.Interval] | None:
    """metric -> (value, low, high) of one committed run; None when it has not finished."""
    if C.load(experiment, stem) is None:
        return None
    row = C.Row(f"{experiment}/{stem}", experiment, stem, ATTACK, {}, None)
    return {metric: C.interval(row, metric) for metric in METRICS}


def sweep(experiment: str) -> dict[float, dict[str, C.Interval]]:
    """lambda -> metric -> (value, low, high) for the runs of ``experiment`` that finished."""
    return {lam: values for lam, stem in STEMS.items()
            if (values := point(experiment, stem)) is not None}


def controls(experiment: str) -> dict[str, dict[str, C.Interval]]:
    """What each finished matched-accuracy control of ``experiment`` is -> its metrics."""
    return {what: values for stem, what in CONTROLS.get(experiment, {}).items()
            if (values := point(experiment, stem)) is not None}


def cells(values: dict[str, C.Interval]) -> str:
    return " | ".join(C.fmt(m, values[m]) if values[m] else "-" for m in METRICS)


def table(found: dict[str, dict[float, dict[str, C.Interval]]],
          matched: dict[str, dict[str, dict[str, C.Interval]]]) -> str:
    lines = ["| experiment | lambda | " + " | ".join(HEADERS) + " |",
             "|" + " --- |" * (2 + len(HEADERS))]
    for experiment, points in found.items():
        for lam, values in points.items():
            lines.append(f"| {SWEEPS[experiment]} | {lam:g} | {cells(values)} |")
        for what, values in matched.get(experiment, {}).items():
            lines.append(f"| {SWEEPS[experiment]} | control: {what} | {cells(values)} |")
    return "\n".join(lines)


def scaled(interval: C.Interval, metric: str) -> tuple[float, float, float]:
    """(centre, below, above) of ``interval`` on the scale claims.py prints ``metric`` in."""
    scale = C.scale_digits(metric)[0]
    return (scale * interval[0], scale * (interval[0] - interval[1]),
            scale * (interval[2] - interval[0]))


def errorbar(axis, points: dict[float, dict[str, C.Interval]], metric: str, **style) -> None:
    """One line of ``metric`` (as claims.py prints it) against lambda, with its 95% intervals."""
    lams = [lam for lam, values in points.items() if values[metric]]
    found = [scaled(points[lam][metric], metric) for lam in lams]
    spread = [[below for _, below, _ in found], [above for _, _, above in found]]
    axis.errorbar(lams, [centre for centre, _, _ in found], yerr=spread, capsize=3, marker="o",
                  **style)


def frontier(axis, points: dict[float, dict[str, C.Interval]],
             matched: dict[str, dict[str, C.Interval]], colour: str, label: str) -> None:
    """AUC against natural accuracy: DeMem's lambdas as a line, the controls as squares."""
    def xy(values: dict[str, C.Interval]) -> tuple[tuple, tuple] | None:
        if not (values["test_accuracy"] and values["auc"]):
            return None
        return scaled(values["test_accuracy"], "test_accuracy"), scaled(values["auc"], "auc")
    line = {lam: found for lam, values in points.items() if (found := xy(values))}
    axis.plot([x[0] for x, _ in line.values()], [y[0] for _, y in line.values()],
              color=colour, label=f"{label}: DeMem lambda")
    for lam, (x, y) in line.items():
        axis.errorbar([x[0]], [y[0]], xerr=[[x[1]], [x[2]]], yerr=[[y[1]], [y[2]]],
                      color=colour, marker="o", capsize=2)
        axis.annotate(f"{lam:g}", (x[0], y[0]), textcoords="offset points", xytext=(4, 4),
                      fontsize=7)
    for what, values in matched.items():
        if found := xy(values):
            x, y = found
            axis.errorbar([x[0]], [y[0]], xerr=[[x[1]], [x[2]]], yerr=[[y[1]], [y[2]]],
                          color=colour, marker="s", capsize=2, linestyle="none",
                          label=f"{label}: {what}")


def figure(found: dict[str, dict[float, dict[str, C.Interval]]],
           matched: dict[str, dict[str, dict[str, C.Interval]]], out: Path) -> None:
    fig, (low_fpr, auc, acc, utility) = plt.subplots(1, 4, figsize=(20, 4))
    for index, (experiment, points) in enumerate(found.items()):
        colour = f"C{index}"
        errorbar(low_fpr, points, "tpr@0.1%", color=colour, label=SWEEPS[experiment])
        errorbar(auc, points, "auc", color=colour, label=SWEEPS[experiment])
        errorbar(acc, points, "test_accuracy", color=colour, label=f"{SWEEPS[experiment]}: natural")
        errorbar(acc, points, "robust_accuracy", color=colour, linestyle="--",
                 label=f"{SWEEPS[experiment]}: PGD-20")
        frontier(utility, points, matched.get(experiment, {}), colour, SWEEPS[experiment])
    low_fpr.set(ylabel="TPR at 0.1% FPR (%)", title="Leakage: online LiRA (fixed variance)")
    auc.set(ylabel="AUC", title="Leakage: online LiRA (fixed variance)")
    acc.set(ylabel="test accuracy (%)", title="Natural and robust (PGD-20) accuracy")
    for axis in (low_fpr, auc, acc):
        axis.set_xlabel("DeMem lambda (0: fast AT)")
        axis.legend(fontsize=7)
        axis.grid(alpha=0.3)
    utility.set(xlabel="natural test accuracy (%)", ylabel="AUC",
                title="Leakage against utility (squares: fewer-epoch fast AT)")
    utility.legend(fontsize=7)
    utility.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main() -> None:
    found = {experiment: points for experiment in SWEEPS if (points := sweep(experiment))}
    matched = {experiment: found_controls for experiment in found
               if (found_controls := controls(experiment))}
    text = ("# Paper B: the DeMem lambda sweep under fast AT\n\nGenerated by `python "
            "experiments/lambda_sweep.py` from the committed results.json files; 95% intervals "
            "as `claims.py` defines them (accuracies over the rotation targets, LiRA by the "
            f"crossed bootstrap), attack `{ATTACK}`. Percent, AUC as a fraction. The runs of "
            "one experiment share their memberships, so `claims.py` decides a lambda against "
            "fast AT by the paired interval of the difference (the claims table), narrower than "
            "these separate intervals. A control row is fast AT (no penalty) trained fewer epochs "
            "to a DeMem lambda's natural accuracy.\n\n"
            f"{table(found, matched)}\n\n![sweep](lambda_sweep.png)\n")
    (HERE / "lambda_sweep.md").write_text(text)
    figure(found, matched, HERE / "lambda_sweep.png")
    print(f"wrote {HERE / 'lambda_sweep.md'} and lambda_sweep.png")


if __name__ == "__main__":
    main()
