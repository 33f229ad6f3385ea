"""Paper A's claimed directions (Tables 1, 2, 4) against this experiment's results.

Reads the committed ``outputs/*.results.json`` and writes ``outputs/verdicts.md``: per
metric and claimed ordering, ours with 95% intervals beside the paper's number, and a verdict:
reproduced (intervals separate in the paper's direction), not reproduced (separate the other
way), inconclusive (overlap). TPR intervals: exact Clopper-Pearson of the pooled TPR; AUC
intervals: mean +- 1.96 std / sqrt(targets) over the rotation targets.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

HERE = Path(__file__).parent
RUNS = {"ResNet-14": "1_resnet14", "ODENet": "2_odenet", "SDENet k=0.5 (sigma label 2)":
        "3_sdenet_k0.5", "SDENet k=0 (sigma 0)": "4_sdenet_k0"}
# Paper A, CIFAR-10, LiRA (Tables 1, 2, 4): TPR@0.1%, TPR@1%, AUC; train / test accuracy.
PAPER = {"ResNet-14": (3.96, 10.57, 0.679, 98.1, 86.0), "ODENet": (1.01, 4.22, 0.616, 94.3, 84.4),
         "SDENet k=0.5 (sigma label 2)": (0.14, 1.24, 0.525, 81.9, 81.9),
         "SDENet k=0 (sigma 0)": (0.35, 2.02, 0.559, 89.09, 83.93)}
ATTACK = "lira"
CLAIMS = [("ResNet-14", "ODENet"), ("ODENet", "SDENet k=0.5 (sigma label 2)"),
          ("ODENet", "SDENet k=0 (sigma 0)"),
          ("SDENet k=0 (sigma 0)", "SDENet k=0.5 (sigma label 2)")]


def load() -> dict[str, dict]:
    out = {}
    for label, stem in RUNS.items():
        path = HERE / "outputs" / f"{stem}.results.json"
        if path.exists():
            out[label] = json.loads(path.read_text())
    return out


def interval(summary: dict, key: str) -> tuple[float, float, float]:
    attack = summary["attacks"][ATTACK]
    if key == "auc":
        mean, std = attack["mean"]["auc"], attack["std"]["auc"]
        half = 1.96 * std / math.sqrt(len(summary["targets"]))
        return attack["pooled"]["auc"], mean - half, mean + half
    low, high = attack["pooled"][f"{key}_ci"]
    return attack["pooled"][key], low, high


def verdict(a: tuple[float, float, float], b: tuple[float, float, float]) -> str:
    if a[1] > b[2]:
        return "reproduced"
    if b[1] > a[2]:
        return "not reproduced"
    return "inconclusive (intervals overlap)"


def main() -> None:
    runs = load()
    lines = ["# Paper A (Tables 1, 2, 4) at CPU scale: claimed directions", "",
             f"Attack: {ATTACK} (online, per-example variance), pooled over 16 rotation "
             "targets. Paper: CIFAR-10, full scale.", "",
             "| model | train / test acc (ours) | paper | TPR@0.1% [95% CI] | paper | "
             "TPR@1% [95% CI] | paper | AUC [95% CI] | paper |", "|" + " --- |" * 9]
    for label, summary in runs.items():
        stats, paper = summary["target_models"], PAPER[label]
        cells = [f"{100 * stats['train_accuracy']:.1f} / {100 * stats['test_accuracy']:.1f}",
                 f"{paper[3]} / {paper[4]}"]
        for key, scale, ref in (("tpr@0.1%", 100, paper[0]), ("tpr@1%", 100, paper[1]),
                                ("auc", 1, paper[2])):
            value, low, high = interval(summary, key)
            digits = 2 if scale == 100 else 3
            cells += [f"{scale * value:.{digits}f} [{scale * low:.{digits}f}, "
                      f"{scale * high:.{digits}f}]", f"{ref}"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", "| claimed direction | TPR@0.1% | TPR@1% | AUC |", "| --- | --- | --- | --- |"]
    for high_label, low_label in CLAIMS:
        if high_label in runs and low_label in runs:
            cells = [verdict(interval(runs[high_label], key), interval(runs[low_label], key))
                     for key in ("tpr@0.1%", "tpr@1%", "auc")]
            lines.append(f"| {high_label} > {low_label} | " + " | ".join(cells) + " |")
    (HERE / "outputs" / "verdicts.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
