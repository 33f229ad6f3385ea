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

import csv
import gzip
import io
import json
import tarfile
import warnings
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from miaudit.data._base import DataError, DataSplits
from miaudit.data.cache import as_path, cached
from miaudit.io import path_problem
from miaudit.registry import DATASETS

SCALES = ("auto", "minmax", "none")
ARRAY_SUFFIXES = (".npy", ".npz")


@dataclass(frozen=True)
class CsvLayout:
    """How the rows of a CSV file are laid out."""

    label_column: int | str | None = 0  # None: every column is a feature (labels elsewhere)
    has_header: bool | str = "auto"  # True | False | "auto"
    delimiter: str = ","


# -- reading bytes -----------------------------------------------------------------------------

def read_source(path: Path, member: str | None = None) -> bytes:
    """The bytes of ``path``: a plain file, a gzip file, or ``member`` of a tarball (the only
    file of the tarball when ``member`` is not given)."""
    if not path.is_file():
        raise DataError(f"data file {path_problem(path)}")
    try:
        if tarfile.is_tarfile(path):
            return _tar_member(path, member)
        if member is not None:
            raise DataError(f"member={member!r} was given but {path} is not a tarball")
        with open(path, "rb") as stream:
            compressed = stream.read(2) == b"\x1f\x8b"
        return _gunzip(path) if compressed else path.read_bytes()
    except (OSError, EOFError, tarfile.TarError, zlib.error, gzip.BadGzipFile) as error:
        raise DataError(f"cannot read {path}: {error}") from error


#: the most bytes a compressed table may expand to (a decompression bomb of a few MB would
#: otherwise take all memory); plain files are read as they are
MAX_DECOMPRESSED_BYTES = 512 * 2**20


def _gunzip(path: Path) -> bytes:
    with gzip.open(path, "rb") as stream:  # streamed: stops one byte past the cap
        data = stream.read(MAX_DECOMPRESSED_BYTES + 1)
    if len(data) > MAX_DECOMPRESSED_BYTES:
        raise DataError(_too_large(path))
    return data


def _too_large(path: Path) -> str:
    return (f"{path} expands to more than {MAX_DECOMPRESSED_BYTES // 2**20} MiB when "
            "decompressed (a decompression bomb, or a very large table); decompress it "
            "yourself and pass the plain file")


def _tar_member(path: Path, member: str | None) -> bytes:
    with tarfile.open(path, "r:*") as tar:
        files = [m for m in tar.getmembers() if m.isfile()]
        names = [m.name for m in files]
        if member is None:
            if len(files) != 1:
                raise DataError(f"{path} holds {len(files)} files {names[:10]}; name one "
                                "with the option member")
            chosen = files[0]
        else:
            match = [m for m in files if m.name == member or Path(m.name).name == member]
            if len(match) != 1:
                raise DataError(f"{path} holds {len(match)} files named {member!r} "
                                f"(files: {names[:10]})")
            chosen = match[0]
        if chosen.size > MAX_DECOMPRESSED_BYTES:
            raise DataError(_too_large(path))
        return tar.extractfile(chosen).read()


# -- CSV ---------------------------------------------------------------------------------------

def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def parse_csv(raw: bytes, where: str,
              layout: CsvLayout) -> tuple[np.ndarray, np.ndarray | None]:
    """CSV bytes -> (N x D float32 features, N raw labels or None without a label column),
    every problem a DataError naming ``where`` and the line and column."""
    try:
        text = raw.decode("utf-8-sig").lstrip("\r\n")
    except UnicodeDecodeError as error:
        raise DataError(f"{where} is not a UTF-8 text file: {error}") from error
    first = next(csv.reader(io.StringIO(text), delimiter=layout.delimiter), None)
    if not first:
        raise DataError(f"{where} is empty")
    header = _has_header(first, layout, where)
    label = (None if layout.label_column is None
             else _label_index(first, header, layout.label_column, where))
    names = first if header else None
    features = [c for c in range(len(first)) if c != label]
    if not features:
        raise DataError(f"{where} has only the label column, no features")
    options = dict(delimiter=layout.delimiter, quotechar='"', comments=None, ndmin=2,
                   skiprows=int(header))
    try:
        # one C-speed pass when every cell is a number (Purchase-100: 197,324 x 601 cells)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "no data": reported below instead
            table = np.loadtxt(io.StringIO(text), dtype=np.float32, **options)
    except ValueError as error:
        _diagnose(text, where, layout.delimiter, header, label, names, check_labels=False)
        if label is None:
            raise DataError(f"{where}: malformed CSV: {error}") from error
        # the features are sound, so the label column holds names: read the two parts apart
        try:
            x = np.loadtxt(io.StringIO(text), dtype=np.float32, usecols=features, **options)
            y = np.loadtxt(io.StringIO(text), dtype=str, usecols=[label], **options)[:, 0]
        except ValueError as error:
            raise DataError(f"{where}: malformed CSV: {error}") from error
        y = np.char.strip(y)
    else:
        if len(table) == 0:
            raise DataError(f"{where} has no data rows")
        x, y = table[:, features], None if label is None else table[:, label]
    if not np.isfinite(x).all():
        _diagnose(text, where, layout.delimiter, header, label, names, check_labels=True)
        raise DataError(f"{where}: some features are NaN or infinite")
    return np.ascontiguousarray(x), y


