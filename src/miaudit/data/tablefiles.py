"""Reading the files of a tabular data set: the bytes of a plain, gzip or tarball file, a CSV
parse that names the line and column of every problem, and ``.npy`` / ``.npz`` arrays loaded
without unpickling. :mod:`miaudit.data.tabular` turns what these return into data splits.
"""

from __future__ import annotations

import csv
import gzip
import io
import tarfile
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from miaudit._runtime.io import MAX_DECOMPRESSED_BYTES as MAX_UNPACKED
from miaudit._runtime.io import array_file_problem, path_problem
from miaudit.data._base import DataError


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
MAX_DECOMPRESSED_BYTES = MAX_UNPACKED  # the same cap as zip/npz members (miaudit._runtime.io)


def _gunzip(path: Path) -> bytes:
    with gzip.open(path, "rb") as stream:  # streamed: stops one byte past the cap
        data = stream.read(MAX_DECOMPRESSED_BYTES + 1)
    if len(data) > MAX_DECOMPRESSED_BYTES:
        raise DataError(too_large(path))
    return data


def too_large(path: Path) -> str:
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
            raise DataError(too_large(path))
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
    if (problem := array_file_problem(raw, where)) is not None:
        raise DataError(problem)
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
