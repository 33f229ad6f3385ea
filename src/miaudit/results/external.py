"""Outputs of models trained elsewhere, read for scoring: the keep matrix, logits and labels.

An audit needs, for M models and N samples, ``keep`` (M, N) bool (model m trained on sample
i), ``logits`` (M, N, Q, C) (Q query augmentations, C classes) and ``labels`` (N,). They are
read from

- three array files (:func:`read_outputs`): ``.npy``, ``.npz`` or ``.safetensors``, each either
  stacked over models or a list of per-model files (keep (N,), logits (N, Q, C) or (N, C));
- one bundle (:func:`read_bundle`): a ``.safetensors`` / ``.npz`` file with arrays ``keep``,
  ``logits``, ``labels`` (a ``.safetensors`` may name its queries in the metadata entry
  ``query_names``, a JSON list; a ``.npz`` in a string array ``queries``), or, for language
  models, ``keep`` and per-token ``token_logprobs`` (see :mod:`miaudit.results.external_text`);
- the experiment folder of the official LiRA code (Carlini et al. 2022, "Membership inference
  attacks from first principles", github.com/tensorflow/privacy research/mi_lira_2021)
  (:func:`read_lira_experiment`): ``<root>/y_train.npy`` and one folder per model holding
  ``keep.npy`` (N,) and ``logits/<epoch>.npy`` of shape (N, 1, Q, C), as train.py and
  inference.py write them, or ``logits.npy`` of shape (N, Q, C) as common PyTorch ports do.

Every problem raises :class:`ExternalOutputsError` naming the file and the fix. Arrays are never
unpickled (``allow_pickle=False``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from miaudit._runtime.io import path_problem
from miaudit.errors import ExternalOutputsError
from miaudit.results.external_outputs import (
    BALANCE_POLICIES,
    ExternalOutputs,
    as_bool_keep,
    check_balance,
)
from miaudit.results.outputfiles import (
    SUFFIXES,
    Source,
    Sources,
    is_many,
    load_array,
    read_keep,
    read_logits,
    safetensors_query_names,
    stacked_logits,
)

# re-exported: the readers of this module's layouts are its public face
__all__ = ["BALANCE_POLICIES", "ExternalOutputs", "ExternalOutputsError", "as_bool_keep",
           "lira_logits_file", "lira_model_dirs", "load_array", "read_any", "read_bundle",
           "read_keep", "read_lira_experiment",
           "read_logits", "read_outputs", "validate_outputs"]


# -- validation --------------------------------------------------------------------------------

def validate_outputs(keep: np.ndarray, logits: np.ndarray, labels: np.ndarray, *,
                     sources: dict[str, str], query_names: Sequence[str] | None = None,
                     model_names: Sequence[str] | None = None, balance: str = "warn",
                     population: np.ndarray | None = None) -> ExternalOutputs:
    """Check and convert raw arrays (keep (M, N), logits (M, N, Q, C), labels (N,)); each
    problem raises :class:`ExternalOutputsError` naming ``sources[...]`` of the array.

    ``balance``: what to do when a sample is IN for every model or for none ("error",
    "warn", "ignore"); LiRA and RMIA fit IN and OUT distributions per sample, and a target's
    score needs reference models of the other kind. ``population`` samples (never trained
    on) are exempt from the "none" check."""
    if balance not in BALANCE_POLICIES:
        raise ExternalOutputsError(f"balance must be one of {', '.join(BALANCE_POLICIES)}, "
                                   f"got {balance!r}")
    keep = as_bool_keep(np.asarray(keep), sources["keep"])
    if keep.ndim != 2:
        raise ExternalOutputsError(f"{sources['keep']}: keep must be (models, samples), got "
                                   f"shape {keep.shape}")
    if keep.shape[1] == 0:
        raise ExternalOutputsError(f"{sources['keep']}: keep has 0 samples; the outputs "
                                   "need the samples the models were queried on")
    if population is not None:
        population = population_indices(population, keep.shape[1], "population")
    if keep.shape[0] < 2:
        raise ExternalOutputsError(
            f"{sources['keep']}: {keep.shape[0]} model; an audit needs at least 2 (a target "
            "and a reference), and LiRA/RMIA need dozens: supply the outputs of more models")
    if logits.ndim != 4 or logits.shape[:2] != keep.shape:
        raise ExternalOutputsError(
            f"logits {sources['logits']} of shape {logits.shape} do not match keep "
            f"{sources['keep']} of shape {keep.shape}: logits need (models, samples, queries, "
            "classes) with the models and samples of keep, in the same order")
    labels = np.asarray(labels)
    if labels.shape != (keep.shape[1],):
        raise ExternalOutputsError(
            f"labels {sources['labels']} of shape {labels.shape} do not match the "
            f"{keep.shape[1]} samples of keep {sources['keep']} {keep.shape}")
    logits = _finite_logits(logits, sources["logits"])
    labels = _class_labels(labels, logits.shape[-1], sources["labels"])
    check_balance(keep, balance, sources["keep"], population)
    queries = _query_names(query_names, logits.shape[2], sources["logits"])
    models = list(model_names) if model_names is not None else [
        f"model{m}" for m in range(keep.shape[0])]
    return ExternalOutputs(keep=keep, logits=logits, labels=labels, query_names=queries,
                           model_names=models)


def population_indices(array: Any, samples: int, where: str) -> np.ndarray:
    """Sorted unique (P,) int64 sample indices in 0..samples-1; anything else (floats,
    another shape, out of range) raises naming ``where``."""
    array = np.asarray(array)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ExternalOutputsError(f"{where}: expected a 1-D array of integer sample indices, "
                                   f"got {array.dtype} of shape {array.shape}")
    indices = array.astype(np.int64)
    if indices.size and (indices.min() < 0 or indices.max() >= samples):
        raise ExternalOutputsError(f"{where}: indices must lie in 0..{samples - 1} (the "
                                   f"samples), got {indices.min()}..{indices.max()}")
    return np.unique(indices)


def read_population(path: Source) -> np.ndarray:
    """The attacker's population as sample indices from an array file (checked for range
    once the outputs are read)."""
    return population_indices(load_array(path, "population"), np.iinfo(np.int64).max,
                              str(path))


def _finite_logits(logits: np.ndarray, where: str) -> np.ndarray:
    if logits.dtype.kind not in "biuf":
        raise ExternalOutputsError(f"{where}: logits must be numbers, got dtype {logits.dtype}")
    if logits.shape[-1] < 2:
        raise ExternalOutputsError(f"{where}: logits have {logits.shape[-1]} class(es); a "
                                   "classifier's outputs need at least 2")
    with np.errstate(over="ignore"):  # an overflow becomes inf, reported just below
        logits = np.ascontiguousarray(logits, dtype=np.float32)
    bad = ~np.isfinite(logits)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ExternalOutputsError(
            f"{where}: {int(bad.sum())} logits are NaN or infinite (after conversion to "
            f"float32), the first at (model, sample, query, class) {first}; re-export "
            "finite raw logits (not log-probabilities of 0)")
    return logits


def _class_labels(labels: np.ndarray, classes: int, where: str) -> np.ndarray:
    if labels.dtype.kind not in "biuf":
        raise ExternalOutputsError(f"{where}: labels must be class indices, got dtype "
                                   f"{labels.dtype}")
    as_int = labels.astype(np.int64)
    bad = (as_int != labels) | (as_int < 0) | (as_int >= classes)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ExternalOutputsError(
            f"{where}: labels must be class indices 0..{classes - 1} (the logits have "
            f"{classes} classes); {int(bad.sum())} are not, the first {labels[first].item()!r} at "
            f"sample {first}")
    return as_int


def _query_names(names: Sequence[str] | None, count: int, where: str) -> list[str]:
    if names is None:
        return ["identity"] if count == 1 else [f"query{q}" for q in range(count)]
    names = [str(name) for name in names]
    if len(names) != count:
        raise ExternalOutputsError(f"{where}: {count} queries in the logits but "
                                   f"{len(names)} query names {names}")
    return names


# -- the three layouts -------------------------------------------------------------------------

def read_outputs(keep: Sources, logits: Sources, labels: Source, *,
                 query_names: Sequence[str] | None = None, balance: str = "warn",
                 population: np.ndarray | None = None) -> ExternalOutputs:
    """Outputs from separate files; ``keep`` and ``logits`` are each one stacked file or a
    list of per-model files (model order = list order)."""
    keep_array, keep_name = read_keep(keep)
    logits_array, logits_name = read_logits(logits)
    models = [Path(s).stem for s in logits] if is_many(logits) else None
    return validate_outputs(keep_array, logits_array, load_array(labels, "labels"),
                            sources={"keep": keep_name, "logits": logits_name,
                                     "labels": str(labels)},
                            query_names=query_names, model_names=models, balance=balance,
                            population=population)


def read_bundle(path: Source, *, query_names: Sequence[str] | None = None,
                balance: str = "warn", population: np.ndarray | None = None
                ) -> ExternalOutputs:
    """Outputs from one ``.safetensors`` or ``.npz`` file with arrays keep, logits, labels."""
    path = Path(path).expanduser()
    from miaudit.results.external_text import is_text_bundle, read_text_bundle

    if path.is_file() and path.suffix.lower() in SUFFIXES and is_text_bundle(path):
        return read_text_bundle(path, balance=balance, population=population)
    arrays = {key: load_array(path, key) for key in ("keep", "logits", "labels")}
    if query_names is None and path.suffix == ".safetensors":
        query_names = safetensors_query_names(path)
    if query_names is None and path.suffix.lower() == ".npz":
        query_names = npz_query_names(path)
    where = str(path)
    return validate_outputs(arrays["keep"], stacked_logits(arrays["logits"], where),
                            arrays["labels"], sources=dict.fromkeys(arrays, where),
                            query_names=query_names, balance=balance, population=population)


def npz_query_names(path: Path) -> list[str] | None:
    """The bundle's ``queries`` array of query names (strings), None when it has none."""
    with np.load(path, allow_pickle=False) as bundle:
        if "queries" not in bundle.files:
            return None
        names = bundle["queries"]
    if names.dtype.kind not in "US" or names.ndim != 1:
        raise ExternalOutputsError(f"{path}: 'queries' must be a 1-D array of query names "
                                   f"(strings), got {names.dtype} {names.shape}")
    return [str(name) for name in names.astype(str)]


