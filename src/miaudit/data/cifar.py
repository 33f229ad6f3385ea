"""CIFAR-10 and CIFAR-100 (Krizhevsky 2009) from the official python-pickle archives.

Sources searched in ``data_dir``, in order: the extracted folder (``cifar-10-batches-py/`` or
``cifar-100-python/``, or ``data_dir`` itself being that folder), the official tarball (read in
place, never extracted), and for CIFAR-10 an image-folder copy (``train/<class>/*``,
``test/<class>/*``, also under ``cifar10-jpeg/`` or ``cifar10/``) labelled in the official class
order. With ``download=True`` and none of these present, the tarball is fetched from the
official site and its MD5 checked before use. Decoded arrays are cached (see ``cache.py``).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import pickle
import tarfile
import urllib.request
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from miaudit._runtime.io import atomic_write
from miaudit.data._base import DataError, DataSplits
from miaudit.data.cache import cached, resolve_data_dir
from miaudit.data.imagefolder import check_limit, read_image_folder, splits_from_arrays
from miaudit.registry import DATASETS

log = logging.getLogger(__name__)

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck")  # the official label order (batches.meta), not alphabetical


@dataclass(frozen=True)
class Archive:
    """Layout of one official CIFAR python archive."""

    name: str
    folder: str
    tarball: str
    url: str
    md5: str
    train: tuple[str, ...]
    test: tuple[str, ...]
    meta: str
    label_keys: dict[str, str]  # label kind -> key in a batch
    name_keys: dict[str, str]  # label kind -> key of the class names in meta


CIFAR10 = Archive(
    name="cifar10", folder="cifar-10-batches-py", tarball="cifar-10-python.tar.gz",
    url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    md5="c58f30108f718f92721af3b95e74349a",
    train=tuple(f"data_batch_{i}" for i in range(1, 6)), test=("test_batch",),
    meta="batches.meta", label_keys={"fine": "labels"}, name_keys={"fine": "label_names"})
CIFAR100 = Archive(
    name="cifar100", folder="cifar-100-python", tarball="cifar-100-python.tar.gz",
    url="https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
    md5="eb9058c3a382ffc7106e4002c42a8d85", train=("train",), test=("test",), meta="meta",
    label_keys={"fine": "fine_labels", "coarse": "coarse_labels"},
    name_keys={"fine": "fine_label_names", "coarse": "coarse_label_names"})


# --- safe unpickling -----------------------------------------------------------------------------
# The official archives exist only as pickles. pickle can call any importable function, so a
# tampered file could run code; but these files hold nothing beyond dicts, lists, strings and
# numpy arrays. We therefore allow exactly the globals needed to rebuild a plain numpy array
# and refuse every other one (and object dtypes, whose elements would be arbitrary objects).

#: the largest array a CIFAR pickle may declare by shape (the official ones hold at most
#: 50000 x 3072 bytes = 147 MiB)
MAX_PICKLED_ARRAY_BYTES = 256 * 2**20


def _numpy_globals() -> dict[tuple[str, str], Callable[..., Any]]:
    try:
        from numpy._core import multiarray, numeric  # numpy >= 2
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray, numeric  # type: ignore[no-redef]

    def plain_dtype(*args: Any) -> np.dtype:
        dtype = np.dtype(*args)
        if dtype.hasobject:
            raise pickle.UnpicklingError(f"refusing object dtype {dtype}")
        return dtype

    def latin1_bytes(text: str, encoding: str = "latin1") -> bytes:
        # how Python 3 writes bytes at protocol 2; other codecs (zlib, ...) have no business here
        if encoding not in ("latin1", "latin-1"):
            raise pickle.UnpicklingError(f"refusing encoding {encoding!r}")
        return text.encode("latin1")

    def check_size(shape: Any, dtype: Any) -> None:
        # an array is only as large as the pickle's own bytes, except one built from a shape
        # alone: a 127-byte file could otherwise ask for any amount of memory
        items = int(np.prod(np.asarray(shape, dtype=np.int64)))
        if items < 0 or items * np.dtype(dtype).itemsize > MAX_PICKLED_ARRAY_BYTES:
            raise pickle.UnpicklingError(f"refusing an array of shape {shape}: more than "
                                         f"{MAX_PICKLED_ARRAY_BYTES // 2**20} MiB")

    def bounded_ndarray(shape: Any, dtype: Any = float, *args: Any, **kwargs: Any) -> Any:
        check_size(shape, dtype)
        return np.ndarray(shape, plain_dtype(dtype), *args, **kwargs)

    def bounded_reconstruct(subtype: Any, shape: Any, dtype: Any) -> Any:
        check_size(shape, np.uint8)  # dtype is a type code here; its array is refilled
        return multiarray._reconstruct(np.ndarray, shape, dtype)  # never a subclass

    allowed = {("numpy", "ndarray"): bounded_ndarray, ("numpy", "dtype"): plain_dtype,
               ("_codecs", "encode"): latin1_bytes}
    for package in ("numpy.core", "numpy._core"):  # writers on numpy 1.x and 2.x
        allowed[(f"{package}.multiarray", "_reconstruct")] = bounded_reconstruct
        allowed[(f"{package}.numeric", "_frombuffer")] = numeric._frombuffer  # protocol 5
    return allowed


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that resolves only numpy's array-reconstruction helpers (see above)."""

    _allowed: dict[tuple[str, str], Callable[..., Any]] | None = None

    def find_class(self, module: str, name: str) -> Any:
        if RestrictedUnpickler._allowed is None:
            RestrictedUnpickler._allowed = _numpy_globals()
        try:
            return RestrictedUnpickler._allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load global {module}.{name}") from None


