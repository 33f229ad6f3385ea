"""CPU-seconds of the query stage's forward passes on spiking networks (snn_cnn, CIFAR-10
shape, width 1, random weights and inputs), with the inference fast path of the spike
function and without it (the arctan surrogate computed and subtracted again, as before the
fast path), alternated, median over repeats; checks that both give bit-identical logits.

    PYTHONPATH=src python benchmarks/query_throughput.py --repeats 5
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable

import torch
from record import recorded

from miaudit.models import snn
from miaudit.queries import query_outputs

FAST = snn.heaviside


def with_surrogate(u: torch.Tensor, alpha: float, strict: bool = False) -> torch.Tensor:
    """The spike function as written before the fast path: surrogate always computed."""
    hard = (u > 0) if strict else (u >= 0)
    soft = torch.atan(0.5 * math.pi * alpha * u) / math.pi
    return hard.to(u.dtype) + (soft - soft.detach())


def cpu_seconds(model: torch.nn.Module, x: torch.Tensor, spec: str,
                spike: Callable[..., torch.Tensor]) -> tuple[float, torch.Tensor]:
    snn.heaviside = spike
    try:
        started = time.process_time()
        logits = query_outputs(model, x, [spec], torch.device("cpu"), seed=0)
        return time.process_time() - started, logits
    finally:
        snn.heaviside = FAST


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x = torch.randn(args.samples, 3, 32, 32)
    print(f"{args.samples} samples, {args.threads} thread(s), load average "
          f"{os.getloadavg()[0]:.1f}; CPU-s per 1,000 samples, median of {args.repeats}")
    print("| model | query | fast path | with surrogate | speed-up | identical |")
    print("| --- | --- | --- | --- | --- | --- |")
    for neuron, steps in (("if", 1), ("if", 4), ("lif", 4)):
        model = snn.snn_cnn(input_shape=(3, 32, 32), num_classes=10, T=steps, neuron=neuron)
        for spec in ("identity", "dropout:p=0.05,n=4"):
            times: dict[str, list[float]] = {"fast": [], "slow": []}
            same = True
            for _ in range(args.repeats):
                fast, fast_logits = cpu_seconds(model, x, spec, FAST)
                slow, slow_logits = cpu_seconds(model, x, spec, with_surrogate)
                times["fast"].append(fast)
                times["slow"].append(slow)
                same = same and torch.equal(fast_logits, slow_logits)
            per_k = {k: 1000 * statistics.median(v) / args.samples for k, v in times.items()}
            print(f"| {neuron.upper()} T={steps} | {spec} | {per_k['fast']:.2f} | "
                  f"{per_k['slow']:.2f} | {per_k['slow'] / per_k['fast']:.2f}x | {same} |")


if __name__ == "__main__":
    with recorded(__file__):
        main()
