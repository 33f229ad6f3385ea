"""Training-loop overhead: the pipeline's training throughput against the raw train step.

For each (model, data set) case this prints images/s of

* **raw**: forward + backward + SGD step over resident tensors, fixed contiguous batches,
  nothing else (no shuffling, no augmentation, no loss read-back, no schedule);
* **fit**: :func:`miaudit.training.engine.fit` with the standard recipe, the same batch size,
  the same number of images, a progress callback (as the train stage passes one), SGD momentum
  + cosine schedule (the config defaults);

and their ratio (target >= 0.9). Medians over ``--repeats`` alternated runs, one thread unless
``--threads`` says otherwise (the machine is shared: more threads measure contention).

    PYTHONPATH=src MIAUDIT_SHARED_DATA=/work/shared/data nice -n 10 \
        python benchmarks/train_throughput.py --repeats 3

CIFAR-10 comes from ``$MIAUDIT_SHARED_DATA/cifar10-jpeg`` (image folder), the first
``--cifar-images`` training images (200 a class by default); the case is skipped when absent.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from miaudit.models import build_model
from miaudit.registry import DATASETS
from miaudit.training.engine import Recipe, TrainEnv, TrainParams, fit


def load_data(name: str, cifar_images: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    if name == "digits":
        splits = DATASETS.build("digits")
        return splits.x_train, splits.y_train
    root = Path(os.environ.get("MIAUDIT_SHARED_DATA", "/work/shared/data")) / "cifar10-jpeg"
    if not root.exists():
        return None
    splits = DATASETS.build("cifar10", data_dir=root, limit_per_class=cifar_images // 10)
    return splits.x_train, splits.y_train


def make_model(name: str, x: torch.Tensor, width: float) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(name, input_shape=tuple(x.shape[1:]), num_classes=10, width=width)


def raw_seconds(name: str, x: torch.Tensor, y: torch.Tensor, width: float, batch: int,
                epochs: int) -> float:
    """The lower bound: only the arithmetic of the train steps."""
    model = make_model(name, x, width).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    batches = [(x[i : i + batch], y[i : i + batch]) for i in range(0, len(y), batch)]
    started = time.perf_counter()
    for _ in range(epochs):
        for xb, yb in batches:
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(xb), yb).backward()
            optimizer.step()
    return time.perf_counter() - started


def fit_seconds(name: str, x: torch.Tensor, y: torch.Tensor, width: float, batch: int,
                epochs: int) -> float:
    """What the train stage runs (pipeline.train_model calls recipe.train -> fit)."""
    model = make_model(name, x, width)
    params = TrainParams(epochs=epochs, batch_size=batch)
    env = TrainEnv(seed=0, progress=lambda epoch, total, stats: None)
    started = time.perf_counter()
    fit(model, x, y, params, Recipe(), env)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--cifar-images", type=int, default=2000)
    parser.add_argument("--width", type=float, default=0.25, help="resnet14 width")
    parser.add_argument("--epochs-digits", type=int, default=5)
    parser.add_argument("--epochs-cifar", type=int, default=1)
    parser.add_argument("--only", nargs="*", default=None, help="e.g. small_cnn/digits")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads {torch.get_num_threads()}, batch {args.batch}, repeats {args.repeats}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'case':<22} {'images':>7} {'raw img/s':>10} {'fit img/s':>10} {'fit/raw':>8}")
    for data_name in ("digits", "cifar10"):
        data = load_data(data_name, args.cifar_images)
        if data is None:
            print(f"{data_name}: skipped (no $MIAUDIT_SHARED_DATA/cifar10-jpeg)")
            continue
        x, y = data
        epochs = args.epochs_digits if data_name == "digits" else args.epochs_cifar
        for model_name, width in (("small_cnn", 1.0), ("resnet14", args.width)):
            case = f"{model_name}/{data_name}"
            if args.only and case not in args.only:
                continue
            raw_seconds(model_name, x[: 4 * args.batch], y[: 4 * args.batch], width,
                        args.batch, 1)  # warm-up: allocator, kernels
            raw, fitted = [], []
            for _ in range(args.repeats):  # alternated, so load drifts hit both alike
                raw.append(raw_seconds(model_name, x, y, width, args.batch, epochs))
                fitted.append(fit_seconds(model_name, x, y, width, args.batch, epochs))
            images = epochs * len(y)
            raw_rate = images / statistics.median(raw)
            fit_rate = images / statistics.median(fitted)
            print(f"{case:<22} {images:>7} {raw_rate:>10.0f} {fit_rate:>10.0f} "
                  f"{fit_rate / raw_rate:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
