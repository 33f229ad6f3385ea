"""scikit-learn's bundled 8x8 handwritten digits (1,797 images, 10 classes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from miaudit.data._base import DataSplits, reject_data_dir
from miaudit.registry import DATASETS


@DATASETS.register("digits")
def load_digits(*, data_dir: Path | None = None, test_fraction: float = 0.2,
                seed: int = 0) -> DataSplits:
    """scikit-learn digits, 1x8x8 grey images in [0, 1]; no download needed."""
    reject_data_dir("digits", data_dir, "is bundled with scikit-learn")
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)) or \
            not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be a number in (0, 1) (the share of the 1,797 "
                         f"images held out as test data), got {test_fraction!r}")
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    x = torch.from_numpy((bunch.images / 16.0).astype(np.float32)).unsqueeze(1)
    y = torch.from_numpy(bunch.target.astype(np.int64))
    order = torch.from_numpy(np.random.default_rng(seed).permutation(len(y)))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    return DataSplits(x[train], y[train], x[test], y[test], num_classes=10,
                      class_names=[str(d) for d in range(10)])
