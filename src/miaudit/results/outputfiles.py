"""Reading the keep matrix and logits of externally trained models from array files
(``.npy``, ``.npz``, ``.safetensors``), one stacked file or one file per model, never unpickled;
:mod:`miaudit.results.external` validates what these return and knows the folder layouts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from miaudit._runtime.io import array_file_problem, path_problem
from miaudit.errors import ExternalOutputsError

SUFFIXES = (".npy", ".npz", ".safetensors")
Source = str | Path
Sources = Source | Sequence[Source]


# -- reading arrays ----------------------------------------------------------------------------

def load_array(path: Source, key: str | None = None) -> np.ndarray:
    """One array from ``.npy``, or array ``key`` (or the only array) of ``.npz`` /
    ``.safetensors``."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ExternalOutputsError(path_problem(path))
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ExternalOutputsError(f"{path}: unsupported file type {suffix!r}; save the array "
                                   f"as one of {', '.join(SUFFIXES)}")
    try:
        arrays = _read_arrays(path, suffix)
    except ExternalOutputsError:
        raise
    except Exception as error:  # numpy / safetensors raise many types for damaged files
        raise ExternalOutputsError(f"{path} is not a readable {suffix} file: {error}") from error
    if isinstance(arrays, np.ndarray):
        return arrays
    if key is None and len(arrays) == 1:
        return next(iter(arrays.values()))
    if key not in arrays:
        raise ExternalOutputsError(f"{path} has no array {key!r} (arrays: {sorted(arrays)})")
    return arrays[key]


def _read_arrays(path: Path, suffix: str) -> np.ndarray | dict[str, np.ndarray]:
    if suffix == ".safetensors":
        from safetensors.numpy import load_file

        return load_file(str(path))
    with open(path, "rb") as stream:
        magic = stream.read(6)
    # without this check np.load takes any other bytes for a pickle and says so, misleadingly
    if not magic.startswith((b"\x93NUMPY", b"PK\x03\x04")):
        raise ExternalOutputsError(f"{path} is not a {suffix} file (no NumPy header); write it "
                                   "with np.save / np.savez")
    if (problem := array_file_problem(path, str(path))) is not None:
        raise ExternalOutputsError(problem)
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.ndarray):
            return loaded
        with loaded:
            return {name: loaded[name] for name in loaded.files}
    except ValueError as error:
        if "allow_pickle" in str(error):
            raise ExternalOutputsError(
                f"{path} holds Python objects (a pickled array), which are never loaded: "
                "unpickling runs code. Save plain arrays, e.g. np.save(path, "
                "np.asarray(logits, dtype=np.float32))") from error
        raise


def safetensors_query_names(path: Path) -> list[str] | None:
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as handle:
        raw = (handle.metadata() or {}).get("query_names")
    if raw is None:
        return None
    try:
        names = json.loads(raw)
    except json.JSONDecodeError:
        names = None
    if not isinstance(names, list):
        raise ExternalOutputsError(f"{path}: metadata query_names must be a JSON list of "
                                   f"names, got {raw[:60]!r}")
    return [str(name) for name in names]


# -- per-model and stacked arrays --------------------------------------------------------------

def is_many(sources: Sources) -> bool:
    return not isinstance(sources, (str, Path))


def _model_logits(array: np.ndarray, where: str) -> np.ndarray:
    """One model's logits as (N, Q, C): from (N, C), (N, Q, C) or the official (N, 1, Q, C)."""
    if array.ndim == 2:
        return array[:, None, :]
    if array.ndim == 3:
        return array
    if array.ndim == 4 and array.shape[1] == 1:
        return array[:, 0]
    raise ExternalOutputsError(f"{where}: one model's logits must be (N, C), (N, Q, C) or "
                               f"(N, 1, Q, C), got shape {array.shape}")


def stacked_logits(array: np.ndarray, where: str) -> np.ndarray:
    """All models' logits as (M, N, Q, C): from (M, N, C), (M, N, Q, C) or (M, N, 1, Q, C)."""
    if array.ndim == 3:
        return array[:, :, None, :]
    if array.ndim == 4:
        return array
    if array.ndim == 5 and array.shape[2] == 1:
        return array[:, :, 0]
    raise ExternalOutputsError(f"{where}: stacked logits must be (M, N, C) or (M, N, Q, C), "
                               f"got shape {array.shape}")


def _stack(arrays: list[np.ndarray], names: list[str], what: str) -> np.ndarray:
    for array, name in zip(arrays, names):
        if array.shape != arrays[0].shape:
            raise ExternalOutputsError(f"{name}: {what} of shape {array.shape}, but {names[0]} "
                                       f"has {arrays[0].shape}; every model needs the same "
                                       "samples, queries and classes")
    return np.stack(arrays)


def read_keep(sources: Sources) -> tuple[np.ndarray, str]:
    """(M, N) keep from one stacked file or a list of per-model (N,) files."""
    if not is_many(sources):
        return load_array(sources, "keep"), str(sources)
    names = [str(s) for s in sources]
    rows = []
    for source in sources:
        row = load_array(source, "keep")
        if row.ndim != 1:
            raise ExternalOutputsError(f"{source}: one model's keep must be (N,), got "
                                       f"shape {row.shape}")
        rows.append(row)
    return _stack(rows, names, "keep"), names[0] if len(names) == 1 else f"{names[0]}, ..."


def read_logits(sources: Sources) -> tuple[np.ndarray, str]:
    """(M, N, Q, C) logits from one stacked file or a list of per-model files."""
    if not is_many(sources):
        return stacked_logits(load_array(sources, "logits"), str(sources)), str(sources)
    names = [str(s) for s in sources]
    per_model = [_model_logits(load_array(s, "logits"), str(s)) for s in sources]
    return _stack(per_model, names, "logits"), names[0] if len(names) == 1 else f"{names[0]}, ..."
