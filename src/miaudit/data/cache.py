"""Decoded-data cache: a loader's decoded arrays are saved once and reloaded on later runs.

Entries are safetensors files (never pickle) in a cache directory: ``$MIAUDIT_CACHE_DIR`` if set,
else the user's platform cache directory (``$XDG_CACHE_HOME/miaudit``, default
``~/.cache/miaudit``, on Linux). Nothing is ever written into the user's data folder: it may be
shared, read-only, or under version control.

An entry's file name is ``<kind>-<identity>-<content>.safetensors``: ``identity`` hashes what was
asked for (loader kind, source location, options), ``content`` hashes the state of every source
file (path, size, modification and change times), so a changed source never reuses a stale
entry and the entry it replaces is deleted. Writes are atomic (temporary file, fsync,
``os.replace``), and each entry carries a SHA-256 digest of its arrays, so a truncated or
corrupted entry is detected and rebuilt instead of being trusted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from miaudit._runtime.io import write_bytes
from miaudit.data._base import DataError

log = logging.getLogger(__name__)

CACHE_VERSION = 1  # bump when the layout of entries changes: old entries are then ignored
ENV_CACHE_DIR = "MIAUDIT_CACHE_DIR"
ENV_DATA_DIR = "MIAUDIT_DATA_DIR"
APP_NAME = "miaudit"
_DIGEST_KEY = "miaudit_digest"
_TEMPORARY_LIFETIME_S = 3600.0

Arrays = dict[str, np.ndarray]
Meta = dict[str, str]


def as_path(value: Any, name: str = "data_dir") -> Path | None:
    """Accept a str or path-like option (``~`` expanded); ``None`` stays ``None``."""
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        return Path(value).expanduser()
    raise ValueError(f"{name} must be a path (str or Path), got {type(value).__name__}")


def user_cache_root() -> Path:
    """The platform's per-user cache directory for miaudit: ``platformdirs`` when it is
    installed, else the same rules written out (XDG on Linux and other Unixes, ``~/Library/
    Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows); a dependency is not worth three rules."""
    try:
        from platformdirs import user_cache_dir
    except ImportError:
        return _fallback_cache_root()
    return Path(user_cache_dir(APP_NAME, appauthor=False))


def _fallback_cache_root() -> Path:
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local"
        return Path(base) / APP_NAME / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / APP_NAME
    base = os.environ.get("XDG_CACHE_HOME") or ""
    # the XDG spec says a relative $XDG_CACHE_HOME is invalid and must be ignored
    root = Path(base).expanduser() if os.path.isabs(os.path.expanduser(base)) else None
    return (root or Path.home() / ".cache") / APP_NAME


def resolve_data_dir(data_dir: Any) -> Path:
    """The loader's data directory: the option, else ``$MIAUDIT_DATA_DIR``, else
    ``~/.cache/miaudit/data`` (where ``download=True`` puts archives)."""
    path = as_path(data_dir)
    if path is not None:
        return path
    env = os.environ.get(ENV_DATA_DIR)
    return Path(env).expanduser() if env else user_cache_root() / "data"


def cache_dir() -> Path:
    """Where cache entries live: ``$MIAUDIT_CACHE_DIR``, else :func:`user_cache_root`."""
    env = os.environ.get(ENV_CACHE_DIR)
    return Path(env).expanduser() if env else user_cache_root()


def source_digest(root: Path, files: Iterable[Path]) -> str:
    """Hash of each file's path relative to ``root``, size, modification and change
    time (ns)."""
    prefix = os.path.join(str(root), "")
    lines = []
    for path in files:
        try:
            stat = os.stat(path)
        except OSError as error:
            raise DataError(f"cannot read {path}: {error}") from error
        name = str(path)  # slicing, not os.path.relpath: 10x faster over 60,000 files
        name = name[len(prefix):] if name.startswith(prefix) else os.path.relpath(name, root)
        # ctime too: a rewrite that keeps the size and restores the mtime still changes it
        lines.append(f"{name}\0{stat.st_size}\0{stat.st_mtime_ns}\0{stat.st_ctime_ns}\n")
    # surrogateescape: file names that are not UTF-8 hash as their raw bytes
    return hashlib.sha256("".join(lines).encode("utf-8", "surrogateescape")).hexdigest()


def _identity(kind: str, root: Path, options: Mapping[str, Any]) -> str:
    text = json.dumps({"kind": kind, "root": str(Path(root).resolve()), "options": options,
                       "version": CACHE_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def arrays_digest(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 over names, dtypes, shapes and bytes of the arrays, in name order."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}\0{array.dtype.str}\0{array.shape}\n".encode())
        digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()


def cached(kind: str, *, root: Path, files: Iterable[Path], options: Mapping[str, Any],
           build: Callable[[], tuple[Arrays, Meta]], enabled: bool = True) -> tuple[Arrays, Meta]:
    """Return ``build()``'s arrays and string metadata, from the cache when a valid entry for
    this exact source state exists, else building and saving them (a failed save only warns)."""
    if not enabled:
        return build()
    directory = cache_dir()
    prefix = f"{kind}-{_identity(kind, root, options)}-"
    path = directory / f"{prefix}{source_digest(root, files)[:16]}.safetensors"
    if path.exists():
        entry = _read(path)
        if entry is not None:
            log.info("loaded %s from cache %s", kind, path)
            return entry
    arrays, meta = build()
    if _write(path, arrays, meta):
        _remove_stale(directory, prefix, keep=path)
    return arrays, meta


def _read(path: Path) -> tuple[Arrays, Meta] | None:
    """The entry, or ``None`` (with a warning) when it is truncated, corrupt or unreadable."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as handle:
            meta = dict(handle.metadata() or {})
            arrays = {name: handle.get_tensor(name) for name in handle.keys()}
    except Exception as error:  # safetensors raises its own error types for damaged files
        log.warning("cache entry %s is unreadable (%s); rebuilding it", path, error)
        return None
    if meta.pop(_DIGEST_KEY, None) != arrays_digest(arrays):
        log.warning("cache entry %s fails its checksum; rebuilding it", path)
        return None
    return arrays, meta


