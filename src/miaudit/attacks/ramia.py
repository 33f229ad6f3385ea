"""RaMIA, range membership inference (Tao & Shokri, SaTML 2025, "Range membership inference
attacks").

A *range* is a set of points around a query: here the query augmentations the audit already
makes of each audited record (flips, shifts, crops, input dropout; :mod:`miaudit.queries`).
A range is a member when it contains a training point; the audit's ranges are centered on its
records, so a range is a member exactly when its record is, and the audit's ROC over records
(with its crossed-bootstrap intervals) is the range-level ROC. Each point of the range is
scored by a point attack, LiRA's online per-query likelihood ratio (Carlini et al. 2022,
Alg. 1: log N(phi; mu_in, s_in^2) - log N(phi; mu_out, s_out^2) with the references' per-query
Gaussians), and the points' scores are aggregated by RaMIA's **trimmed average**: points of a
range far from the training point look like non-members and drag a plain mean down, so the
lowest fraction of the scores is dropped before averaging (the paper's aggregation; the
authors' code, ML Privacy Meter's modules/ramia, trims one side, ``bottom`` keeping the
largest scores).

Leaving the exact point out of the range (``queries`` without ``identity``) asks RaMIA's
question proper: is anything in this range a member, when only variants of the record are
queried?
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

from miaudit.attacks._base import Attack, AttackInput, AttackResult
from miaudit.attacks._common import check_models, choice, columns, query_option
from miaudit.attacks.lira import fill_missing, finalize_std, fit_group, pooled_std
from miaudit.registry import ATTACKS

TRIMS = ("bottom", "top", "both", "none")


def trimmed_average(scores: np.ndarray, ratio: float, trim: str = "bottom") -> np.ndarray:
    """(N, Q) per-point scores -> (N,): the mean after dropping ``ratio`` of the Q points
    (rounded down, at least one point kept) from the bottom (the lowest scores), the top, or
    ``ratio / 2`` from each end (``both``); ``none``: the plain mean."""
    scores = np.sort(np.asarray(scores, dtype=np.float64), axis=1)
    points = scores.shape[1]
    if trim == "none":
        return scores.mean(axis=1)
    dropped = min(int(ratio * points), points - 1)
    if trim == "bottom":
        return scores[:, dropped:].mean(axis=1)
    if trim == "top":
        return scores[:, : points - dropped].mean(axis=1)
    low = min(int(ratio / 2 * points), (points - 1) // 2)
    return scores[:, low: points - low].mean(axis=1)


@ATTACKS.register("ramia")
class RaMIA(Attack):
    """RaMIA over the audit's query augmentations (module docstring).

    Options:
      trim ("bottom" | "top" | "both" | "none", "bottom"): which scores the trimmed average
        drops.
      trim_ratio (float in [0, 1), 0.5): the fraction of the range's points dropped.
      queries (list[str] | None): the points of the range (all scored queries by default;
        leave out ``identity`` to query only variants of the record).
      fixed_variance (bool, True): one global std for the per-point Gaussians (Carlini et al.
        2022, Sec. VI-B advise it below about 64 references).
    """

    min_references = 2

    def __init__(self, trim: str = "bottom", trim_ratio: float = 0.5,
                 queries: list[str] | None = None, fixed_variance: bool = True):
        self.trim = choice(trim, "trim", TRIMS)
        if isinstance(trim_ratio, bool) or not isinstance(trim_ratio, (int, float)) \
                or not 0.0 <= trim_ratio < 1.0:
            raise ValueError(f"option 'trim_ratio' must be a number in [0, 1), got "
                             f"{trim_ratio!r}")
        if not isinstance(fixed_variance, bool):
            raise ValueError(f"option 'fixed_variance' must be a boolean, got {fixed_variance!r}")
        self.trim_ratio, self.fixed_variance = float(trim_ratio), fixed_variance
        self.queries = query_option(queries)

    def point_scores(self, data: AttackInput, target: int, references: np.ndarray
                     ) -> tuple[np.ndarray, dict]:
        """(N, Q') LiRA online per-point log-likelihood ratios and the fallbacks taken."""
        refs = check_models(data, target, references, "ramia", self.min_references)
        qidx = data.query_index(self.queries)
        signal = data.signal("logit_conf")
        observed = columns(signal[target], qidx)
        inside = fit_group(signal, data.keep, refs, qidx, True, "median", True)
        out = fit_group(signal, data.keep, refs, qidx, False, "median", True)
        info = {"samples_without_in_refs": fill_missing(inside, out, "IN"),
                "samples_without_out_refs": fill_missing(out, inside, "OUT")}
        global_std = pooled_std(inside, out)
        log_in = norm.logpdf(observed, inside.center,
                             finalize_std(inside, global_std, self.fixed_variance))
        log_out = norm.logpdf(observed, out.center,
                              finalize_std(out, global_std, self.fixed_variance))
        return log_in - log_out, info

    def evaluate(self, data: AttackInput, target: int, references: np.ndarray) -> AttackResult:
        points, info = self.point_scores(data, target, references)
        info["range_points"] = int(points.shape[1])
        return AttackResult(trimmed_average(points, self.trim_ratio, self.trim), info)
