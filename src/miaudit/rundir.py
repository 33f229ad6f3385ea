"""The run directory: stages' artefacts, each keyed by what determines it, written
atomically, verified when read.

Layout (``LAYOUT`` = 2)::

    RUN/manifest.json                  layout version, run identity, the last config used
    RUN/split.npz                      audited / population / holdout pool indices
    RUN/keep.npy                       (models x pool) bool memberships of the current plan
    RUN/models/0003/model.json         train stage: identity, weights digest, training log
    RUN/models/0003/weights.safetensors
    RUN/models/0003/outputs/<key>.safetensors + <key>.json
                                       query stage: (pool x classes) logits of one query spec,
                                       keyed by the weights and the spec; the json (digest,
                                       spec) is written last and marks it complete
    RUN/models/0003/eval/<key>.json    evaluate stage (robust accuracy), keyed likewise
    RUN/scores-<generation>/<attack>.npy   score stage: (targets x audited) scores
    RUN/results.json                   names the scores generation it belongs to
    RUN/roc.png, report.html, ...      report stage (removed before results.json is replaced)
    RUN/.lock                          advisory lock held by the running process

A record's identity is checked on every read: a record made for another identity (changed
data, recipe, seed, membership, device, query) is stale and is recomputed, never reused; a
file whose digest differs from its record is damaged and is recomputed too (a warning names
it). The shared model cache (``output_dir/model_cache``) holds copies, never links.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from miaudit.errors import ConfigError, RunDirError, RunLockedError
from miaudit.io import (
    TMP_SUFFIX,
    copy_file,
    file_digest,
    read_array,
    read_digested_json,
    read_json,
    read_tensors,
    sweep_temporaries,
    write_array,
    write_bytes,
    write_digested_json,
    write_json,
    write_tensors,
)

LAYOUT = 2
# what the report stage renders from results.json and its scores generation
REPORT_FILES = ("roc.png", "roc_dp_bound.png", "report.html", "exposed.npz", "records.csv",
                "usage.json", "leakage_over_training.png")
WEIGHTS = "weights.safetensors"
MODEL_RECORD = "model.json"


@contextmanager
def locked(path: Path, *, wait: bool, what: str) -> Iterator[None]:
    """Hold an exclusive advisory lock (fcntl) on ``path`` for the block."""
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")  # noqa: SIM115 - held across the yield below
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            handle.close()
            raise RunLockedError(f"another miaudit process is working in {what}; wait for it "
                                 "to finish, or pass --wait to queue behind it") from None
        if _same_file(handle, path):
            break
        # the holder removed the directory (a failed first run) while we waited: our lock is
        # on a deleted file that a newcomer would not see; take the lock again on the new one
        handle.close()
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


def _same_file(handle: Any, path: Path) -> bool:
    try:
        return os.fstat(handle.fileno()).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


class RunDir:
    """Paths, records and resume logic of one run directory."""

    def __init__(self, root: Path):
        self.root = Path(root)

    # -- the directory as a whole ---------------------------------------------------------------
    def claim(self, run_identity: str, config: dict[str, Any]) -> None:
        """Create the run directory or check that it holds this run (layout and identity)."""
        manifest = self.root / "manifest.json"
        if manifest.exists():
            stored = read_json(manifest)
            # layout 1 wrote a training_hash and no layout; {} (or a hand-cut file) is neither
            layout = stored.get("layout", 1 if "training_hash" in stored else None)
            if layout is None or (layout == LAYOUT and "run_identity" not in stored):
                raise RunDirError(
                    f"{manifest} is incomplete (no layout or run_identity); delete it and rerun "
                    "the audit (models whose records match are reused)")
            if layout != LAYOUT:
                raise RunDirError(
                    f"{self.root} was written by an older miaudit (layout {layout}, this one "
                    f"reads {LAYOUT}); rerun the audit with another output_dir or name, or "
                    "delete that directory (its trained models cannot be reused)")
            if stored.get("run_identity") != run_identity:
                raise RunDirError(
                    f"{self.root} holds another audit (identity {stored.get('run_identity')}, "
                    f"this config: {run_identity}); use another output_dir or name")
        write_json(manifest, {"layout": LAYOUT, "run_identity": run_identity,
                              "config": config})

    def lock(self, wait: bool = False) -> Any:
        return locked(self.root / ".lock", wait=wait, what=str(self.root))

    def sweep(self) -> int:
        """Remove temporaries a killed process left (call while holding the lock)."""
        return sweep_temporaries(self.root)

    def remove(self) -> None:
        """Delete the whole run directory (call while holding the lock: a failed first run)."""
        shutil.rmtree(self.root, ignore_errors=True)

    def write_plan(self, keep: np.ndarray, split: dict[str, np.ndarray]) -> None:
        write_array(self.root / "keep.npy", keep)
        import io

        buffer = io.BytesIO()
        np.savez(buffer, **split)
        write_bytes(self.root / "split.npz", buffer.getvalue())

    def read_keep(self) -> np.ndarray:
        return read_array(self.root / "keep.npy")

    def read_split(self) -> dict[str, np.ndarray]:
        try:
            with np.load(self.root / "split.npz", allow_pickle=False) as stored:
                return {name: stored[name] for name in stored.files}
        except (OSError, ValueError, EOFError) as error:
            raise RunDirError(f"cannot read {self.root / 'split.npz'}: {error}; rerun the "
                              "audit to rebuild it") from None

    # -- train stage ---------------------------------------------------------------------------
    def model_dir(self, index: int) -> Path:
        return self.root / "models" / f"{index:04d}"

    def model_record(self, index: int, identity: str) -> dict[str, Any] | None:
        """The model's record when it was trained for ``identity`` and its weights are intact;
        None when it must be (re)trained."""
        return verified_record(self.model_dir(index), MODEL_RECORD, identity, WEIGHTS)

    def save_model(self, index: int, identity: str, state: dict[str, Any],
                   meta: dict[str, Any]) -> dict[str, Any]:
        """Weights, then the record (identity + digest + meta) that marks the model complete."""
        return save_model_folder(self.model_dir(index), identity, state, meta)

    def snapshot_dir(self, index: int, epoch: int) -> Path:
        """The weights model ``index`` had at the end of ``epoch`` (train.snapshots)."""
        return self.model_dir(index) / "snapshots" / f"epoch-{epoch:04d}"

    def snapshot_record(self, index: int, epoch: int, identity: str) -> dict[str, Any] | None:
        """Like :meth:`model_record`, for a snapshot (``identity``: the snapshot's)."""
        return verified_record(self.snapshot_dir(index, epoch), MODEL_RECORD, identity, WEIGHTS)

    def save_snapshot(self, index: int, epoch: int, identity: str, state: dict[str, Any],
                      meta: dict[str, Any]) -> dict[str, Any]:
        return save_model_folder(self.snapshot_dir(index, epoch), identity, state, meta)

    def checkpoint_dir(self) -> Path:
        """Epoch checkpoints of models in training (training.checkpoint), by identity."""
        return self.root / "checkpoints"

    # -- parents of derived models (miaudit.parents) ----------------------------------------------
    def parent_dir(self, identity: str) -> Path:
        return self.root / "parents" / identity

    def load_weights(self, index: int) -> dict[str, Any]:
        return read_tensors(self.model_dir(index) / WEIGHTS)

    # -- query stage ---------------------------------------------------------------------------
    def output_paths(self, index: int, key: str) -> tuple[Path, Path]:
        folder = self.model_dir(index) / "outputs"
        return folder / f"{key}.safetensors", folder / f"{key}.json"

    def output_record(self, index: int, key: str) -> dict[str, Any] | None:
        data, record = self.output_paths(index, key)
        return verified_record(record.parent, record.name, key, data.name)

    def save_outputs(self, index: int, key: str, logits: Any, meta: dict[str, Any]) -> None:
        data, record = self.output_paths(index, key)
        write_tensors(data, {"logits": logits})
        write_json(record, {"identity": key, "sha256": file_digest(data), **meta})

    def load_outputs(self, index: int, key: str) -> Any:
        data, _ = self.output_paths(index, key)
        return read_tensors(data)["logits"]

    # -- evaluate stage ------------------------------------------------------------------------
    def eval_path(self, index: int, key: str) -> Path:
        return self.model_dir(index) / "eval" / f"{key}.json"

    def save_eval(self, index: int, key: str, record: dict[str, Any]) -> None:
        """An evaluation record with the digest of its own content (it has no data file)."""
        write_digested_json(self.eval_path(index, key), record)

    def eval_record(self, index: int, key: str) -> dict[str, Any] | None:
        """The evaluation record when present and intact; None when it must be (re)computed.
        A damaged, truncated or edited record is reported by name."""
        path = self.eval_path(index, key)
        if not path.exists():
            return None
        try:
            content, problem = read_digested_json(path)
        except RunDirError as error:
            _warn(f"{error}; recomputing it")
            return None
        if problem is not None:
            _warn(f"{path} is damaged ({problem}); recomputing it")
            return None
        return content

    # -- score stage ---------------------------------------------------------------------------
    @contextmanager
    def new_scores(self) -> Iterator[Path]:
        """A fresh scores folder: filled inside the block, renamed into place after it. The
        caller then writes results.json naming it (:meth:`drop_old_scores` cleans up), so a
        kill at any moment leaves results.json and the scores it names consistent."""
        staging = Path(tempfile.mkdtemp(dir=self.root, prefix=".scores-", suffix=TMP_SUFFIX))
        staging.chmod(0o755)  # mkdtemp makes 0700; the scores are as readable as the rest
        try:
            yield staging
            final = self.root / staging.name.removesuffix(TMP_SUFFIX).lstrip(".")
            os.replace(staging, final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def drop_report_files(self) -> None:
        """Remove the report stage's files before a new results.json replaces the one they
        render: a kill before they are rendered again leaves them missing, never stale."""
        for name in REPORT_FILES:
            (self.root / name).unlink(missing_ok=True)

    def drop_old_scores(self, current: str) -> None:
        for folder in self.root.glob("scores-*"):
            if folder.name != current and folder.is_dir():
                shutil.rmtree(folder, ignore_errors=True)


def save_model_folder(folder: Path, identity: str, state: dict[str, Any],
                      meta: dict[str, Any]) -> dict[str, Any]:
    """A model folder: weights, then the record that marks it complete."""
    write_tensors(folder / WEIGHTS, _unshare(state))
    record = {"identity": identity, "sha256": file_digest(folder / WEIGHTS), **meta}
    write_json(folder / MODEL_RECORD, record)
    return record


def verified_record(folder: Path, record_name: str, identity: str,
                    data_name: str) -> dict[str, Any] | None:
    """A record (json) whose identity matches and whose data file has the recorded digest;
    None when absent or stale. A damaged file is reported once and treated as absent."""
    record_path = folder / record_name
    if not record_path.exists():
        return None
    try:
        record = read_json(record_path)
    except RunDirError as error:
        _warn(f"{error}; recomputing it")
        return None
    if not {"identity", "sha256"} <= set(record):  # {} or cut short by hand: not ours to trust
        _warn(f"{record_path} is incomplete (no identity or digest); recomputing it")
        return None
    if record["identity"] != identity:
        return None
    data_path = folder / data_name
    if not data_path.exists() or file_digest(data_path) != record.get("sha256"):
        _warn(f"{data_path} is missing or damaged (digest differs from {record_path}); "
              "recomputing it")
        return None
    return record


def _warn(message: str) -> None:
    import warnings

    warnings.warn(message, RuntimeWarning, stacklevel=3)


def _unshare(state: dict[str, Any]) -> dict[str, Any]:
    """safetensors refuses tensors sharing storage (tied weights): store copies."""
    seen: set[int] = set()
    out = {}
    for name, tensor in state.items():
        pointer = tensor.untyped_storage().data_ptr() if tensor.numel() else -1
        out[name] = tensor.clone() if pointer in seen else tensor
        seen.add(pointer)
    return out


def scores_name(attack_label: str) -> str:
    """File name of an attack's per-sample scores; the label made file-safe."""
    name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", attack_label).strip("_") or "attack"
    return f"{name}.npy"


def check_scores_names(labels: list[str]) -> None:
    """Raise ConfigError when two attack labels would share one scores file (``scores_name``
    folds characters, and case on case-insensitive file systems): the second file would
    replace the first, and the report would read one attack's scores for the other."""
    seen: dict[str, str] = {}
    for label in labels:
        file = scores_name(label).lower()
        if file in seen:
            raise ConfigError(f"attack labels {seen[file]!r} and {label!r} both save their scores "
                             f"as {scores_name(label)}; give one a label that differs in a "
                             "letter or digit")
        seen[file] = label


# -- models shared between run directories ---------------------------------------------------
class ModelCache:
    """Trained models (and their query outputs) keyed by everything that determines them, so
    that audits which share models train each one once. An entry is a folder laid out like a
    run's model folder. Files are copied in and out (never hard-linked: damage in one place
    must not reach another) and verified against their records on the way out."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def entry(self, key: str) -> Path:
        return self.root / key

    def lock(self, key: str) -> Any:
        return locked(self.root / f".{key}.lock", wait=True, what=f"model cache entry {key}")

    def fetch(self, key: str, identity: str, record_rel: str, data_rel: str,
              destination: Path) -> bool:
        """Copy one verified (data, record) pair of an entry to ``destination`` (data first,
        record last); False when the entry lacks it, made it for another identity, or holds
        a damaged copy."""
        source = self.entry(key)
        record_path = source / record_rel
        record = verified_record(record_path.parent, record_path.name, identity,
                                 Path(data_rel).name)
        if record is None:
            return False
        copy_file(source / data_rel, destination / data_rel)
        copy_file(record_path, destination / record_rel)
        return True

    def sweep(self) -> int:
        """Remove temporaries a killed process left in entries that nobody holds now (each
        entry is swept under its own lock, taken without waiting); returns how many."""
        removed = 0
        if not self.root.is_dir():
            return 0
        for entry in {path.relative_to(self.root).parts[0]
                      for path in self.root.rglob(f".*{TMP_SUFFIX}")}:
            try:
                with locked(self.root / f".{entry}.lock", wait=False, what=entry):
                    removed += sweep_temporaries(self.root / entry)
            except RunLockedError:
                continue  # a live writer: its temporaries are not leftovers
        return removed

    def store(self, key: str, record_rel: str, data_rel: str, source: Path) -> None:
        """Copy a (data, record) pair into the entry (data first, record last)."""
        target = self.entry(key)
        with self.lock(key):
            if (target / record_rel).exists():
                return
            copy_file(source / data_rel, target / data_rel)
            copy_file(source / record_rel, target / record_rel)


def audited_members(run_root: Path, targets: list[int]) -> np.ndarray:
    """(targets, audited) bool: the ground truth the stored scores are aligned with."""
    run = RunDir(run_root)
    audited = run.read_split()["audited"]
    return run.read_keep()[targets][:, audited]


def read_scores(run_root: Path, scores_dir: str, label: str) -> np.ndarray:
    """(targets, audited) scores of one attack, from ``scores_dir``, the generation
    results.json names."""
    return read_array(Path(run_root) / scores_dir / scores_name(label))
