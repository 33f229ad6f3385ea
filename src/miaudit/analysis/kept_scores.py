"""What a paired comparison needs of one audit, kept beside its results.json.

A paired comparison of two audits (:mod:`miaudit.analysis.paired_runs`) needs both audits'
per-sample scores, and those live in the run directories. A run directory that does not
outlive its machine or session takes them with it, and the partner audit, run later, has
nothing to pair with. This file keeps them: the targets, the audited pool indices, the
memberships (targets x audited) and the named attacks' scores as stored (float64: metrics
recomputed from them equal the run's), with the digest of the results.json they belong to, so
that a reader uses them for that result only. ~2.7 MB per attack for 16 targets x 21,600
samples (random-looking floats barely compress).
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from miaudit._runtime.io import write_bytes
from miaudit.errors import RunDirError

if TYPE_CHECKING:
    from miaudit.reporting.run_view import RunView
    from miaudit.results import Results

SUFFIX = "scores.npz"  # beside <stem>.results.json: <stem>.scores.npz


@dataclass(frozen=True)
class KeptScores:
    """The kept scores of one audit; stands in for a run directory's
    :class:`~miaudit.reporting.run_view.RunView` in :func:`paired_run_difference`."""

    root: Path  # the file, named as a RunView's folder is in messages
    result_digest: str  # the sha256 of the results.json these scores belong to
    targets: list[int]
    audited: np.ndarray  # (A,) pool indices
    members: np.ndarray  # (T, A) bool
    by_label: dict[str, np.ndarray]  # attack label -> (T, A) scores
    SUFFIX: ClassVar[str] = SUFFIX

    @classmethod
    def of(cls, results: Results, labels: Iterable[str] | None = None) -> KeptScores:
        """The scores of attacks ``labels`` (default: every attack) of ``results`` loaded
        from a run directory (:meth:`miaudit.Results.load`), read into memory."""
        labels = sorted(set(labels if labels is not None else results.attacks))
        read = {label: results.scores(label) for label in labels}
        members = next(iter(read.values()))[1] if read else np.zeros((0, 0), bool)
        return cls(root=results.run_dir, result_digest=results.digest or "",
                   targets=list(results.summary.targets), audited=results.audited,
                   members=members, by_label={label: scores for label, (scores, _) in read.items()})

    def has_scores(self) -> bool:
        return True

    def scores_problem(self) -> str | None:
        return None

    def scores(self, label: str) -> np.ndarray:
        if label not in self.by_label:
            raise ValueError(f"{self.root} keeps no scores of attack {label!r} (it keeps "
                             f"{sorted(self.by_label)}); keep them again where the run "
                             "directory is")
        return self.by_label[label]


def keep_scores(path: Path, run: RunView | KeptScores, labels: Iterable[str],
                result_digest: str) -> None:
    """Write the scores of attacks ``labels`` of ``run`` (a run directory that holds them, or
    scores read from one), with what pairing needs besides, to ``path``, atomically."""
    labels = sorted(set(labels))
    arrays = {"result_digest": np.array(result_digest), "labels": np.array(labels),
              "targets": np.asarray(run.targets, np.int64),
              "audited": np.asarray(run.audited, np.int64),
              "members": np.asarray(run.members, bool)}
    arrays.update({f"scores_{i}": np.asarray(run.scores(label), np.float64)
                   for i, label in enumerate(labels)})
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    write_bytes(path, buffer.getvalue())


def read_kept_scores(path: Path) -> KeptScores:
    """The scores kept in ``path``; RunDirError naming it when it is unreadable, damaged (the
    zip's checksums) or inconsistent."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as stored:
            arrays = {name: stored[name] for name in stored.files}
        labels = [str(label) for label in arrays["labels"]]
        kept = KeptScores(root=path, result_digest=str(arrays["result_digest"]),
                          targets=[int(t) for t in arrays["targets"]],
                          audited=arrays["audited"], members=arrays["members"].astype(bool),
                          by_label={label: arrays[f"scores_{i}"]
                                    for i, label in enumerate(labels)})
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as error:
        raise RunDirError(f"cannot read kept scores {path}: {error}; delete it and keep them "
                          "again where the run directory is") from None
    shape = (len(kept.targets), len(kept.audited))
    if kept.members.shape != shape or any(s.shape != shape for s in kept.by_label.values()):
        raise RunDirError(f"kept scores {path} are inconsistent (memberships and scores are "
                          f"not {shape}); delete it and keep them again")
    return kept
