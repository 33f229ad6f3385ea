"""The run directory: the unit of work, written atomically so a run can always resume.

Layout::

    RUN/manifest.json            training hash + resolved config (identity of the artefacts)
    RUN/config.yaml              resolved config, human-readable
    RUN/keep.npy                 (M, N) bool keep matrix
    RUN/models/0003/weights.safetensors
    RUN/models/0003/outputs.safetensors   logits (N, Q, C) float32
    RUN/models/0003/meta.json    written last: its presence marks the model complete
    RUN/results.json, RUN/roc.png, RUN/scores/<attack>.npy

Every file is written to a temporary name in the same folder, flushed to disk, then renamed
(``os.replace`` is atomic on POSIX), so a kill at any moment leaves either the old complete file
or no file, never half of one.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file


class RunDirError(RuntimeError):
    """A run directory that does not belong to this config, or a missing/corrupt artefact."""


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp_path)`` and move the result to ``path`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    tmp_path = Path(tmp_name)
    try:
        write(tmp_path)
        with open(tmp_path, "rb+") as stream:
            os.fsync(stream.fileno())
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def save_figure(figure: Any, path: str | Path, dpi: int = 120) -> Path:
    """Save a matplotlib figure atomically (format from the suffix) and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    try:
        atomic_write(path, lambda tmp: figure.savefig(tmp, dpi=dpi,
                                                      format=path.suffix.lstrip(".") or "png"))
    finally:
        plt.close(figure)
    return path


def write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda tmp: tmp.write_bytes(data))


def write_json(path: Path, value: Any) -> None:
    write_bytes(path, (json.dumps(value, indent=2, sort_keys=False) + "\n").encode())


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise RunDirError(f"cannot read {path}: {error}") from None


def write_array(path: Path, array: np.ndarray) -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    write_bytes(path, buffer.getvalue())


def read_array(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise RunDirError(f"cannot read array {path}: {error}") from None


def write_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    contiguous = {name: t.detach().cpu().contiguous() for name, t in tensors.items()}
    atomic_write(path, lambda tmp: save_file(contiguous, str(tmp)))


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except Exception as error:  # safetensors raises its own error types
        raise RunDirError(f"cannot read tensors {path}: {error}") from None


class RunDir:
    """Paths and resume logic of one run directory."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def claim(self, training_hash: str, config: dict[str, Any]) -> None:
        """Create the run directory or check that it was made by the same training config."""
        manifest = self.root / "manifest.json"
        if manifest.exists():
            stored = read_json(manifest).get("training_hash")
            if stored != training_hash:
                raise RunDirError(
                    f"{self.root} holds artefacts of another config (hash {stored}); "
                    f"this config has hash {training_hash}. Use another output_dir or name."
                )
        else:
            write_json(manifest, {"training_hash": training_hash, "config": config})

    def model_dir(self, index: int) -> Path:
        return self.root / "models" / f"{index:04d}"

    def is_complete(self, index: int) -> bool:
        return (self.model_dir(index) / "meta.json").exists()

    def save_model(self, index: int, state: dict[str, torch.Tensor], logits: torch.Tensor,
                   meta: dict[str, Any]) -> None:
        """Weights, outputs, then the meta file that marks the model complete."""
        folder = self.model_dir(index)
        write_tensors(folder / "weights.safetensors", _unshare(state))
        write_tensors(folder / "outputs.safetensors", {"logits": logits})
        write_json(folder / "meta.json", meta)

    def load_meta(self, index: int) -> dict[str, Any]:
        return read_json(self.model_dir(index) / "meta.json")

    def load_logits(self, index: int) -> torch.Tensor:
        return read_tensors(self.model_dir(index) / "outputs.safetensors")["logits"]

    def load_weights(self, index: int) -> dict[str, torch.Tensor]:
        return read_tensors(self.model_dir(index) / "weights.safetensors")


def _unshare(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses tensors sharing storage (tied weights): store copies."""
    seen: set[int] = set()
    out = {}
    for name, tensor in state.items():
        pointer = tensor.untyped_storage().data_ptr() if tensor.numel() else -1
        out[name] = tensor.clone() if pointer in seen else tensor
        seen.add(pointer)
    return out


def scores_path(root: Path, attack_label: str) -> Path:
    """Where an attack's per-sample scores (targets x N) live; the label made file-safe."""
    name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", attack_label).strip("_") or "attack"
    return Path(root) / "scores" / f"{name}.npy"


# -- models shared between run directories ---------------------------------------------------
MODEL_FILES = ("weights.safetensors", "outputs.safetensors", "meta.json")  # meta.json last


def _place(source: Path, destination: Path) -> None:
    """Hard-link (or copy) ``source`` to ``destination`` atomically."""
    tmp = destination.with_name(f".{destination.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:  # another file system, or links not supported
        shutil.copyfile(source, tmp)
    os.replace(tmp, destination)


class ModelCache:
    """Trained models keyed by everything that determines them (architecture, recipe, seed,
    membership row, data, queries), so that audits which share models, e.g. the same ANN
    reference models attacked beside several targets, train each one once. Entries are
    complete directories, renamed into place atomically; run directories hold links to them."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def entry(self, key: str) -> Path:
        return self.root / key

    def fetch(self, key: str, destination: Path) -> bool:
        """Place a cached model's files in ``destination``; False when it is not cached."""
        entry = self.entry(key)
        if not (entry / "meta.json").exists():
            return False
        destination.mkdir(parents=True, exist_ok=True)
        for name in MODEL_FILES:
            _place(entry / name, destination / name)
        return True

    def store(self, key: str, source: Path) -> None:
        """Add the complete model directory ``source`` (a no-op when the key exists)."""
        entry = self.entry(key)
        if (entry / "meta.json").exists():
            return
        self.root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=self.root, prefix=f".{key}."))
        try:
            for name in MODEL_FILES:
                _place(source / name, staging / name)
            os.replace(staging, entry)
        except OSError:
            if not (entry / "meta.json").exists():
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
