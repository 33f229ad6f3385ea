"""Data sets: each module registers a loader in :data:`miaudit.registry.DATASETS`.

A loader is ``loader(*, data_dir: Path | None, **options) -> DataSplits`` returning float32
tensors in [0, 1] (images as N x C x H x W, tabular data as N x D) and int64 labels.
"""

from miaudit.data._base import DataError, DataSplits, Pool, make_pool

__all__ = ["DataError", "DataSplits", "Pool", "make_pool"]
