"""The run directory: stages' artefacts, each keyed by what determines it, written
atomically, verified when read (the layout: :mod:`miaudit.auditor.runfiles`).

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

from miaudit._runtime.io import (
    TMP_SUFFIX,
    file_digest,
    read_array,
    read_digested_json,
    read_json,
    read_tensors,
    record_digests,
    sweep_temporaries,
    text_digest,
    verify_file,
    write_array,
    write_bytes,
    write_digested_json,
    write_json,
    write_tensors,
)
from miaudit.auditor.runfiles import (
    LAYOUT,
    MODEL_RECORD,
    REPORT_FILES,
    WEIGHTS,
    record_layout,
)
from miaudit.errors import ConfigError, RunDirError, RunLockedError


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
        stored, problem = read_digested_json(manifest) if manifest.exists() else ({}, None)
        if problem not in (None, "no digest"):  # layout 2 before digests: no digest
            # every model, output and score is checked against its own record: rewriting
            # the manifest reuses only what matches this config
            _warn(f"{manifest} is damaged ({problem}); rewriting it")
        elif manifest.exists():
            layout = record_layout(stored, manifest.name)
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
        write_digested_json(manifest, {"layout": LAYOUT, "run_identity": run_identity,
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
        record_digests(self.root, ["keep.npy", "split.npz"])

    def read_keep(self) -> np.ndarray:
        return read_array(verify_file(self.root / "keep.npy", REBUILD))

    def read_split(self) -> dict[str, np.ndarray]:
        try:
            with np.load(verify_file(self.root / "split.npz", REBUILD),
                         allow_pickle=False) as stored:
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

    # -- parents of derived models (miaudit.auditor.parents) ---------------------------------------
    def parent_dir(self, identity: str) -> Path:
        return self.root / "parents" / identity

    def load_weights(self, index: int) -> dict[str, Any]:
        folder = self.model_dir(index)
        return read_tensors(checked_data(folder / MODEL_RECORD, folder / WEIGHTS))

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
        write_json(record, sealed({"identity": key, "sha256": file_digest(data), **meta}))

    def load_outputs(self, index: int, key: str) -> Any:
        """The stored outputs, checked against their record's digest (RunDirError naming a
        damaged file: ``miaudit plan`` must not compute from it)."""
        data, record = self.output_paths(index, key)
        return read_tensors(checked_data(record, data))["logits"]

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
            record_digests(staging, sorted(p.name for p in staging.glob("*.npy")))
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
    record = sealed({"identity": identity, "sha256": file_digest(folder / WEIGHTS), **meta})
    write_json(folder / MODEL_RECORD, record)
    return unsealed(record)


REBUILD = "rerun the audit to rebuild it (it reuses every intact model)"
RECORD_DIGEST = "record_sha256"  # a record's digest of its own content (the data file's: sha256)


def sealed(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with the digest of its own content, so that damage to its fields (a
    training log, an accuracy) is found as its data file's is (:func:`verified_record`)."""
    import json

    content = json.loads(json.dumps(record))
    return {**content, RECORD_DIGEST: text_digest(content)}


def unsealed(record: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in record.items() if key != RECORD_DIGEST}


def record_problem(record: dict[str, Any]) -> str | None:
    """What is wrong with a data file's record: incomplete, or its content differs from its
    own digest (records written before they carried one are checked for identity and data
    digest only)."""
    if not {"identity", "sha256"} <= set(record):
        return "incomplete (no identity or digest)"
    stored = record.get(RECORD_DIGEST)
    if stored is not None and stored != text_digest(unsealed(record)):
        return "damaged (its content does not match its digest)"
    return None


def checked_data(record_path: Path, data_path: Path) -> Path:
    """``data_path`` when it and its record are intact; RunDirError naming the damaged file
    otherwise (for readers that cannot recompute: plan, report)."""
    record = read_json(record_path)
    problem = record_problem(record)
    if problem is not None:
        raise RunDirError(f"{record_path} is {problem}; {REBUILD}")
    if not data_path.is_file() or file_digest(data_path) != record["sha256"]:
        raise RunDirError(f"{data_path} is missing or damaged (digest differs from "
                          f"{record_path}); {REBUILD}")
    return data_path


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
    if (problem := record_problem(record)) is not None:  # {}, cut short or edited: not ours
        _warn(f"{record_path} is {problem}; recomputing it")
        return None
    if record["identity"] != identity:
        return None
    data_path = folder / data_name
    if not data_path.exists() or file_digest(data_path) != record.get("sha256"):
        _warn(f"{data_path} is missing or damaged (digest differs from {record_path}); "
              "recomputing it")
        return None
    return unsealed(record)


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


def audited_members(run_root: Path, targets: list[int]) -> np.ndarray:
    """(targets, audited) bool: the ground truth the stored scores are aligned with."""
    run = RunDir(run_root)
    audited = run.read_split()["audited"]
    return run.read_keep()[targets][:, audited]


def read_scores(run_root: Path, scores_dir: str, label: str) -> np.ndarray:
    """(targets, audited) scores of one attack, from ``scores_dir``, the generation
    results.json names."""
    path = Path(run_root) / scores_dir / scores_name(label)
    return read_array(verify_file(path, "rerun the audit (or miaudit score) to rebuild the "
                                        "scores: it reuses every intact model"))
