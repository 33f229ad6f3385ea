"""The record of outputs made elsewhere (:class:`ExternalOutputs`) and the checks every reader
of such outputs shares (:mod:`miaudit.results.external` for class outputs,
:mod:`miaudit.results.external_text`
for language models' per-token outputs)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from miaudit.errors import ExternalOutputsError

# the readers' logger, by the name users configure (the readers live in miaudit.results.external)
log = logging.getLogger("miaudit.results.external")

BALANCE_POLICIES = ("error", "warn", "ignore")


@dataclass(frozen=True)
class ExternalOutputs:
    """Validated outputs of M models on N samples: keep (M, N) bool, logits (M, N, Q, C)
    float32, labels (N,) int64 in 0..C-1, the Q query names and the M model names."""

    keep: np.ndarray
    logits: np.ndarray
    labels: np.ndarray
    query_names: list[str]
    model_names: list[str]
    modality: str = "classes"  # "text": language models' per-token outputs (external_text)
    texts: list[str] | None = None
    tokens: np.ndarray | None = None  # text: (N, 1 + T) ids, column 0 unused (external_text)

    @property
    def num_models(self) -> int:
        return self.keep.shape[0]

    @property
    def num_samples(self) -> int:
        return self.keep.shape[1]

    @property
    def num_classes(self) -> int:
        return self.logits.shape[-1]

    def attack_input(self, population: np.ndarray | None = None) -> Any:
        """These outputs as the attacks' :class:`~miaudit.attacks._base.AttackInput`."""
        from miaudit.attacks._base import AttackInput

        extra = {} if population is None else {"population": np.asarray(population, np.int64)}
        return AttackInput(logits=self.logits, labels=self.labels, keep=self.keep,
                           query_names=list(self.query_names), modality=self.modality,
                           texts=self.texts, tokens=self.tokens, **extra)


def as_bool_keep(keep: np.ndarray, where: str) -> np.ndarray:
    """Bool keep; integer or float 0/1 accepted."""
    if keep.dtype == np.bool_:
        return keep
    if keep.dtype.kind not in "biuf":
        raise ExternalOutputsError(f"{where}: keep must be boolean, got dtype {keep.dtype}")
    bad = (keep != 0) & (keep != 1)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ExternalOutputsError(
            f"{where}: keep must be boolean (True/False or 0/1); {int(bad.sum())} entries are "
            f"not, the first {keep[first].item()!r} at index {first}")
    return keep == 1


def check_balance(keep: np.ndarray, policy: str, where: str,
                  population: np.ndarray | None) -> None:
    """Samples IN for every model or for none (population samples may be IN for none) are an
    error, a warning or ignored, by ``policy`` (one of :data:`BALANCE_POLICIES`). Population
    indices outside the samples raise naming them."""
    if population is not None and np.size(population):
        indices = np.asarray(population, dtype=np.int64)
        if indices.min() < 0 or indices.max() >= keep.shape[1]:
            raise ExternalOutputsError(
                f"{where}: population indices must lie in 0..{keep.shape[1] - 1} (the "
                f"samples), got {indices.min()}..{indices.max()}")
    if policy == "ignore":
        return
    count = keep.sum(axis=0)
    always, never = count == keep.shape[0], count == 0
    if population is not None:
        never[np.asarray(population, dtype=np.int64)] = False
    if not (always.any() or never.any()):
        return
    first = int(np.flatnonzero(always | never)[0])
    message = (f"{where}: {int(always.sum())} samples are IN for every model and "
               f"{int(never.sum())} are IN for none (the first: sample {first}); attacks need "
               "models of both kinds for each sample. Train more models with a balanced keep "
               "matrix (each sample IN for about half), or drop these samples")
    if policy == "error":
        raise ExternalOutputsError(message)
    log.warning(message)
