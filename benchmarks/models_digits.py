"""Test accuracy of each model of the neural-ODE zoo after a short training run on the 8x8
digits (1,437 train / 360 test images), and of ResNet-14 converted by replace-then-finetune.

    nice -n 10 python benchmarks/models_digits.py

Defaults: width 0.25, 4 solver steps, SDE k 0.5 (sigma 1), 8 epochs, Adam lr 1e-2, batch 64,
one thread. SDENet's accuracy is reported with its noisy eval outputs (the released ones) and
with the noise off.
"""

from __future__ import annotations

import argparse
import time

import torch
from record import recorded

from miaudit import DATASETS, RECIPES
from miaudit.models import build_model, switch_noise_off
from miaudit.training import TrainEnv, TrainParams, accuracy

MODELS = ["resnet14", "odenet", "odenet64", "anode", "sonode", "hbnode", "sdenet"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=MODELS + ["replace_finetune"])
    parser.add_argument("--width", type=float, default=0.25)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--k", type=float, default=0.5, help="SDE per-step noise std")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data = DATASETS.build("digits")
    params = TrainParams(epochs=args.epochs, batch_size=64, optimizer="adam", lr=1e-2,
                         weight_decay=0.0, schedule="cosine")
    device = torch.device("cpu")
    print(f"width {args.width}, steps {args.steps}, epochs {args.epochs}, SDE k {args.k}")
    for name in args.models:
        torch.manual_seed(0)
        base = "resnet14" if name == "replace_finetune" else name
        options = {} if base == "resnet14" else {"steps": args.steps}
        if name == "sdenet":
            options["k"] = args.k
        model = build_model(base, input_shape=(1, 8, 8), num_classes=10, width=args.width,
                            **options)
        recipe_options = ({"steps": args.steps, "k": args.k, "pretrain_epochs": args.epochs}
                          if name == "replace_finetune" else {})
        recipe = RECIPES.build("replace_finetune" if name == "replace_finetune" else "standard",
                               penalties=[], **recipe_options)
        started = time.perf_counter()
        model, log = recipe.train(model, data.x_train, data.y_train, params, TrainEnv(seed=0))
        seconds = time.perf_counter() - started
        torch.manual_seed(1)
        line = (f"{name:16s} train loss {log['loss'][-1]:.3f}  test acc "
                f"{accuracy(model, data.x_test, data.y_test, device):.3f}")
        if switch_noise_off(model):  # noise off for an accuracy-only comparison
            line += f" (noise off: {accuracy(model, data.x_test, data.y_test, device):.3f})"
        print(f"{line}  {seconds:.1f} s", flush=True)


if __name__ == "__main__":
    with recorded(__file__):
        main()
