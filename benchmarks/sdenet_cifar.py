"""SDENet vs ODENet test accuracy on a CIFAR-10 subset, same budget (the check that SDENet's
default noise costs a few points of accuracy, as paper A's Table 2: 81.9% vs 84.4%).

    MIAUDIT_SHARED_DATA=/work/shared/data PYTHONPATH=src nice -n 10 \
        python benchmarks/sdenet_cifar.py odenet '{}'
    ... python benchmarks/sdenet_cifar.py sdenet '{"stepper": "euler_maruyama"}'
    ... python benchmarks/sdenet_cifar.py sdenet '{"stepper": "euler_maruyama",
                                                  "convention": "paper"}'

Setting: 5,000 training and 1,000 test images drawn with seed 0, width 0.25, 16 steps, 10
epochs, SGD lr 0.1 momentum 0.9 cosine, weight decay 5e-4, batch 128, flip + 4-pixel crop, one
thread. SDENet is scored with its noise on (the released outputs) and, for reference, off.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from record import recorded

from miaudit import DATASETS
from miaudit.models import build_model, switch_noise_off
from miaudit.training import Recipe, TrainEnv, TrainParams, accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("options", nargs="?", default="{}", help="model options as JSON")
    parser.add_argument("--width", type=float, default=0.25)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--train", type=int, default=5000)
    parser.add_argument("--test", type=int, default=1000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = DATASETS.build("cifar10",
                          data_dir=os.path.join(os.environ["MIAUDIT_SHARED_DATA"], "cifar10-jpeg"))
    generator = torch.Generator().manual_seed(0)
    train = torch.randperm(len(data.y_train), generator=generator)[: args.train]
    test = torch.randperm(len(data.y_test), generator=generator)[: args.test]
    x, y = data.x_train[train], data.y_train[train]
    x_test, y_test = data.x_test[test], data.y_test[test]
    options = json.loads(args.options)
    torch.manual_seed(0)
    model = build_model(args.model, input_shape=(3, 32, 32), num_classes=10, width=args.width,
                        **options)
    params = TrainParams(epochs=args.epochs, batch_size=128, lr=0.1, weight_decay=5e-4,
                         schedule="cosine", flip=True, crop_padding=4)
    started = time.perf_counter()
    model, _ = Recipe().train(model, x, y, params, TrainEnv(seed=0))
    seconds = time.perf_counter() - started
    cpu = torch.device("cpu")
    print(f"{args.model} {options}: train {accuracy(model, x, y, cpu):.4f} "
          f"test {accuracy(model, x_test, y_test, cpu):.4f} ({seconds:.0f} s)")
    if switch_noise_off(model):
        print(f"  noise off: test {accuracy(model, x_test, y_test, cpu):.4f}")


if __name__ == "__main__":
    with recorded(__file__):
        main()