def _write(path: Path, arrays: Arrays, meta: Meta) -> bool:
    """Atomically save an entry; on failure warn and leave no partial file behind."""
    from safetensors.numpy import save

    arrays = {name: np.ascontiguousarray(array) for name, array in arrays.items()}
    payload = save(arrays, metadata={**meta, _DIGEST_KEY: arrays_digest(arrays)})
    try:
        write_bytes(path, payload)  # atomic: a temporary file, fsync, rename
    except OSError as error:
        log.warning("could not write cache entry %s: %s", path, error)
        return False
    return True


def _remove_stale(directory: Path, prefix: str, keep: Path) -> None:
    """Delete entries for the same request made from an older state of the source, and
    temporary files of this request left by a killed writer (old enough not to be live)."""
    stale = [p for p in directory.glob(f"{prefix}*.safetensors") if p != keep]
    cutoff = time.time() - _TEMPORARY_LIFETIME_S
    for path in directory.glob(f".{prefix}*.tmp"):
        try:
            if path.stat().st_mtime < cutoff:
                stale.append(path)
        except OSError:
            pass
    for path in stale:
        try:
            path.unlink()
        except OSError:
            pass


def to_float(array: np.ndarray, scale: float = 255.0) -> torch.Tensor:
    """Stored integers -> float32 tensor ``array / scale`` (255 for pixels, 1 for binary
    features); a division, not a multiplication by 1/scale, so pixel values are exactly
    rounded."""
    tensor = torch.from_numpy(np.ascontiguousarray(array)).to(torch.float32)
    return tensor.div_(scale) if scale != 1 else tensor
