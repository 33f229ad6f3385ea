"""Training throughput (images/s of one SGD train step: forward, backward, update) of each model
of the neural-ODE zoo on 3x32x32 inputs, median over repeats.

    nice -n 10 python benchmarks/models_throughput.py                      # CPU-scale profile
    python benchmarks/models_throughput.py --width 1 --steps 16 --batch 128 --device cuda

CPU-scale defaults: width 0.25, 4 solver steps (ODE/SDE nets), batch 32, one thread (the
machine is shared; set --threads to use more). Each model gets one warm-up step.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from record import recorded

from miaudit.models import build_model

MODELS = ["resnet14", "odenet", "odenet64", "anode", "sonode", "hbnode", "sdenet"]


def step_seconds(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                 optimizer: torch.optim.Optimizer) -> float:
    if x.is_cuda:
        torch.cuda.synchronize()
    started = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    if x.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=MODELS)
    parser.add_argument("--width", type=float, default=0.25)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    x = torch.rand(args.batch, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    print(f"width {args.width}, steps {args.steps}, batch {args.batch}, threads {args.threads}, "
          f"device {device}, torch {torch.__version__}")
    print(f"{'model':10s} {'params':>9s} {'img/s (median)':>15s} {'min':>8s} {'max':>8s}")
    for name in args.models:
        options = {} if name == "resnet14" else {"steps": args.steps}
        torch.manual_seed(0)
        model = build_model(name, input_shape=(3, 32, 32), num_classes=10, width=args.width,
                            **options).to(device).train()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        step_seconds(model, x, y, optimizer)  # warm-up
        rates = [args.batch / step_seconds(model, x, y, optimizer) for _ in range(args.repeats)]
        params = sum(p.numel() for p in model.parameters())
        print(f"{name:10s} {params:9d} {statistics.median(rates):15.1f} {min(rates):8.1f} "
              f"{max(rates):8.1f}", flush=True)


if __name__ == "__main__":
    with recorded(__file__):
        main()