def load_pickle(stream: IO[bytes], where: str) -> dict[str, Any]:
    """One official batch: a dict with str keys. ``latin1`` decodes the Python 2 strings and
    numpy buffers of the official files, as numpy recommends for Python 2 pickles."""
    try:
        content = RestrictedUnpickler(stream, encoding="latin1").load()
    except Exception as error:  # truncation, bad opcodes, refused globals, bad arrays
        raise DataError(f"{where} is not a valid CIFAR pickle: {error}") from error
    if not isinstance(content, dict):
        raise DataError(f"{where} should hold a dict, found {type(content).__name__}")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in content.items()}


# --- checksum-verified download ------------------------------------------------------------------

def md5sum(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as stream:
        while block := stream.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def verify_md5(path: Path, expected: str) -> None:
    """Raise :class:`DataError` unless ``path`` has MD5 ``expected``."""
    actual = md5sum(path)
    if actual != expected:
        raise DataError(f"checksum mismatch for {path}: MD5 {actual}, expected {expected}")


def download_verified(url: str, destination: Path, md5: str) -> Path:
    """Fetch ``url`` to ``destination``; the file appears there only once its MD5 matches."""
    log.warning("downloading %s to %s", url, destination)

    def fetch(temporary: Path) -> None:
        with open(temporary, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
            while block := response.read(1 << 20):
                out.write(block)
        verify_md5(temporary, md5)  # a mismatch raises: the temporary file is removed

    try:
        atomic_write(destination, fetch)
    except OSError as error:
        raise DataError(f"could not download {url} to {destination}: {error}") from error
    return destination


# --- locating and reading the archives -----------------------------------------------------------

def _members(archive: Archive) -> tuple[str, ...]:
    return (*archive.train, *archive.test, archive.meta)


def _locate(archive: Archive, root: Path) -> tuple[str, Path] | None:
    """Which source ``root`` holds: ("folder" | "tarball" | "imagefolder", path)."""
    for folder in (root / archive.folder, root):
        if (folder / archive.train[0]).is_file():
            return "folder", folder
    if (root / archive.tarball).is_file():
        return "tarball", root / archive.tarball
    if archive is CIFAR10:
        for folder in (root, root / "cifar10-jpeg", root / "cifar10"):
            if (folder / "train").is_dir() and (folder / "test").is_dir():
                return "imagefolder", folder
    return None


def _read_folder(folder: Path, archive: Archive) -> dict[str, dict[str, Any]]:
    batches = {}
    for member in _members(archive):
        path = folder / member
        if not path.is_file():
            raise DataError(f"expected the file {path} of the official {archive.name} archive")
        with open(path, "rb") as stream:
            batches[member] = load_pickle(stream, str(path))
    return batches


def _read_tarball(path: Path, archive: Archive) -> dict[str, dict[str, Any]]:
    """Read the batches straight from the tarball (no extraction, so no path traversal)."""
    batches = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in _members(archive):
                name = f"{archive.folder}/{member}"
                try:
                    stream = tar.extractfile(name)
                except KeyError:
                    stream = None
                if stream is None:
                    raise DataError(f"{path} lacks the file {name} of the official "
                                    f"{archive.name} archive")
                batches[member] = load_pickle(io.BytesIO(stream.read()), f"{path}:{name}")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as error:
        raise DataError(f"{path} is not a readable {archive.name} tarball: {error}") from error
    return batches


def _stack(batches: dict[str, dict[str, Any]], members: tuple[str, ...], archive: Archive,
           where: str) -> dict[str, np.ndarray]:
    """Concatenate batches into N x 3 x 32 x 32 uint8 images and int64 labels per kind."""
    images, labels = [], {kind: [] for kind in archive.label_keys}
    for member in members:
        batch = batches[member]
        data = batch.get("data")
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 \
                or data.shape[1] != 3 * 32 * 32:
            raise DataError(f"{where}/{member}: 'data' should be an N x 3072 uint8 array")
        images.append(data.reshape(-1, 3, 32, 32))
        for kind, key in archive.label_keys.items():
            values = np.asarray(batch.get(key, []), dtype=np.int64)
            if values.shape != (len(data),):
                raise DataError(f"{where}/{member}: '{key}' should hold {len(data)} labels")
            labels[kind].append(values)
    out = {"x": np.concatenate(images)}
    out.update({kind: np.concatenate(parts) for kind, parts in labels.items()})
    return out


def _decode(archive: Archive, kind: str, path: Path) -> tuple[dict[str, np.ndarray],
                                                              dict[str, str]]:
    batches = _read_folder(path, archive) if kind == "folder" else _read_tarball(path, archive)
    arrays = {}
    for split, members in (("train", archive.train), ("test", archive.test)):
        for key, value in _stack(batches, members, archive, str(path)).items():
            arrays[f"{key}_{split}"] = value
    meta = {}
    for label_kind, key in archive.name_keys.items():
        names = batches[archive.meta].get(key)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise DataError(f"{path}/{archive.meta}: '{key}' should be a list of class names")
        bad = [a for a in (arrays[f"{label_kind}_train"], arrays[f"{label_kind}_test"])
               if len(a) and (a.min() < 0 or a.max() >= len(names))]
        if bad:
            raise DataError(f"{path}: labels outside 0..{len(names) - 1}")
        meta[f"{label_kind}_names"] = json.dumps(names)
    return arrays, meta


def _limit(x: np.ndarray, y: np.ndarray, k: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The first ``k`` samples of every class, in their original order."""
    if k is None:
        return x, y
    keep = np.concatenate([np.flatnonzero(y == c)[:k] for c in np.unique(y)])
    keep.sort()
    return x[keep], y[keep]


def _check_options(archive: Archive, labels: str, limit_per_class: int | None) -> int | None:
    if labels not in archive.label_keys:
        raise ValueError(f"labels must be one of {sorted(archive.label_keys)}, got {labels!r}")
    return check_limit(limit_per_class)


def check_cifar10(*, limit_per_class: int | None, **unchecked: object) -> None:
    """The CIFAR-10 loader's option values (the config checks them before reading data)."""
    _check_options(CIFAR10, "fine", limit_per_class)


def check_cifar100(*, labels: str, limit_per_class: int | None, **unchecked: object) -> None:
    """The CIFAR-100 loader's option values (the config checks them before reading data)."""
    _check_options(CIFAR100, labels, limit_per_class)


def load_cifar(archive: Archive, *, data_dir: Any, labels: str, limit_per_class: int | None,
               download: bool, cache: bool, workers: int | None = None) -> DataSplits:
    """Shared body of the two registered loaders."""
    limit = _check_options(archive, labels, limit_per_class)
    root = resolve_data_dir(data_dir)
    found = _locate(archive, root)
    if found is None and download:
        found = "tarball", download_verified(archive.url, root / archive.tarball, archive.md5)
    if found is None:
        raise DataError(_missing_message(archive, root))
    kind, path = found
    if kind == "imagefolder":
        arrays = read_image_folder(path, classes=CIFAR10_CLASSES, color="rgb", size=None,
                                   limit_per_class=limit, workers=workers, cache=cache,
                                   kind="cifar10-imagefolder")
        if arrays["x_train"].shape[1:] != (3, 32, 32):
            raise DataError(f"{path}: CIFAR-10 images should be 32x32 RGB, found "
                            f"{arrays['x_train'].shape[1:]}")
        return splits_from_arrays(arrays, CIFAR10_CLASSES)
    files = [path / m for m in _members(archive)] if kind == "folder" else [path]
    for file in files:
        if not file.is_file():
            raise DataError(f"expected the file {file} of the official {archive.name} archive")
    arrays, meta = cached(f"{archive.name}-{kind}", root=path, files=files, options={},
                          build=lambda: _decode(archive, kind, path), enabled=cache)
    parts = {}
    for split in ("train", "test"):
        parts[f"x_{split}"], parts[f"y_{split}"] = _limit(
            arrays[f"x_{split}"], arrays[f"{labels}_{split}"], limit)
    return splits_from_arrays(parts, json.loads(meta[f"{labels}_names"]))


def _missing_message(archive: Archive, root: Path) -> str:
    text = (f"{archive.name} not found in {root}: expected the folder {root / archive.folder} "
            f"or the tarball {root / archive.tarball}")
    if archive is CIFAR10:
        text += f", or an image folder {root}/train/<class>/* and {root}/test/<class>/*"
    return text + f". Pass data_dir, or download=True to fetch {archive.url}"


@DATASETS.register("cifar10", check=check_cifar10)
def load_cifar10(*, data_dir: str | Path | None = None, limit_per_class: int | None = None,
                 download: bool = False, cache: bool = True,
                 workers: int | None = None) -> DataSplits:
    """CIFAR-10, 3x32x32: official pickle folder or tarball, or an image-folder copy.

    Options: ``limit_per_class`` (first n samples of each class per split), ``download``
    (fetch the official tarball, MD5-checked, when nothing is found), ``cache``, ``workers``
    (decoding threads for an image folder). ``data_dir`` defaults to $MIAUDIT_DATA_DIR, else
    ~/.cache/miaudit/data.
    """
    return load_cifar(CIFAR10, data_dir=data_dir, labels="fine", limit_per_class=limit_per_class,
                      download=download, cache=cache, workers=workers)


@DATASETS.register("cifar100", check=check_cifar100)
def load_cifar100(*, data_dir: str | Path | None = None, labels: str = "fine",
                  limit_per_class: int | None = None, download: bool = False,
                  cache: bool = True) -> DataSplits:
    """CIFAR-100, 3x32x32: official pickle folder or tarball; ``labels`` "fine" (100 classes)
    or "coarse" (20 superclasses); other options as for cifar10."""
    return load_cifar(CIFAR100, data_dir=data_dir, labels=labels,
                      limit_per_class=limit_per_class, download=download, cache=cache)
