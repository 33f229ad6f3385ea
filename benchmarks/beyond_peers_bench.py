"""Seconds and peak memory of issue 80's computations on synthetic scores: per-record risk
(:mod:`miaudit.analysis.record_risk`), dataset usage inference (one candidate set; the audit's
evaluation on six known fractions; :mod:`miaudit.analysis.dataset_usage`).

Full size (issue 80: N = 60,000 samples, M = 64 models, every model a target):

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/beyond_peers_bench.py

Quick run (N = 6,000, M = 16): ``--small``. Time: the call's CPU seconds (one thread; on a
shared machine wall time grows with the other load) and its wall seconds. Memory is
tracemalloc's peak of the call (numpy reports its array allocations to tracemalloc), beside
the (M, N) float64 score array's size.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np
from record import recorded

from miaudit.analysis import estimate_usage, evaluate_usage, record_risk


def world(models: int, samples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rotation memberships (each model trains on half) and scores that rise when IN."""
    rng = np.random.default_rng(seed)
    members = np.zeros((models, samples), dtype=bool)
    for row in members:
        row[rng.permutation(samples)[: samples // 2]] = True
    scores = rng.normal(size=samples) + rng.normal(size=(models, samples)) + 0.5 * members
    return scores, members


def measure(call) -> tuple[float, float, float]:
    """(CPU seconds, wall seconds, peak MiB) of one call. CPU seconds are the number to
    compare on a shared machine: wall time there grows with the other load."""
    tracemalloc.start()
    cpu, wall = time.process_time(), time.perf_counter()
    call()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return cpu, wall, peak / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", action="store_true", help="N = 6,000, M = 16")
    parser.add_argument("--rounds", type=int, default=1000, help="bootstrap rounds")
    args = parser.parse_args()
    models, samples = (16, 6000) if args.small else (64, 60000)
    scores, members = world(models, samples)
    print(f"N = {samples:,} samples, M = {models} models (all targets); scores "
          f"{scores.nbytes / 2**20:.0f} MiB; bootstrap rounds {args.rounds}\n")
    candidates = np.arange(samples // 10)
    cases = {
        "per-record risk (1% FPR)": lambda: record_risk(scores, members, level=0.01),
        "DUCI, one candidate set (10%)": lambda: estimate_usage(
            scores, members, candidates, rounds=args.rounds),
        "DUCI evaluation, 6 known fractions": lambda: evaluate_usage(
            scores, members, rounds=args.rounds),
    }
    print("| computation | CPU seconds | wall seconds | peak MiB |\n| --- | --- | --- | --- |")
    for name, call in cases.items():
        cpu, wall, peak = measure(call)
        print(f"| {name} | {cpu:.1f} | {wall:.1f} | {peak:.0f} |")
    print("\nThe privacy gate (miaudit check) reads results.json only, never the scores: its "
          "cost does not grow with N or M.")


if __name__ == "__main__":
    with recorded(__file__):
        main()
