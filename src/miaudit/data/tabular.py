"""The user's own tabular or array data: a CSV file, or ``.npy`` / ``.npz`` arrays.

Purchase-100, Texas-100 and Location-30 (Shokri et al. 2017, "Membership inference attacks
against machine learning models", Sec. V-A) are distributed as such files: one row per record,
a class label and binary features. Any feature matrix with labels loads the same way:

- CSV (any delimiter; quoted cells; plain, ``.gz``, or one member of a tarball): the label is
  one column (``label_column``, a 0-based index or a header name; default the first), every
  other column is a numeric feature; or every column is a feature and the labels are in
  ``labels_path`` (Texas-100's ``feats`` and ``labels`` files). A header row is detected
  when its feature cells are not numbers (``has_header="auto"``).
- ``.npy``: an (N, ...) numeric feature array; the labels come from ``labels_path`` (an
  ``.npy`` or a text file, one label per line) or from column ``label_column`` of a 2-D array.
- ``.npz``: arrays ``x_key`` (default ``x``) and ``y_key`` (default ``y``).

Labels may be integers or names; their sorted distinct values become classes 0..K-1 and the
values themselves the class names (Location-30's labels 1..30 become classes 0..29 named
"1".."30"). The test part is ``test_path`` (same layout) or a seeded ``test_fraction`` of the
rows. Parsed CSV files are cached (see :mod:`miaudit.data.cache`); arrays load directly.
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from miaudit._runtime.io import path_problem
from miaudit.data._base import DataError, DataSplits
from miaudit.data.cache import as_path, cached
from miaudit.data.tablefiles import (
    CsvLayout,
    check_features,
    load_array,
    parse_csv,
    read_labels,
    read_source,
)
from miaudit.registry import DATASETS

SCALES = ("auto", "minmax", "none")
ARRAY_SUFFIXES = (".npy", ".npz")


# -- labels, scaling, splitting ----------------------------------------------------------------

def class_indices(*parts: np.ndarray, where: str) -> tuple[list[np.ndarray], list[str]]:
    """Raw label arrays -> int64 class indices (one array per part) and class names: the
    sorted distinct values, numerically when every label is an integer."""
    raw = np.concatenate([np.asarray(p).reshape(-1) for p in parts])
    if raw.dtype.kind in "biuf" or all(_is_integer(v) for v in np.unique(raw)):
        numbers = raw.astype(np.float64)
        bad = ~np.isfinite(numbers) | (numbers != np.round(numbers))
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            raise DataError(f"{where}: numeric labels must be integers; {int(bad.sum())} are "
                            f"not, the first at row {first} ({raw[first].item()!r})")
        raw = numbers.astype(np.int64)
    elif raw.dtype.kind not in "US":
        raise DataError(f"{where}: labels must be integers or names, got dtype {raw.dtype}")
    elif (np.char.str_len(raw) == 0).any():
        first = int(np.flatnonzero(np.char.str_len(raw) == 0)[0])
        raise DataError(f"{where}: the label of row {first} is empty")
    values, indices = np.unique(raw, return_inverse=True)
    if len(values) < 2:
        raise DataError(f"{where}: labels take {len(values)} distinct value(s), a classifier "
                        "needs at least 2 classes")
    bounds = np.cumsum([0] + [np.asarray(p).size for p in parts])
    return ([indices[a:b].astype(np.int64) for a, b in zip(bounds[:-1], bounds[1:])],
            [str(v) for v in values])


def _is_integer(value: Any) -> bool:
    try:
        return float(value) == int(float(value))
    except (ValueError, OverflowError):
        return False


def minmax_scale(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature min-max scaling to [0, 1] fitted on the train part (test values outside
    the train range are clipped); a constant feature becomes 0."""
    low, high = x_train.min(axis=0), x_train.max(axis=0)
    span = np.where(high > low, high - low, 1).astype(np.float32)
    scale = [np.clip((x - low) / span, 0.0, 1.0).astype(np.float32) for x in (x_train, x_test)]
    return scale[0], scale[1]


