"""Seconds per epoch of small_cnn on digits (the default audit's model and data: 1,437
training images, batch 64, engine.fit) with 1, 2, ... torch intra-op threads, alternated,
median over repeats; prints the machine's load so the numbers can be read in context.

    PYTHONPATH=src python benchmarks/threads_bench.py --threads 1 2 --repeats 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from record import recorded

from miaudit import DATASETS
from miaudit._runtime.threads import available_cores
from miaudit.models import build_model
from miaudit.training import Recipe, TrainEnv, TrainParams, fit


def epoch_seconds(x: torch.Tensor, y: torch.Tensor, threads: int, epochs: int) -> float:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = build_model("small_cnn", input_shape=(1, 8, 8), num_classes=10)
    started = time.perf_counter()
    fit(model, x, y, TrainParams(epochs=epochs), Recipe(), TrainEnv())
    return (time.perf_counter() - started) / epochs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    splits = DATASETS.build("digits")
    x, y = splits.x_train, splits.y_train
    times: dict[int, list[float]] = {t: [] for t in args.threads}
    loads = []
    for _ in range(args.repeats):
        for threads in args.threads:
            loads.append(os.getloadavg()[0])
            times[threads].append(epoch_seconds(x, y, threads, args.epochs))
    print(f"{available_cores()} cores available, load average {min(loads):.1f}-{max(loads):.1f}")
    for threads, values in times.items():
        print(f"threads {threads}: s/epoch median {statistics.median(values):.3f} "
              f"(min {min(values):.3f}, max {max(values):.3f}, n {len(values)})")


if __name__ == "__main__":
    with recorded(__file__):
        main()
