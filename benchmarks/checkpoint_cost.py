"""Cost of one training checkpoint (miaudit.training.checkpoint): the snapshot an epoch end
takes, the atomic write (torch.save + fsync + rename), the file's size and the read back, for
the models the studies train, median over repeats.

    nice -n 10 python benchmarks/checkpoint_cost.py
    python benchmarks/checkpoint_cost.py --models resnet14 --width 1 --device cuda

A checkpoint is written at most every ``executor.checkpoint_minutes`` (10 by default), so its
cost over training is (write seconds) / 600 at most.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from record import recorded

from miaudit.models import build_model
from miaudit.recipes.standard import Standard
from miaudit.training import FitState, TrainEnv, TrainParams
from miaudit.training.checkpoint import Checkpoint
from miaudit.training.engine import epoch_snapshot

MODELS = {  # name: options (the studies' settings at this width)
    "resnet14": {},
    "odenet": {"steps": 4, "solver": "rk4"},
    "sdenet": {"steps": 4},
    "snn_resnet18": {"T": 4, "neuron": "lif"},
}


def trained_state(name: str, width: float, device: torch.device) -> tuple[FitState, object]:
    """A model after one SGD step (so the optimizer holds its momentum buffers)."""
    torch.manual_seed(0)
    model = build_model(name, input_shape=(3, 32, 32), num_classes=10, width=width,
                        **MODELS[name]).to(device).train()
    params = TrainParams()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    x = torch.rand(8, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (8,), device=device)
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    schedule.step()
    state = FitState(model=model, optimizer=optimizer, params=params,
                     env=TrainEnv(device=device), x=x, y=y, x_val=None, y_val=None,
                     generator=torch.Generator().manual_seed(0), batches=lambda epoch: [],
                     steps_per_epoch=1)
    return state, schedule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--width", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"width {args.width}, threads {args.threads}, device {device}, "
          f"torch {torch.__version__}; seconds are medians of {args.repeats}")
    print("\n| model | params | file MiB | snapshot s | write s | read s |")
    print("| --- | --- | --- | --- | --- | --- |")
    recipe = Standard()
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models:
            state, schedule = trained_state(name, args.width, device)
            checkpoint = Checkpoint(Path(folder) / f"{name}.pt", name, every_seconds=0)
            snap, write, read = [], [], []
            for _ in range(args.repeats):
                started = time.perf_counter()
                checkpoint.partial = {"call": 0, **epoch_snapshot(state, schedule, recipe, 0)}
                snap.append(time.perf_counter() - started)
                started = time.perf_counter()
                checkpoint.write()
                write.append(time.perf_counter() - started)
                started = time.perf_counter()
                Checkpoint.open(checkpoint.path, name)
                read.append(time.perf_counter() - started)
            size = checkpoint.path.stat().st_size / 2**20
            count = sum(p.numel() for p in state.model.parameters())
            print(f"| {name} | {count:,} | {size:.1f} | {statistics.median(snap):.3f} | "
                  f"{statistics.median(write):.3f} | {statistics.median(read):.3f} |",
                  flush=True)


if __name__ == "__main__":
    with recorded(__file__):
        main()