def seeded_split(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) row indices: the first round(test_fraction * n) rows of a seeded
    permutation form the test part (the rule of the location30 loader)."""
    if not isinstance(test_fraction, (int, float)) or not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    order = np.random.default_rng(seed).permutation(n)
    n_test = int(round(test_fraction * n))
    if n_test == 0 or n_test == n:
        raise DataError(f"test_fraction {test_fraction} of {n} rows leaves an empty part")
    return order[n_test:], order[:n_test]


# -- the loader --------------------------------------------------------------------------------

def _resolve(value: Any, data_dir: Path | None, name: str) -> Path | None:
    path = as_path(value, name)
    if path is not None and data_dir is not None and not path.is_absolute():
        path = data_dir / path
    return path


def _format(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    return suffixes[-1][1:] if suffixes and suffixes[-1] in ARRAY_SUFFIXES else "csv"


def _read_part(path: Path, member: str | None, labels_path: Path | None,
               layout: CsvLayout, label_given: bool, x_key: str,
               y_key: str) -> tuple[np.ndarray, np.ndarray]:
    """(float32 features, raw labels) of one file."""
    where = f"{path}:{member}" if member else str(path)
    raw = read_source(path, member)
    kind = _format(path if member is None else Path(member))
    if kind == "csv":  # with labels_path (Texas-100's feats + labels), no label column
        columns = layout if labels_path is None else replace(layout, label_column=None)
        x, y = parse_csv(raw, where, columns)
    else:
        x = load_array(raw, where, x_key if kind == "npz" else None)
    if labels_path is not None:
        y = read_labels(labels_path)
        where = f"{where} with labels {labels_path}"
    elif kind == "npz" and not label_given and y_key in _npz_names(raw):
        y = load_array(raw, where, y_key)
    elif kind != "csv":
        x, y = _split_label_column(x, layout.label_column, where)
    x = check_features(x, where)
    if y.ndim != 1 or len(y) != len(x):
        raise DataError(f"{where}: {len(x)} feature rows but labels of shape {y.shape}")
    return x, y


def _npz_names(raw: bytes) -> list[str]:
    with np.load(io.BytesIO(raw), allow_pickle=False) as archive:
        return list(archive.files)


def _split_label_column(x: np.ndarray, column: int | str, where: str
                        ) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(column, str) or isinstance(column, bool):
        raise DataError(f"{where}: arrays have no column names; give label_column as an "
                        "index or the labels in labels_path")
    if x.ndim != 2 or not -x.shape[1] <= column < x.shape[1]:
        raise DataError(f"{where}: label column {column} is not a column of an array of "
                        f"shape {x.shape}; give labels_path (or y_key for .npz)")
    column %= x.shape[1]
    return np.delete(x, column, axis=1), x[:, column]


def check_tabular(*, path: str | Path | None, scale: str, label_column: int | str | None,
                  labels_path: str | Path | None, test_path: str | Path | None,
                  test_fraction: float | None, **unchecked: object) -> None:
    """The tabular data set's option values (the config checks them before reading a file)."""
    if path is None:
        raise ValueError("the tabular data set needs the option path (a CSV, .npy or .npz file)")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    if labels_path is not None and label_column is not None:
        raise ValueError("give the labels either as label_column or in labels_path, not both")
    if test_path is not None and test_fraction is not None:
        raise ValueError("give either test_path or test_fraction, not both")


