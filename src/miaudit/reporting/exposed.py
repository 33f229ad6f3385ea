"""The most exposed members of a run: which training samples an attack finds most surely.

``write_exposed_samples`` stores, for the top-k members, their pool index, score, label and
(image data) a uint8 thumbnail, in a small ``exposed.npz`` that the HTML report shows. A sample
is a member of several targets under the rotation protocol; its exposure is its mean score over
those targets, and ``flagged`` counts the targets in which it lies above the pooled threshold of
0.1% FPR (the operating point of Carlini et al. 2022, Sec. IV).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from miaudit._runtime.io import record_digests, write_bytes
from miaudit.auditor.runfiles import EXPOSED_FILE
from miaudit.stats import metrics

FLAG_FPR = 1e-3


def member_exposure(scores: np.ndarray, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N,) mean score of each sample over the targets it is a member of (NaN if none), and
    (N,) how many targets it is a member of."""
    scores, members = np.asarray(scores, dtype=np.float64), np.asarray(members, dtype=bool)
    if scores.shape != members.shape or scores.ndim != 2:
        raise ValueError(f"scores {scores.shape} and members {members.shape} must be equal "
                         "(targets, samples) shapes")
    count = members.sum(0)
    total = np.where(members, scores, 0.0).sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / count, np.nan), count


def flagged_counts(scores: np.ndarray, members: np.ndarray, level: float = FLAG_FPR) -> np.ndarray:
    """(N,) in how many of its member targets each sample scores at or above the pooled
    threshold whose FPR is at most ``level`` (the threshold ``metrics.tpr_at_fpr`` uses)."""
    fpr, tpr, thresholds = metrics.roc_curve(np.ravel(scores), np.ravel(members))
    best = int(np.argmax(np.where(fpr <= level, tpr, -1.0)))
    return ((np.asarray(scores) >= thresholds[best]) & np.asarray(members, dtype=bool)).sum(0)


def thumbnails(x: np.ndarray) -> np.ndarray:
    """(k, C, H, W) floats in [0, 1] -> (k, H, W, C) uint8 (values outside [0, 1] clipped)."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 4 or x.shape[1] not in (1, 3):
        raise ValueError(f"images must be (N, C, H, W) with C 1 or 3; got {x.shape}")
    return np.round(np.clip(x, 0.0, 1.0) * 255).astype(np.uint8).transpose(0, 2, 3, 1)


def write_exposed_samples(run_dir: Path, scores: np.ndarray, members: np.ndarray,
                          x: np.ndarray | None, labels: np.ndarray,
                          class_names: Sequence[str], k: int = 16, *,
                          attack: str = "", texts: Sequence[str] | None = None) -> Path:
    """Write ``run_dir/exposed.npz`` (atomically) for the ``k`` members with the highest mean
    score: ``indices``, ``scores`` (mean member score), ``labels``, ``member_targets``,
    ``flagged`` (see the module docstring), ``class_names``, ``attack`` and, when ``x`` holds
    images (N, C, H, W), ``thumbnails`` (k, H, W, C) uint8. ``x`` is None for tabular data.
    ``texts`` (text data, one per sample) adds ``texts``, the chosen samples' texts.
    Returns the path."""
    scores, members = np.asarray(scores), np.asarray(members, dtype=bool)
    labels = np.asarray(labels)
    exposure, count = member_exposure(scores, members)
    if labels.shape != exposure.shape:
        raise ValueError(f"labels {labels.shape} do not match {exposure.shape[0]} samples")
    candidates = np.flatnonzero(count > 0)
    # Highest exposure first; ties by pool index, so the choice is deterministic.
    order = candidates[np.lexsort((candidates, -exposure[candidates]))][:k]
    arrays = {
        "indices": order.astype(np.int64), "scores": exposure[order],
        "labels": labels[order].astype(np.int64), "member_targets": count[order].astype(np.int64),
        "flagged": flagged_counts(scores, members)[order].astype(np.int64),
        "class_names": np.array([str(c) for c in class_names]), "attack": np.array(str(attack)),
    }
    if x is not None and np.ndim(x) == 4:
        arrays["thumbnails"] = thumbnails(np.asarray(x)[order])
    if texts is not None:
        arrays["texts"] = np.array([str(texts[i]) for i in order], dtype=np.str_)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    path = Path(run_dir) / EXPOSED_FILE
    write_bytes(path, buffer.getvalue())
    record_digests(Path(run_dir), [EXPOSED_FILE])
    return path
