"""Training throughput per model and train.precision, against the core's peak and the raw step.

For each model (the papers' dimensions: width 1, 32x32x3 inputs, 10 classes) and precision
(fp32, bf16) this prints, in images per CPU-second (``time.process_time``, one thread unless
``--threads``; CPU time is robust to the other load of a shared machine, wall time is not):

* **raw**: forward + backward + SGD step over fixed resident batches, nothing else, in the
  precision's layout and autocast (what :mod:`miaudit.training.precision` sets up);
* **fit**: :func:`miaudit.training.engine.fit` (the train stage's loop: shuffling, schedule,
  loss read-back, progress callback) on the same number of images; **fit/raw** is the
  pipeline's overhead (target >= 0.9);
* **GFLOP/s** and **% peak**: the training FLOPs per image (``torch.utils.flop_counter``,
  forward + backward) times the raw rate, against the peak of one core measured here with a
  large matrix multiply in the same dtype (printed first);
* with ``--compile``: the raw rate of ``torch.compile`` (inductor) on the same steps, its
  speed-up, the CPU-seconds the compilation took, and whether two compiled runs from the same
  seed end with bit-identical weights (the adoption rule: >= 1.2x and deterministic).

Medians over ``--repeats`` alternated runs. Inputs are random images (throughput does not
depend on pixel values).

    PYTHONPATH=src nice -n 10 python benchmarks/train_throughput.py --repeats 3 --compile
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F
from record import recorded
from torch.utils.flop_counter import FlopCounterMode

from miaudit._runtime.machine import BF16_ANSWERS, bf16_kernels
from miaudit.models import build_model
from miaudit.training import Recipe, TrainEnv, TrainParams, fit
from miaudit.training.precision import autocast_context, input_layout, training_layout

#: case -> (model, options): the issue-25 cases (the papers' blocks; ODENet 16 Euler steps,
#: SDENet 4 Euler-Maruyama steps) and paper C's CNN, as an ANN and as a directly trained LIF SNN
#: at T = 4 (issue 26: does direct training fit at the rotation scale?)
CASES = {
    "resnet14": ("resnet14", {}),
    "odenet": ("odenet", {"solver": "euler", "steps": 16}),
    "sdenet": ("sdenet", {"steps": 4, "stepper": "euler_maruyama"}),
    "small_cnn": ("small_cnn", {}),
    "ann_cnn": ("ann_cnn", {}),
    "snn_lif_t4": ("snn_cnn", {"T": 4, "neuron": "lif"}),
    # papers/A/floor_variants (issue 26): 4 steps, as those configs train
    "odenet_4": ("odenet", {"solver": "euler", "steps": 4}),
    "odenet64": ("odenet64", {"solver": "euler", "steps": 4}),
    "sonode": ("sonode", {"solver": "euler", "steps": 4}),
    "anode_plus64": ("anode", {"solver": "euler", "steps": 4, "augment_channels": 64}),
    "anode_plus16": ("anode", {"solver": "euler", "steps": 4, "augment_channels": 16}),
    "hbnode": ("hbnode", {"solver": "euler", "steps": 4}),
    "odenet_blocks2": ("odenet", {"solver": "euler", "steps": 4, "blocks": 2}),
    "odenet_rk4": ("odenet", {"solver": "rk4", "steps": 4}),
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def peak_gflops(dtype: torch.dtype, n: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of one n x n x n matrix multiply (best of ``repeats``, CPU time)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        a @ b
        best = min(best, time.process_time() - started)
    return 2 * n**3 / best / 1e9


def percent_of(gflops: float, peak: float | None) -> str:
    return "-" if peak is None else f"{100 * gflops / peak:.0f}"


def make_model(name: str, width: float) -> torch.nn.Module:
    torch.manual_seed(0)
    model, options = CASES[name]
    return build_model(model, input_shape=(3, 32, 32), num_classes=10, width=width, **options)


def data(images: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return (torch.rand(images, 3, 32, 32, generator=generator),
            torch.randint(0, 10, (images,), generator=generator))


def train_flops_per_image(name: str, width: float, batch: int) -> float:
    model = make_model(name, width).train()
    x, y = data(batch)
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(x), y).backward()
    return counter.get_total_flops() / batch


def raw_steps(name: str, width: float, precision: str, x: torch.Tensor, y: torch.Tensor,
              batch: int, compiled: bool = False, warmup: int = 1
              ) -> tuple[float, float, torch.nn.Module]:
    """(images per CPU-second after ``warmup`` steps, CPU-seconds of the warm-up, model)."""
    model, channels_last = training_layout(make_model(name, width).train(), precision)
    step_model = torch.compile(model, backend="inductor") if compiled else model
    autocast = autocast_context(precision, torch.device("cpu"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    batches = [(input_layout(x[i : i + batch], channels_last), y[i : i + batch])
               for i in range(0, len(y), batch)]

    def step(xb: torch.Tensor, yb: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = F.cross_entropy(step_model(xb), yb)
        loss.backward()
        optimizer.step()

    started = time.process_time()
    for xb, yb in batches[:warmup]:
        step(xb, yb)
    warm = time.process_time() - started
    started = time.process_time()
    for xb, yb in batches[warmup:]:
        step(xb, yb)
    images = sum(len(yb) for _, yb in batches[warmup:])
    return images / (time.process_time() - started), warm, model


def fit_rate(name: str, width: float, precision: str, x: torch.Tensor, y: torch.Tensor,
             batch: int) -> float:
    model = make_model(name, width)
    env = TrainEnv(seed=0, progress=lambda epoch, total, stats: None, precision=precision)
    started = time.process_time()
    fit(model, x, y, TrainParams(epochs=1, batch_size=batch), Recipe(), env)
    return len(y) / (time.process_time() - started)


def compile_row(name: str, width: float, precision: str, x: torch.Tensor, y: torch.Tensor,
                batch: int, eager: float) -> str:
    torch._dynamo.reset()
    rate, compile_seconds, first = raw_steps(name, width, precision, x, y, batch, True, 2)
    _, _, second = raw_steps(name, width, precision, x, y, batch, True, 2)
    same = all(torch.equal(a, b) for a, b in zip(first.state_dict().values(),
                                                  second.state_dict().values()))
    return (f"| {name} | {precision} | {eager:.0f} | {rate:.0f} | {rate / eager:.2f} | "
            f"{compile_seconds:.0f} | {'yes' if same else 'no'} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--precisions", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--width", type=float, default=1.0)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compile", action="store_true", help="also measure torch.compile")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    kernels = bf16_kernels(torch.device("cpu"))
    # without bfloat16 kernels autocast's matmul and convolutions take different fallbacks
    # (measured: matmul 0.3, convolutions ~4.5 GFLOP/s): the matmul is no roof, so neither
    # it (minutes at that rate) nor a "% peak" for bf16
    peaks = {p: peak_gflops(DTYPES[p]) for p in args.precisions
             if not (p == "bf16" and kernels is False)}
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, threads "
          f"{torch.get_num_threads()}, batch {args.batch}, width {args.width}, {args.steps} "
          f"timed steps, {args.repeats} repeats, load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores")
    print("core peak (2048^3 matmul): " + ", ".join(f"{p} {g:.3g} GFLOP/s"
                                                     for p, g in peaks.items())
          + f"; bfloat16 kernels (oneDNN): {BF16_ANSWERS[kernels]}")
    print("\n| model | precision | GFLOP/img (train) | raw img/CPU-s | fit img/CPU-s | fit/raw "
          "| GFLOP/s | % peak | speed-up vs fp32 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    eager: dict[tuple[str, str], float] = {}
    for name in args.models:
        flops = train_flops_per_image(name, args.width, args.batch)
        x, y = data((args.steps + 1) * args.batch)
        for precision in args.precisions:
            raw_steps(name, args.width, precision, x[: 2 * args.batch], y[: 2 * args.batch],
                      args.batch)  # warm-up: allocator, oneDNN kernels
            raws, fits = [], []
            for _ in range(args.repeats):  # alternated, so load drifts hit both alike
                raws.append(raw_steps(name, args.width, precision, x, y, args.batch)[0])
                fits.append(fit_rate(name, args.width, precision, x[args.batch:],
                                     y[args.batch:], args.batch))
            raw, fitted = statistics.median(raws), statistics.median(fits)
            eager[name, precision] = raw
            base = eager.get((name, "fp32"))
            gflops = flops * raw / 1e9
            speedup = f"{raw / base:.2f}x" if base else "-"  # "-": fp32 not measured
            percent = percent_of(gflops, peaks.get(precision))
            print(f"| {name} | {precision} | {flops / 1e9:.3f} | {raw:.0f} | {fitted:.0f} | "
                  f"{fitted / raw:.2f} | {gflops:.3g} | {percent} | {speedup} |", flush=True)
    if args.compile:
        print("\n| model | precision | eager img/CPU-s | compiled img/CPU-s | speed-up | "
              "compile CPU-s | bit-identical reruns |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for name in args.models:
            x, y = data((args.steps + 2) * args.batch)
            for precision in args.precisions:
                print(compile_row(name, args.width, precision, x, y, args.batch,
                                  eager[name, precision]), flush=True)


if __name__ == "__main__":
    with recorded(__file__):
        main()
