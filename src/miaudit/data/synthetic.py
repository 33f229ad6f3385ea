"""Synthetic Gaussian-mixture data for tests: fast, learnable, and memorizable."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from miaudit._runtime.machine import physical_memory_bytes
from miaudit.data._base import DataSplits, reject_data_dir
from miaudit.registry import DATASETS


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_synthetic(*, n_train: int, n_test: int, num_classes: int, shape: tuple[int, ...],
                    **unchecked: object) -> None:
    """The generator's option values (the config checks them before generating)."""
    for name, value, least in (("n_train", n_train, 0), ("n_test", n_test, 0),
                               ("num_classes", num_classes, 1)):
        if not _count(value) or value < least:
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    if isinstance(shape, (str, bytes)) or not isinstance(shape, (list, tuple)) or not shape \
            or not all(_count(size) and size > 0 for size in shape):
        raise ValueError(f"shape must be a list of positive sizes ((D,) or (C, H, W)), got "
                         f"{shape!r}")
    # about six float32 copies of the inputs: noise, class means, the squashed inputs, then
    # the pool's concatenation and the split's views copied into training batches
    needed = 6 * 4 * (n_train + n_test) * math.prod(shape)
    if needed > (available := physical_memory_bytes()):
        raise ValueError(f"{n_train + n_test:,} samples of shape {tuple(shape)} need about "
                         f"{needed / 2**30:,.1f} GiB to generate, this machine has "
                         f"{available / 2**30:,.1f} GiB; lower n_train, n_test or shape")


@DATASETS.register("synthetic", check=check_synthetic)
def load_synthetic(*, data_dir: Path | None = None, n_train: int = 400, n_test: int = 100,
                   num_classes: int = 4, shape: tuple[int, ...] = (1, 8, 8),
                   separation: float = 0.6, seed: int = 0) -> DataSplits:
    """Class-dependent Gaussian means plus noise, squashed to [0, 1]; ``shape`` may be a
    feature vector ``(D,)`` or an image ``(C, H, W)``."""
    reject_data_dir("synthetic", data_dir, "is generated")
    check_synthetic(n_train=n_train, n_test=n_test, num_classes=num_classes, shape=shape)
    generator = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    means = torch.randn((num_classes, *shape), generator=generator) * separation

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(num_classes, (n,), generator=generator)
        x = torch.sigmoid(means[y] + torch.randn((n, *shape), generator=generator))
        return x.float(), y.long()

    x_train, y_train = draw(n_train)
    x_test, y_test = draw(n_test)
    return DataSplits(x_train, y_train, x_test, y_test, num_classes=num_classes,
                      class_names=[f"class{c}" for c in range(num_classes)])
