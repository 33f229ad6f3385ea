"""Pooled and per-target ROC curves of a run, resampled on one log-spaced FPR grid."""

from __future__ import annotations

from typing import Any

import numpy as np

from miaudit.reporting.figures import family, log_grid, resample_roc
from miaudit.reporting.run_view import RunView
from miaudit.stats import metrics


def pooled_floor(members: np.ndarray) -> float:
    """The smallest non-zero FPR the pooled ROC can reach: one false positive."""
    return 1.0 / max(1, int((~members).sum()))


BAND_PERCENTILES = (25.0, 75.0)
BAND_MIN_FALSE_POSITIVES = 10


def attack_curve(label: str, scores: np.ndarray, members: np.ndarray,
                 grid: np.ndarray) -> dict[str, Any]:
    """Pooled TPR on ``grid`` and, with several targets, the spread of the per-target curves:
    their 25th to 75th percentile at each FPR.

    scores, members: (T, N). A single target's TPR at FPR k / n (n its non-members) rests on
    k false positives; below 10 it is mostly noise (its interval spans zero), so the band
    starts at FPR = 10 / n (``band_floor``)."""
    fpr, tpr, _ = metrics.roc_curve(scores.ravel(), members.ravel())
    curve: dict[str, Any] = {"label": label, "grid": grid, "tpr": resample_roc(fpr, tpr, grid),
                             "band_low": None, "band_high": None}
    if len(scores) > 1:
        per_target = np.stack([resample_roc(*metrics.roc_curve(s, m)[:2], grid)
                               for s, m in zip(scores, members)])
        low, high = np.percentile(per_target, BAND_PERCENTILES, axis=0)
        floor = BAND_MIN_FALSE_POSITIVES / max(1, int((~members).sum(1).min()))
        curve.update(band_low=low, band_high=high, band_floor=min(floor, 1.0))
    return curve


def family_curves(view: RunView) -> tuple[dict[str, list[dict[str, Any]]], float]:
    """{family: curves of its attacks, labelled with AUC}, and the common FPR floor."""
    members = view.members
    floor = pooled_floor(members)
    grid = log_grid(floor)
    panels: dict[str, list[dict[str, Any]]] = {}
    for label, attack in view.attacks.items():
        curve = attack_curve(f"{label} (AUC {attack.auc:.3f})", view.scores(label), members, grid)
        panels.setdefault(family(attack.name), []).append(curve)
    return panels, floor
