"""Run the committed experiments and collect their outputs.

    python experiments/run.py digits_default            # one experiment
    python experiments/run.py --list

Each experiment is a folder with one or more ``*.yaml`` audit configs. The audits run with the
normal pipeline (run directories under ``runs/experiments``, resumable), then ``results.json``,
``roc.png`` and a ``summary.md`` table are copied into the experiment's ``outputs/`` folder,
which is committed. Pass ``--data-dir`` for data sets that need one (CIFAR-10 copy).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from rich.console import Console

from miaudit.config import load_config
from miaudit.pipeline import audit
from miaudit.report import TABLE_KEYS, model_line, privacy_line

HERE = Path(__file__).resolve().parent


def run_experiment(name: str, data_dir: Path | None, device: str) -> Path:
    folder = HERE / name
    outputs = folder / "outputs"
    outputs.mkdir(exist_ok=True)
    rows = []
    for config_file in sorted(folder.glob("*.yaml")):
        overrides = {"output_dir": str(HERE.parent / "runs" / "experiments"), "device": device}
        if data_dir is not None:
            overrides["data.data_dir"] = str(data_dir)
        cfg = load_config(config_file, overrides)
        results = audit(cfg, console=Console(stderr=True))
        stem = config_file.stem
        for artefact in ("results.json", "roc.png", "roc_dp_bound.png", "memorization.json",
                         "memorization.png"):
            if (results.run_dir / artefact).exists():
                shutil.copy(results.run_dir / artefact, outputs / f"{stem}.{artefact}")
        rows.append((stem, results.summary))
    (outputs / "summary.md").write_text(markdown(rows))
    return outputs


def markdown(rows: list[tuple[str, dict]]) -> str:
    """One table: config x attack, pooled metrics with the 95% CI of TPR@0.1%."""
    header = ["config", "attack", *TABLE_KEYS, "train acc", "test acc", "s/model"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for stem, summary in rows:
        stats = summary["target_models"]
        for label, attack in summary["attacks"].items():
            pooled = attack["pooled"]
            cells = [f"{100 * pooled[k]:.2f}" for k in TABLE_KEYS]
            interval = pooled.get("tpr@0.1%_ci")
            if interval:
                cells[1] += f" [{100 * interval[0]:.2f}, {100 * interval[1]:.2f}]"
            lines.append("| " + " | ".join([
                stem, f"`{label}`", *cells, f"{100 * stats['train_accuracy']:.1f}",
                f"{100 * stats['test_accuracy']:.1f}", f"{stats['train_seconds_mean']:.1f}",
            ]) + " |")
    notes = [f"- {stem}: {model_line(summary)}; {len(summary['targets'])} target(s), "
             f"{summary['num_models']} models, pool {summary['pool_size']}, "
             f"this run {summary.get('timing', {}).get('total_seconds_this_run', 'n/a')} s"
             + extra_note(summary) for stem, summary in rows]
    return ("Metrics in percent, pooled over targets (TPR@0.1% with 95% Clopper-Pearson CI).\n\n"
            + "\n".join(lines) + "\n\n" + "\n".join(notes) + "\n")


def extra_note(summary: dict) -> str:
    """Robust accuracy (adversarial training) and the DP guarantee, when the audit has them."""
    stats, parts = summary["target_models"], []
    if "test_robust_acc" in stats:
        parts.append(f"natural/robust (PGD) acc: train {100 * stats['train_natural_acc']:.1f}/"
                     f"{100 * stats['train_robust_acc']:.1f}%, test "
                     f"{100 * stats['test_natural_acc']:.1f}/{100 * stats['test_robust_acc']:.1f}%")
    if "privacy" in summary:
        parts.append(privacy_line(summary))
    return "".join(f"; {part}" for part in parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    available = sorted(p.name for p in HERE.iterdir() if p.is_dir() and any(p.glob("*.yaml")))
    if args.list or not args.names:
        print("\n".join(available))
        return
    for name in args.names:
        if name not in available:
            raise SystemExit(f"unknown experiment {name!r}; available: {', '.join(available)}")
        print(json.dumps({"experiment": name, "outputs": str(run_experiment(
            name, args.data_dir, args.device))}))


if __name__ == "__main__":
    main()