@DATASETS.register("tabular", check=check_tabular)
def load_tabular(*, data_dir: str | Path | None = None, path: str | Path | None = None,
                 label_column: int | str | None = None, labels_path: str | Path | None = None,
                 has_header: bool | str = "auto", delimiter: str | None = None,
                 member: str | None = None, test_path: str | Path | None = None,
                 test_labels_path: str | Path | None = None,
                 test_fraction: float | None = None, seed: int = 0, scale: str = "auto",
                 x_key: str = "x", y_key: str = "y", cache: bool = True) -> DataSplits:
    """Your own feature matrix: a CSV, .npy or .npz file with a label column or labels.

    ``path`` (relative paths are under ``data_dir``), ``label_column`` (index or header name;
    default 0), ``labels_path``, ``has_header`` (true, false, "auto"), ``delimiter`` (default
    "," or tab for .tsv), ``member`` (file inside a tarball), ``test_path`` /
    ``test_labels_path`` or ``test_fraction`` (default 0.2, split with ``seed``), ``scale``
    ("auto": min-max to [0, 1] only when a value lies outside; "minmax"; "none"), ``x_key`` /
    ``y_key`` (.npz array names), ``cache`` (reuse parsed CSV files).
    """
    root = as_path(data_dir)
    check_tabular(path=path, scale=scale, label_column=label_column, labels_path=labels_path,
                  test_path=test_path, test_fraction=test_fraction)
    source = _resolve(path, root, "path")
    labels, test, test_labels = (_resolve(p, root, n) for p, n in (
        (labels_path, "labels_path"), (test_path, "test_path"),
        (test_labels_path, "test_labels_path")))
    if delimiter is None:
        delimiter = "\t" if source.suffix.lower() == ".tsv" else ","
    layout = CsvLayout(0 if label_column is None else label_column, has_header, delimiter)

    def build() -> tuple[dict[str, np.ndarray], dict[str, str]]:
        x, y = _read_part(source, member, labels, layout, label_column is not None, x_key, y_key)
        arrays = {"x": x}
        if test is None:
            (arrays["y"],), names = class_indices(y, where=str(source))
        else:
            x_test, y_test = _read_part(test, None, test_labels, layout,
                                        label_column is not None, x_key, y_key)
            if x_test.shape[1:] != x.shape[1:]:
                raise DataError(f"{test} has features of shape {x_test.shape[1:]}, {source} "
                                f"of shape {x.shape[1:]}")
            (arrays["y"], arrays["y_test"]), names = class_indices(y, y_test, where=str(source))
            arrays["x_test"] = x_test
        return {k: _compact(v) for k, v in arrays.items()}, {"class_names": json.dumps(names)}

    files = [p for p in (source, labels, test, test_labels) if p is not None]
    for file in files:
        if not file.is_file():
            raise DataError(f"data file {path_problem(file)}")
    options = {"member": member, "label_column": label_column, "has_header": has_header,
               "delimiter": delimiter, "x_key": x_key, "y_key": y_key,
               "files": [str(f.resolve()) for f in files]}
    arrays, meta = cached("tabular", root=source, files=files, options=options, build=build,
                          enabled=cache and _format(source) == "csv")
    return _splits(arrays, json.loads(meta["class_names"]), test_fraction, seed, scale)


def _compact(array: np.ndarray) -> np.ndarray:
    """Features that are all integers 0..255 (binary Purchase/Texas/Location features) as
    uint8: a quarter of the cache entry, converted back to float32 exactly on use."""
    if array.dtype != np.float32 or not array.size or array.min() < 0 or array.max() > 255:
        return array
    small = array.astype(np.uint8)
    return small if np.array_equal(small, array) else array


def _splits(arrays: dict[str, np.ndarray], names: list[str], test_fraction: float | None,
            seed: int, scale: str) -> DataSplits:
    x, y = arrays["x"].astype(np.float32, copy=False), arrays["y"]
    if "x_test" in arrays:
        x_train, y_train = x, y
        x_test, y_test = arrays["x_test"].astype(np.float32, copy=False), arrays["y_test"]
    else:
        train, test = seeded_split(len(y), 0.2 if test_fraction is None else test_fraction,
                                   seed)
        x_train, y_train, x_test, y_test = x[train], y[train], x[test], y[test]
    outside = any(a.size and (a.min() < 0 or a.max() > 1) for a in (x_train, x_test))
    if scale == "minmax" or (scale == "auto" and outside):
        x_train, x_test = minmax_scale(x_train, x_test)

    def tensor(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a))

    return DataSplits(tensor(x_train).float(), tensor(y_train).long(), tensor(x_test).float(),
                      tensor(y_test).long(), num_classes=len(names), class_names=names)
