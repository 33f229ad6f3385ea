"""Seconds to train K models one by one (engine.fit) vs at once (ensemble.fit_ensemble), same
members, seeds and settings; median over alternated repeats, one thread.

    PYTHONPATH=src python benchmarks/ensemble_speed.py --k 4 --model small_cnn --width 0.25
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from record import recorded

from miaudit import DATASETS
from miaudit.models import build_model
from miaudit.training import Recipe, TrainEnv, TrainParams, fit
from miaudit.training.ensemble import fit_ensemble


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--model", default="small_cnn")
    parser.add_argument("--width", type=float, default=0.25)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    splits = DATASETS.build("digits")
    x, y = splits.x_train, splits.y_train
    members = [torch.sort(torch.randperm(len(y), generator=torch.Generator().manual_seed(k))[
        : len(y) // 2]).values for k in range(args.k)]
    params = TrainParams(epochs=args.epochs)

    def build(seed: int) -> torch.nn.Module:
        torch.manual_seed(seed)
        return build_model(args.model, input_shape=(1, 8, 8), num_classes=10, width=args.width)

    sequential, batched = [], []
    for _ in range(args.repeats):
        started = time.perf_counter()
        for k in range(args.k):
            fit(build(k), x[members[k]], y[members[k]], params, Recipe(), TrainEnv(seed=k))
        sequential.append(time.perf_counter() - started)
        started = time.perf_counter()
        fit_ensemble([build(k) for k in range(args.k)], x, y, members, params, list(range(args.k)))
        batched.append(time.perf_counter() - started)
    seq, bat = statistics.median(sequential), statistics.median(batched)
    print(f"{args.model} width {args.width}, K {args.k}, {args.epochs} epochs, threads "
          f"{args.threads}: sequential {seq:.2f} s, ensemble {bat:.2f} s, "
          f"speed-up {seq / bat:.2f}x")


if __name__ == "__main__":
    with recorded(__file__):
        main()
