"""Containers shared by all data-set loaders, and the audit pool."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from miaudit.errors import DataError


def reject_data_dir(name: str, data_dir: object, reason: str) -> None:
    """An error, not a warning, for a data_dir that a data set never reads: the user meant
    to audit the data in that folder, and an audit of other data with a warning scrolled
    past would be a wrong result that looks right."""
    if data_dir is not None:
        raise ValueError(f"it {reason} and reads no data_dir (got {data_dir}); "
                         "remove data_dir, or use imagefolder / tabular for your own files")


@dataclass
class DataSplits:
    """A data set's official train and test parts, as float32 tensors in [0, 1]."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    class_names: list[str]

    def __post_init__(self) -> None:
        for name in ("x_train", "x_test"):
            if getattr(self, name).dtype != torch.float32:
                raise DataError(f"{name} must be float32, got {getattr(self, name).dtype}")
        for xs, ys in ((self.x_train, self.y_train), (self.x_test, self.y_test)):
            if len(xs) != len(ys):
                raise DataError(f"{len(xs)} inputs but {len(ys)} labels")


@dataclass
class Pool:
    """The audit pool: the samples whose membership is planned and attacked."""

    x: torch.Tensor
    y: torch.Tensor
    num_classes: int
    class_names: list[str]

    def __len__(self) -> int:
        return len(self.y)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    @property
    def is_image(self) -> bool:
        return self.x.dim() == 4


def make_pool(splits: DataSplits, which: str, size: int | None, seed: int) -> Pool:
    """Build the audit pool from ``which`` ("all" = train+test, as the seeds do, "train",
    "test"), optionally a seeded random subset of ``size`` samples."""
    parts = {
        "all": ((splits.x_train, splits.x_test), (splits.y_train, splits.y_test)),
        "train": ((splits.x_train,), (splits.y_train,)),
        "test": ((splits.x_test,), (splits.y_test,)),
    }
    if which not in parts:
        raise ValueError(f"pool must be one of {sorted(parts)}, got {which!r}")
    xs, ys = parts[which]
    x, y = torch.cat(xs), torch.cat(ys)
    if size is not None:
        if size > len(y):
            raise ValueError(f"pool_size {size} exceeds the {len(y)} samples of pool {which!r}")
        chosen = np.sort(np.random.default_rng(seed).permutation(len(y))[:size])
        index = torch.from_numpy(chosen)
        x, y = x[index], y[index]
    return Pool(x=x.contiguous(), y=y.long(), num_classes=splits.num_classes,
                class_names=list(splits.class_names))
