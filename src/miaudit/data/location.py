"""Location-30 (Shokri et al. 2017, "Membership inference attacks against machine learning
models"): Foursquare check-ins in Bangkok, 446 binary location features, 30 classes.

The distributed ``dataset_location.tgz`` holds one CSV ``bangkok``: a quoted class label 1..30,
then the 446 features. The data set has no official train/test split, so a seeded random split
of ``test_fraction`` is made here.
"""

from __future__ import annotations

import io
import tarfile
import zlib
from pathlib import Path

import numpy as np
import torch

from miaudit.data._base import DataError, DataSplits
from miaudit.data.cache import cached, resolve_data_dir, to_float
from miaudit.data.tablefiles import MAX_DECOMPRESSED_BYTES, too_large
from miaudit.registry import DATASETS

TARBALL = "dataset_location.tgz"
CSV_NAME = "bangkok"
NUM_FEATURES = 446
NUM_CLASSES = 30


def _locate(root: Path) -> Path:
    candidates = [root / TARBALL, root / "location30" / TARBALL, root / CSV_NAME,
                  root / "location30" / CSV_NAME]
    for path in candidates:
        if path.is_file():
            return path
    raise DataError(f"location30 not found: expected {TARBALL} (or the extracted CSV "
                    f"{CSV_NAME}) in {root} or {root / 'location30'}")


def _read_csv_bytes(path: Path) -> bytes:
    if path.name == CSV_NAME:
        return path.read_bytes()
    try:
        with tarfile.open(path, "r:*") as tar:
            members = [m for m in tar.getmembers() if m.isfile()]
            match = [m for m in members if Path(m.name).name == CSV_NAME]
            if not match:
                raise DataError(f"{path} holds no file named {CSV_NAME!r} "
                                f"(found {[m.name for m in members][:5]})")
            if match[0].size > MAX_DECOMPRESSED_BYTES:  # the header bounds the read below
                raise DataError(too_large(path))
            return tar.extractfile(match[0]).read()
    except (tarfile.TarError, OSError, EOFError, zlib.error) as error:
        raise DataError(f"{path} is not a readable location30 tarball: {error}") from error


def parse_location_csv(raw: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    """CSV rows ``"label",f1,...,f446`` -> (N x 446 uint8 features, int64 labels 0..29)."""
    try:
        table = np.loadtxt(io.StringIO(raw.decode("ascii").replace('"', "")), delimiter=",",
                           dtype=np.int64, ndmin=2)
    except (ValueError, UnicodeDecodeError) as error:
        raise DataError(f"{where}: malformed location30 CSV: {error}") from error
    if table.shape[1] != NUM_FEATURES + 1 or len(table) == 0:
        raise DataError(f"{where}: expected rows of a label and {NUM_FEATURES} features, "
                        f"got a {table.shape[0]} x {table.shape[1]} table")
    labels, features = table[:, 0], table[:, 1:]
    if labels.min() < 1 or labels.max() > NUM_CLASSES:
        raise DataError(f"{where}: labels should be 1..{NUM_CLASSES}, found "
                        f"{labels.min()}..{labels.max()}")
    if not np.isin(features, (0, 1)).all():
        raise DataError(f"{where}: features should be binary (0 or 1)")
    return features.astype(np.uint8), labels - 1


@DATASETS.register("location30")
def load_location30(*, data_dir: str | Path | None = None, test_fraction: float = 0.2,
                    seed: int = 0, cache: bool = True) -> DataSplits:
    """Location-30 (Shokri et al. 2017), 446 binary features, 30 classes; seeded split.

    ``data_dir`` holds dataset_location.tgz (or location30/dataset_location.tgz); default
    $MIAUDIT_DATA_DIR, else ~/.cache/miaudit/data. ``test_fraction`` of the 5,010 rows form the
    test part, drawn with ``seed``.
    """
    if not isinstance(test_fraction, (int, float)) or not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    root = resolve_data_dir(data_dir)
    path = _locate(root)

    def build() -> tuple[dict[str, np.ndarray], dict[str, str]]:
        x, y = parse_location_csv(_read_csv_bytes(path), str(path))
        return {"x": x, "y": y}, {}

    arrays, _ = cached("location30", root=path, files=[path], options={}, build=build,
                       enabled=cache)
    x, y = to_float(arrays["x"], scale=1), torch.from_numpy(arrays["y"]).long()
    order = torch.from_numpy(np.random.default_rng(seed).permutation(len(y)))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    return DataSplits(x[train], y[train], x[test], y[test], num_classes=NUM_CLASSES,
                      class_names=[str(c) for c in range(1, NUM_CLASSES + 1)])
