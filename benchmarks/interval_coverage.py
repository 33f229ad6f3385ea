"""Coverage of miaudit's 95% intervals against a synthetic audit world with known truth, and
the cost of the crossed bootstrap at paper scale.

    PYTHONPATH=src python benchmarks/interval_coverage.py [--audits 300] [--samples 2000]
    PYTHONPATH=src python benchmarks/interval_coverage.py --cost [--samples 60000 --models 64
        --rounds 100]
    PYTHONPATH=src python benchmarks/interval_coverage.py --paired [--audits 200]

The world (``miaudit.analysis.synthetic_world``): per-sample difficulty and membership effect,
per-model offset and memorization strength, model-by-sample noise; its population ROC from
quadrature, checked here against a direct simulation of 2 x 10^7 scores. Each simulated
audit: 16 models under rotation (complementary pairs), N samples, pooled estimates; the new
interval is the crossed (samples x targets) bootstrap of ``miaudit.stats.intervals`` with the
audit's default number of replicates; the old ones are the pooled Clopper-Pearson interval
(TPR) and the t interval over per-target AUCs. Prints a Markdown table (coverage, mean width).
``--cost`` times ``replicate_metrics`` (all metrics, one attack) on random scores.
``--paired``: the interval of the difference between two audits with the same memberships
(``miaudit.analysis.paired_runs``; the world's membership effect scaled 1.5 vs 1.2, samples
shared, models apart): its coverage of the true difference, and how often it decides a > b
beside two separate intervals that do not overlap.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from record import recorded

from miaudit.analysis import World, coverage_study, paired_coverage_study
from miaudit.stats import intervals, metrics

NAMES = {"tpr@0.1%": "TPR@0.1%", "tpr@1%": "TPR@1%", "auc": "AUC"}


def coverage_table(audits: int, models: int, samples: int, seed: int) -> str:
    world = World()
    started = time.process_time()
    result = coverage_study(world, audits, models, samples, seed=seed)
    seconds = time.process_time() - started
    simulated = world.simulated_truth((1e-3, 1e-2))
    lines = [f"{audits} simulated audits, {models} models under rotation, {samples} samples, "
             f"{intervals.ROUNDS} bootstrap replicates each ({seconds:.0f} CPU s):", "",
             "| metric | truth (quadrature / simulation) | new: crossed bootstrap, coverage | "
             "mean width | old pooled interval, coverage | mean width | from per-target "
             "summaries, coverage | mean width |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, name in NAMES.items():
        scale = 1 if key == "auc" else 100
        lines.append(f"| {name} | {scale * result.truth[key]:.3f} / {scale * simulated[key]:.3f}"
                     f" | {100 * result.new[key]:.1f}% | {scale * result.new_width[key]:.3f} | "
                     f"{100 * result.old[key]:.1f}% | {scale * result.old_width[key]:.3f} | "
                     f"{100 * result.summaries[key]:.1f}% | "
                     f"{scale * result.summaries_width[key]:.3f} |")
    return "\n".join(lines) + "\n\n(TPR in percent, AUC as a fraction; old AUC interval: " \
        "t interval over the per-target AUCs, as experiments/claims.py used; per-target " \
        "summaries: summary_intervals.target_summary_interval, what claims.py computes from " \
        "committed results.json files that hold no scores.)"


def paired_table(audits: int, models: int, samples: int, seed: int) -> str:
    world_a, world_b = World(), World(scale=1.2)
    started = time.process_time()
    result = paired_coverage_study(world_a, world_b, audits, models, samples, seed=seed)
    seconds = time.process_time() - started
    lines = [f"{audits} simulated pairs of audits (membership effect scale 1.5 vs 1.2), {models}"
             f" models each under rotation, {samples} shared samples, {intervals.ROUNDS} "
             f"replicates ({seconds:.0f} CPU s):", "",
             "| metric | true difference | paired interval, coverage | mean width | decided "
             "a > b: paired | two separate intervals |", "| --- | --- | --- | --- | --- | --- |"]
    for key, name in NAMES.items():
        scale = 1 if key == "auc" else 100
        lines.append(f"| {name} | {scale * result.truth[key]:+.3f} | "
                     f"{100 * result.covered[key]:.1f}% | {scale * result.width[key]:.3f} | "
                     f"{100 * result.decided_paired[key]:.1f}% | "
                     f"{100 * result.decided_separate[key]:.1f}% |")
    return "\n".join(lines) + "\n\n(TPR in percent, AUC as a fraction.)"


def cost(models: int, samples: int, repeats: int, rounds: int) -> str:
    rng = np.random.default_rng(0)
    members = np.zeros((models, samples), dtype=bool)
    members[::2, : samples // 2] = members[1::2, samples // 2:] = True
    scores = rng.normal(size=(models, samples)) + 0.3 * members
    resamples = intervals.Resamples.draw(models, samples, rounds)
    times = []
    for _ in range(repeats):
        started = time.process_time()
        intervals.replicate_metrics(scores, members, resamples, metrics.DEFAULT_FPR_LEVELS)
        times.append(time.process_time() - started)
    per_audit = np.median(times) * intervals.ROUNDS / rounds
    return (f"crossed bootstrap of one attack, {models} targets x {samples} samples, "
            f"{rounds} replicates: median {np.median(times):.2f} CPU s (of {repeats}); "
            f"{per_audit:.1f} CPU s at the audit's {intervals.ROUNDS} (linear in replicates)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audits", type=int, default=300)
    parser.add_argument("--models", type=int, default=16)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cost", action="store_true", help="time the bootstrap instead")
    parser.add_argument("--paired", action="store_true",
                        help="coverage of the paired difference of two audits instead")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=intervals.ROUNDS,
                        help="--cost: replicates timed (the cost is linear in them)")
    args = parser.parse_args()
    if args.cost:
        print(cost(args.models, args.samples, args.repeats, args.rounds))
    elif args.paired:
        print(paired_table(args.audits, args.models, args.samples, args.seed))
    else:
        print(coverage_table(args.audits, args.models, args.samples, args.seed))


if __name__ == "__main__":
    with recorded(__file__):
        main()
