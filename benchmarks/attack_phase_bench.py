"""Wall time of the audit's attack phase on a run's stored outputs, per attack.

    PYTHONPATH=src nice -n 10 python benchmarks/attack_phase_bench.py RUN_DIR [--repeats 3]

RUN_DIR is a finished audit (e.g. of the default config, ``miaudit audit``): its keep.npy,
models/*/outputs.safetensors and manifest.json. For each attack of the run's config (or
``--attacks``), as the pipeline does: score every target (rotation: all others are its
references), then the metrics (per-target and pooled ``summarize``, ``aggregate``,
``per_class``, the crossed bootstrap of the pooled intervals). Each repeat starts from an
empty signal cache, so the first attack reading a signal pays for computing it, as in an
audit. Prints the median over repeats of each
attack's scoring and metrics seconds, and of the whole phase.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from record import recorded
from stored_run import load_run

from miaudit import ATTACKS
from miaudit.attacks import AttackInput
from miaudit.stats import intervals, metrics


def spec_label(spec) -> str:
    return spec if isinstance(spec, str) else str(spec)


def attack_phase(data: AttackInput, specs: list, targets: list[int]) -> dict[str, list[float]]:
    """{label: [scoring, metrics, scoring CPU, metrics CPU seconds]}, one pass over all
    attacks. CPU seconds (``time.process_time``) are the steadier figure on a shared machine:
    wall time there mostly measures the other processes."""
    members = data.keep[targets]
    labels = np.tile(data.labels, len(targets))
    resamples = intervals.Resamples.draw(len(targets), data.keep.shape[1])
    seconds = {}
    for spec in specs:
        attack = ATTACKS.build_spec(spec)
        started, cpu_started = time.perf_counter(), time.process_time()
        scores = np.stack([attack.evaluate(data, t, np.delete(np.arange(data.num_models), t))
                           .scores for t in targets])
        scored, cpu_scored = time.perf_counter(), time.process_time()
        per_target = [metrics.summarize(s, m) for s, m in zip(scores, members)]
        metrics.summarize(scores.ravel(), members.ravel())
        metrics.aggregate(per_target)
        metrics.per_class(scores.ravel(), members.ravel(), labels)
        intervals.replicate_metrics(scores, members, resamples, metrics.DEFAULT_FPR_LEVELS)
        seconds[spec_label(spec)] = [scored - started, time.perf_counter() - scored,
                                     cpu_scored - cpu_started, time.process_time() - cpu_scored]
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--attacks", nargs="*", help="attack specs (default: the run's)")
    args = parser.parse_args(argv)
    data, config = load_run(args.run_dir)
    specs = args.attacks or config["attacks"]
    targets = list(range(data.num_models))  # rotation: every model is a target
    runs = []
    for repeat in range(args.repeats):
        fresh = AttackInput(data.logits, data.labels, data.keep, data.query_names,
                            population=data.population)
        runs.append(attack_phase(fresh, specs, targets))
        wall, cpu = np.sum(list(runs[-1].values()), axis=0).reshape(2, 2).sum(axis=1)
        print(f"repeat {repeat + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
    print(f"{'attack':40s} {'score s':>8s} {'metrics s':>9s} {'score CPU':>9s} "
          f"{'metrics CPU':>11s}  (medians of {args.repeats})")
    for label in runs[0]:
        row = np.median([run[label] for run in runs], axis=0)
        print(f"{label:40s} {row[0]:8.2f} {row[1]:9.3f} {row[2]:9.2f} {row[3]:11.3f}")
    totals = np.median([np.sum(list(run.values()), axis=0) for run in runs], axis=0)
    print(f"{'attack phase total':40s} {totals[0]:8.2f} {totals[1]:9.3f} {totals[2]:9.2f} "
          f"{totals[3]:11.3f}; wall {totals[:2].sum():.2f} s, CPU {totals[2:].sum():.2f} s "
          f"({len(targets)} targets, {len(specs)} attacks)")


if __name__ == "__main__":
    with recorded(__file__):
        main(sys.argv[1:])