def _natural_key(name: str) -> list[Any]:
    """"experiment-2_16" before "experiment-10_16": digits compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def lira_model_dirs(root: Path) -> list[Path]:
    """The model folders of a LiRA experiment: sub-folders holding keep.npy, natural order."""
    if not root.is_dir():
        raise ExternalOutputsError(f"{root} is not a folder")
    found = [p for p in root.iterdir() if p.is_dir() and (p / "keep.npy").is_file()]
    if not found:
        raise ExternalOutputsError(f"{root} has no model folders (sub-folders with keep.npy); "
                                   "expected the layout of the LiRA code: <root>/<model>/"
                                   "keep.npy and <root>/<model>/logits/<epoch>.npy")
    return sorted(found, key=lambda p: _natural_key(p.name))


def lira_logits_file(model_dir: Path, epoch: int | None) -> Path:
    """``logits/<epoch>.npy`` (the latest epoch unless given), else ``logits.npy``."""
    folder = model_dir / "logits"
    if folder.is_dir():
        if epoch is not None:
            path = folder / f"{epoch:010d}.npy"
            if not path.is_file():
                have = sorted(p.name for p in folder.glob("*.npy"))
                raise ExternalOutputsError(f"{path} does not exist (epochs there: {have})")
            return path
        files = sorted(folder.glob("*.npy"), key=lambda p: _natural_key(p.name))
        if files:
            return files[-1]
    if (model_dir / "logits.npy").is_file():
        return model_dir / "logits.npy"
    raise ExternalOutputsError(f"{model_dir} has no logits: expected logits/<epoch>.npy (run "
                               "the LiRA inference.py) or logits.npy")


def read_lira_experiment(root: Source, *, labels: Source | None = None,
                         epoch: int | None = None, query_names: Sequence[str] | None = None,
                         balance: str = "warn", population: np.ndarray | None = None
                         ) -> ExternalOutputs:
    """Outputs from an experiment folder of the official LiRA code (see the module
    docstring). ``labels`` defaults to ``<root>/y_train.npy``; like the official score.py it
    may be longer than the N samples the models were queried on (the first N are used)."""
    root = Path(root).expanduser()
    dirs = lira_model_dirs(root)
    labels_path = Path(labels).expanduser() if labels is not None else root / "y_train.npy"
    if not labels_path.is_file():
        raise ExternalOutputsError(f"{path_problem(labels_path)}; pass labels= (an .npy of "
                                   "the N class indices)")
    keep, keep_name = read_keep([d / "keep.npy" for d in dirs])
    logits, logits_name = read_logits([lira_logits_file(d, epoch) for d in dirs])
    label_array = load_array(labels_path, "labels")
    if label_array.ndim == 1 and len(label_array) > keep.shape[1]:
        label_array = label_array[: keep.shape[1]]  # the official dataset_size truncation
    return validate_outputs(keep, logits, label_array,
                            sources={"keep": keep_name, "logits": logits_name,
                                     "labels": str(labels_path)},
                            query_names=query_names, model_names=[d.name for d in dirs],
                            balance=balance, population=population)


def read_any(path: Source, **options: Any) -> ExternalOutputs:
    """A folder is read as a LiRA experiment, a file as a bundle."""
    path = Path(path).expanduser()
    return read_lira_experiment(path, **options) if path.is_dir() else read_bundle(path,
                                                                                   **options)
