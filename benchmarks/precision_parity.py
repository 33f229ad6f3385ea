"""Accuracy and leakage parity of train.precision bf16 against fp32 (issue 25, item 2).

Runs the ResNet-14 and ODENet audits of ``experiments/papers/A/headline`` (CIFAR-10, rotation)
at fp32 and bf16 for several seeds, optionally reduced (``--set`` overrides, e.g. fewer models,
a smaller pool or fewer epochs), appends one JSON line per finished audit to ``--log`` and
prints the table (``--table`` prints it from the log without running anything):

    PYTHONPATH=src nice -n 10 python benchmarks/precision_parity.py --data-dir ../shared/data \\
        --models resnet14 --seeds 0 1 2 --set num_models=8 --set train.epochs=12
    python benchmarks/precision_parity.py --table --log benchmarks/precision_parity.jsonl

Per row: the targets' mean test accuracy (and its std over the targets), and the LiRA AUCs
(online; offline fixed-variance) as mean over the targets with a 95% normal interval of that
mean (it covers the spread of the targets of one family, not a rerun with another seed: the
seeds are the rerun). Parity holds when bf16 differs from fp32 by no more than fp32 differs
from itself across seeds.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import yaml
from record import recorded

from miaudit import Summary

HEADLINE = Path(__file__).resolve().parents[1] / "experiments" / "papers" / "A" / "headline"
CONFIGS = {"resnet14": "1_resnet14.yaml", "odenet": "2_odenet.yaml"}
ATTACKS = ["loss", "lira", "lira:offline=true,fixed_variance=true"]
LIRA = ("lira", "lira:offline=true,fixed_variance=true")


def config(model: str, precision: str, seed: int, data_dir: str, output_dir: str,
           overrides: list[str]) -> dict:
    from miaudit.configtools import set_dotted

    raw = yaml.safe_load((HEADLINE / CONFIGS[model]).read_text())
    raw.update(seed=seed, attacks=list(ATTACKS), output_dir=output_dir, threads=1)
    raw["name"] = f"parity-{model}-{precision}-s{seed}"
    raw["data"]["data_dir"] = data_dir
    raw["train"]["precision"] = precision
    for item in overrides:
        key, _, value = item.partition("=")
        set_dotted(raw, key, yaml.safe_load(value))
    return raw


def summary(results: Summary, model: str, precision: str, seed: int, seconds: float) -> dict:
    """One row from a run's typed results (``Results.summary``)."""
    targets = results.target_models
    row = {"model": model, "precision": precision, "seed": seed, "wall_seconds": round(seconds),
           "num_models": results.num_models, "pool_size": results.pool_size,
           "epochs": results.config["train"]["epochs"],
           "test_accuracy": targets.test_accuracy,
           "test_accuracy_std": targets.test_accuracy_std,
           "train_accuracy": targets.train_accuracy,
           "train_seconds_mean": targets.train_seconds_mean}
    for label in LIRA:
        attack = results.attacks[label]
        mean, std = attack.mean["auc"], attack.std["auc"]
        half = 1.96 * std / math.sqrt(len(targets.per_target_test))
        row[label] = {"auc": mean, "ci": [mean - half, mean + half]}
    return row


def table(rows: list[dict]) -> str:
    lines = ["| model | precision | seeds | test acc. (mean over seeds; each: mean of targets) "
             "| LiRA AUC | LiRA offline FV AUC | train s/model |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["precision"]), []).append(row)
    for (model, precision), runs in sorted(groups.items()):
        runs.sort(key=lambda r: r["seed"])
        accs = [r["test_accuracy"] for r in runs]
        spread = f" ± {statistics.stdev(accs):.3f}" if len(accs) > 1 else ""
        each = ", ".join(f"{a:.3f}" for a in accs)
        cells = [f"{statistics.mean(accs):.3f}{spread} ({each})"]
        for label in LIRA:
            cells.append(", ".join(f"{r[label]['auc']:.3f} [{r[label]['ci'][0]:.3f}, "
                                   f"{r[label]['ci'][1]:.3f}]" for r in runs))
        seconds = [r["train_seconds_mean"] for r in runs if r.get("train_seconds_mean")]
        cells.append(f"{statistics.median(seconds):.0f}" if seconds else "-")
        seeds = ",".join(str(r["seed"]) for r in runs)
        lines.append(f"| {model} | {precision} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="/work/shared/data")
    parser.add_argument("--output-dir", default="runs-parity")
    parser.add_argument("--models", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--log", default="precision_parity.jsonl")
    parser.add_argument("--table", action="store_true", help="print the table from --log")
    args = parser.parse_args()
    log = Path(args.log)
    if not args.table:
        from miaudit import audit

        for seed in args.seeds:
            for model in args.models:
                for precision in args.precisions:
                    started = time.perf_counter()
                    results = audit(config(model, precision, seed, args.data_dir,
                                           args.output_dir, args.overrides), show_progress=False)
                    row = summary(results.summary, model, precision, seed,
                                  time.perf_counter() - started)
                    with log.open("a") as handle:
                        handle.write(json.dumps(row) + "\n")
                    print(json.dumps(row), flush=True)
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    print(table(rows))


if __name__ == "__main__":
    with recorded(__file__):
        main()
