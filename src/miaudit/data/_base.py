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
    #: text data (miaudit.data.text): x are (N, L) int64 token ids, these their texts
    #: (train, then test)
    texts: list[str] | None = None

    def __post_init__(self) -> None:
        for name in ("x_train", "x_test"):
            tensor = getattr(self, name)
            tokens = self.texts is not None and tensor.dtype == torch.int64 and tensor.dim() == 2
            if tensor.dtype != torch.float32 and not tokens:
                raise DataError(f"{name} must be float32, got {tensor.dtype}")
        if self.texts is not None and len(self.texts) != len(self.x_train) + len(self.x_test):
            raise DataError(f"{len(self.texts)} texts for {len(self.x_train) + len(self.x_test)} "
                            "samples")
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
    texts: list[str] | None = None  # text data: the text of each sample

    def __len__(self) -> int:
        return len(self.y)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    @property
    def is_image(self) -> bool:
        return self.x.dim() == 4

    @property
    def is_text(self) -> bool:
        return self.texts is not None


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
    texts = None if splits.texts is None else {
        "all": splits.texts, "train": splits.texts[: len(splits.x_train)],
        "test": splits.texts[len(splits.x_train):]}[which]
    if size is not None:
        if size > len(y):
            raise DataError(f"pool_size {size} exceeds the {len(y)} samples of pool {which!r}")
        chosen = np.sort(np.random.default_rng(seed).permutation(len(y))[:size])
        index = torch.from_numpy(chosen)
        x, y = x[index], y[index]
        texts = None if texts is None else [texts[i] for i in chosen]
    return Pool(x=x.contiguous(), y=y.long(), num_classes=splits.num_classes,
                class_names=list(splits.class_names), texts=texts)