def _has_header(first: list[str], layout: CsvLayout, where: str) -> bool:
    if layout.has_header not in (True, False, "auto"):
        raise ValueError(f"has_header must be true, false or 'auto', got {layout.has_header!r}")
    if isinstance(layout.label_column, str):
        if layout.has_header is False:
            raise DataError(f"{where}: label_column {layout.label_column!r} is a name, but "
                            "has_header is false")
        return True
    if layout.has_header != "auto":
        return bool(layout.has_header)
    label = None if layout.label_column is None else layout.label_column % len(first)
    # a header when a feature cell of the first row is not a number (labels may be names)
    return any(not _is_number(cell) for c, cell in enumerate(first) if c != label)


def _label_index(first: list[str], header: bool, column: int | str, where: str) -> int:
    if isinstance(column, bool) or not isinstance(column, (int, str)):
        raise ValueError(f"label_column must be a column index or name, got {column!r}")
    if isinstance(column, str):
        names = [cell.strip() for cell in first]
        if column not in names:
            raise DataError(f"{where}: no column named {column!r} (columns: {names[:20]})")
        return names.index(column)
    if not -len(first) <= column < len(first):
        raise DataError(f"{where}: label_column {column} is out of range for rows of "
                        f"{len(first)} columns")
    return column % len(first)


def _diagnose(text: str, where: str, delimiter: str, header: bool, label: int | None,
              names: list[str] | None, check_labels: bool) -> None:
    """Find the first ragged row or bad feature cell and raise a DataError naming its line
    and column; return quietly when every feature cell is a finite number. Only run after
    the fast parse failed, so its Python speed does not matter."""
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    width = None
    for row in reader:
        if not row:
            continue  # blank lines, which the fast parse skips too
        width = width or len(row)
        if len(row) != width:
            raise DataError(f"{where}, line {reader.line_num}: {len(row)} columns, but the "
                            f"first row has {width} (ragged rows)")
        if header and reader.line_num == 1:
            continue
        for column, cell in enumerate(row):
            if column == label and not check_labels:
                continue
            what = _bad_cell(cell)
            if what:
                name = f" ({names[column].strip()!r})" if names else ""
                raise DataError(f"{where}, line {reader.line_num}, column {column + 1}{name}: "
                                f"{what}; every feature must be a finite number")


def _bad_cell(cell: str) -> str | None:
    if not cell.strip():
        return "empty cell (a missing value)"
    try:
        value = float(cell)
    except ValueError:
        return f"non-numeric value {cell.strip()[:40]!r}"
    return None if np.isfinite(value) else f"value {cell.strip()!r} is not finite"


# -- arrays ------------------------------------------------------------------------------------

def load_array(raw: bytes, where: str, key: str | None = None) -> np.ndarray:
    """One array of an ``.npy`` file, or array ``key`` of an ``.npz`` file, never unpickled."""
    if not raw.startswith((b"\x93NUMPY", b"PK\x03\x04")):  # else np.load calls it a pickle
        raise DataError(f"{where} is not an .npy/.npz file (no NumPy header)")
    try:
        loaded = np.load(io.BytesIO(raw), allow_pickle=False)
    except ValueError as error:
        if "allow_pickle" in str(error):
            raise DataError(f"{where} holds Python objects (a pickled array), which are not "
                            "loaded for safety; save numbers or strings, e.g. "
                            "np.save(path, np.asarray(x, dtype=np.float32))") from error
        raise DataError(f"{where} is not a readable .npy/.npz file: {error}") from error
    except (OSError, EOFError) as error:
        raise DataError(f"{where} is not a readable .npy/.npz file: {error}") from error
    if isinstance(loaded, np.ndarray):
        return loaded
    with loaded:
        if key not in loaded.files:
            raise DataError(f"{where} has no array {key!r} (arrays: {loaded.files}); set "
                            "x_key / y_key")
        try:
            return loaded[key]
        except ValueError as error:
            raise DataError(f"{where}: array {key!r} holds Python objects (a pickled "
                            "array), which are not loaded for safety") from error


def read_labels(path: Path) -> np.ndarray:
    """Labels from an ``.npy`` file or a text file with one label per line."""
    raw = read_source(path)
    if path.suffix == ".npy":
        return load_array(raw, str(path))
    lines = [line.strip().strip('"') for line in raw.decode("utf-8-sig").splitlines()]
    return np.array([line for line in lines if line])


def check_features(x: np.ndarray, where: str) -> np.ndarray:
    """Numeric (N, ...) features with no NaN or infinity, as float32."""
    if x.dtype.kind not in "biuf":
        raise DataError(f"{where}: features must be numbers, got dtype {x.dtype}")
    if x.ndim < 2:
        raise DataError(f"{where}: features must be (samples, features), got shape {x.shape}")
    x = x.astype(np.float32, copy=False)
    bad = ~np.isfinite(x)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise DataError(f"{where}: {int(bad.sum())} features are NaN or infinite, the first "
                        f"at index {first}")
    return x


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


@DATASETS.register("tabular")
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
    source = _resolve(path, root, "path")
    if source is None:
        raise ValueError("the tabular data set needs the option path (a CSV, .npy or .npz file)")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    labels, test, test_labels = (_resolve(p, root, n) for p, n in (
        (labels_path, "labels_path"), (test_path, "test_path"),
        (test_labels_path, "test_labels_path")))
    if labels is not None and label_column is not None:
        raise ValueError("give the labels either as label_column or in labels_path, not both")
    if test is not None and test_fraction is not None:
        raise ValueError("give either test_path or test_fraction, not both")
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
