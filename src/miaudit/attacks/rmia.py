"""RMIA, the relative membership-inference attack (Zarifzadeh et al. 2024, "Low-Cost High-Power
Membership Inference Attacks", Sec. 3, Eqs. 2-4 and App. B.2), and the simplified score of the
spiking-network MI study."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import roc_auc_score

from miaudit.attacks._base import Attack, AttackInput
from miaudit.attacks._common import (
    check_models,
    choice,
    columns,
    masked_mean,
    out_mean_with_fallback,
    positive_int,
    query_option,
    target_non_members,
)
from miaudit.registry import ATTACKS

_TINY = np.finfo(np.float64).tiny  # probabilities that underflow are clamped here before log
_PAIRS_PER_CHUNK = 1 << 22  # (x, z) pairs held at once by the vote


def online_prob(log_prob: np.ndarray, keep: np.ndarray, refs: np.ndarray,
                qidx: np.ndarray) -> np.ndarray:
    """Pr(x) = mean p over references, IN and OUT weighted equally (the paper's reference
    models are half IN, half OUT; the research code balances them by truncation). A sample
    with only one kind of reference uses that kind."""
    mean_in, _ = masked_mean(log_prob, keep, refs, qidx, member=True, transform=np.exp)
    mean_out, _ = masked_mean(log_prob, keep, refs, qidx, member=False, transform=np.exp)
    return np.where(np.isnan(mean_in), mean_out,
                    np.where(np.isnan(mean_out), mean_in, 0.5 * (mean_in + mean_out)))


def offline_prob(prob_out: np.ndarray, a: float) -> np.ndarray:
    """Offline Pr(x) = ((1 + a) Pr_OUT(x) + (1 - a)) / 2 (paper App. B.2.2): a linear
    approximation of the missing IN models' probability."""
    return 0.5 * ((1.0 + a) * prob_out + (1.0 - a))


def log_ratio(log_prob_target: np.ndarray, prob_x: np.ndarray) -> np.ndarray:
    """log (p_theta(x) / Pr(x)), in log space so tiny probabilities do not overflow."""
    return np.maximum(log_prob_target, np.log(_TINY)) - np.log(np.maximum(prob_x, _TINY))


def relative_score(ratio_x: np.ndarray, ratio_z: np.ndarray, gamma: float,
                   reduce: str) -> np.ndarray:
    """Score(x) = fraction of z with LR(x, z) = ratio(x) / ratio(z) >= gamma (paper Eq. 4).

    ratio_x (N, Q'), ratio_z (Z, Q') are log ratios. ``mean``: per-query fractions averaged
    (a sort and a binary search per query, O((N + Z) log Z)). ``vote``: a z counts when the
    test passes for a strict majority of the queries (the research code's vote; ties fail),
    which needs every (x, z) pair: O(N Z Q'), done in chunks of x.
    """
    cutoff = ratio_x - np.log(gamma)  # LR >= gamma  <=>  log ratio(z) <= cutoff(x)
    if reduce == "mean":
        fractions = [np.searchsorted(np.sort(ratio_z[:, q]), cutoff[:, q], side="right")
                     for q in range(ratio_x.shape[1])]
        return np.mean(fractions, axis=0) / len(ratio_z)
    queries = ratio_x.shape[1]
    z_rows = np.ascontiguousarray(ratio_z.T)  # (Q', Z): each query's z values contiguous
    chunk = max(1, _PAIRS_PER_CHUNK // len(ratio_z))
    passed = np.empty((min(chunk, len(ratio_x)), len(ratio_z)), dtype=bool)
    count_type = np.uint8 if queries < 256 else np.int32
    scores = np.empty(len(ratio_x))
    for start in range(0, len(ratio_x), chunk):
        stop = min(start + chunk, len(ratio_x))
        votes = np.zeros((stop - start, len(ratio_z)), dtype=count_type)
        for q in range(queries):
            np.less_equal(z_rows[q][None, :], cutoff[start:stop, q, None],
                          out=passed[: stop - start])
            votes += passed[: stop - start]
        scores[start:stop] = np.count_nonzero(votes > queries // 2, axis=1) / len(ratio_z)
    return scores

@ATTACKS.register("rmia")
class RMIA(Attack):
    """RMIA (Zarifzadeh et al. 2024) on the true-class softmax probability p.

    Score(x) = Pr_z[LR(x, z) >= gamma], LR(x, z) = (p(x|theta) / Pr(x)) / (p(z|theta) / Pr(z)),
    Pr(.) = mean p over reference models; z = population samples (the target's non-members,
    as in the authors' research code).

    Options:
      offline (bool, False): OUT references only, Pr(x) = ((1 + a) Pr_OUT(x) + 1 - a) / 2.
      a (float | None, None): offline interpolation; None tunes it as the paper does (App.
        B.2.2): the first reference model is attacked with the others as references, for a in
        ``a_grid`` (default 0, 0.1, ..., 1), and the a with the best AUC is kept
        (``last_info``). Tuning uses ``tune_size`` seeded samples as x and as z.
      gamma (float, 2.0): the LR threshold (research-code default; ML Privacy Meter v2 uses 1).
      reduce ("vote" | "mean", "vote"): over query columns, a strict majority vote of the
        per-query tests (research code) or the mean of per-query scores.
      num_z (int | None, None = all): a seeded subset of the target's non-members as z.
        The vote costs O(N * num_z * Q); the mean O((N + num_z) log num_z).
      seed (int, 0), queries (list[str] | None), tune_size (int, 2000), a_grid (list[float]).
    """

    def __init__(self, offline: bool = False, a: float | None = None, gamma: float = 2.0,
                 reduce: str = "vote", num_z: int | None = None, seed: int = 0,
                 queries: list[str] | None = None, tune_size: int = 2000,
                 a_grid: list[float] | None = None):
        if not isinstance(offline, bool):
            raise ValueError("option 'offline' must be a boolean")
        if a is not None and (not offline or not 0.0 <= float(a) <= 1.0):
            raise ValueError(f"option 'a' must be in [0, 1] and needs offline=true, got {a!r}")
        if not float(gamma) > 0.0:
            raise ValueError(f"option 'gamma' must be positive, got {gamma!r}")
        grid = np.round(np.linspace(0.0, 1.0, 11), 10) if a_grid is None else np.asarray(a_grid)
        if grid.ndim != 1 or not len(grid) or ((grid < 0) | (grid > 1)).any():
            raise ValueError(f"option 'a_grid' must be a list of values in [0, 1], got {a_grid}")
        self.offline, self.a, self.gamma = offline, None if a is None else float(a), float(gamma)
        self.reduce = choice(reduce, "reduce", ("vote", "mean"))
        self.num_z = positive_int(num_z, "num_z", allow_none=True)
        self.tune_size = positive_int(tune_size, "tune_size")
        self.seed, self.a_grid = int(seed), [float(v) for v in grid]
        self.queries = query_option(queries)
        self.last_info: dict = {}

    def reference_prob(self, log_prob: np.ndarray, keep: np.ndarray, refs: np.ndarray,
                       qidx: np.ndarray) -> tuple[np.ndarray, int]:
        """Online Pr(x), or offline Pr_OUT(x) (before the a-interpolation)."""
        if not self.offline:
            return online_prob(log_prob, keep, refs, qidx), 0
        return out_mean_with_fallback(log_prob, keep, refs, qidx, transform=np.exp)

    def score(self, data: AttackInput, target: int, references: np.ndarray) -> np.ndarray:
        refs = check_models(data, target, references, "rmia")
        qidx = data.query_index(self.queries)
        log_prob = data.signal("log_prob")
        rng = np.random.default_rng(self.seed)
        self.last_info = {}
        a = self.a if self.a is not None or not self.offline else self.tune_a(data, refs, qidx)
        prob, missing = self.reference_prob(log_prob, data.keep, refs, qidx)
        if self.offline:
            prob = offline_prob(prob, a)
        ratio = log_ratio(columns(log_prob[target], qidx), prob)
        population = target_non_members(data, target, self.num_z, rng)
        self.last_info.update({"a": a, "num_z": int(len(population)),
                               "samples_without_out_refs": missing})
        return relative_score(ratio, ratio[population], self.gamma, self.reduce)

    def tune_a(self, data: AttackInput, refs: np.ndarray, qidx: np.ndarray) -> float:
        """Pick a by attacking refs[0] with refs[1:] as references (paper App. B.2.2)."""
        if len(refs) < 2:
            raise ValueError("rmia offline with a=None tunes 'a' on the reference models and "
                             "needs at least 2 of them; give 'a' explicitly")
        pseudo, others = refs[0], refs[1:]
        log_prob = data.signal("log_prob")
        rng = np.random.default_rng(self.seed)
        samples = data.keep.shape[1]
        x = np.sort(rng.choice(samples, min(self.tune_size, samples), replace=False))
        if data.keep[pseudo, x].all() or not data.keep[pseudo, x].any():
            raise ValueError("rmia: the tuning samples need members and non-members of the "
                             "tuning model; raise 'tune_size'")
        z = target_non_members(data, pseudo, min(self.num_z or samples, self.tune_size), rng)
        prob_out, _ = self.reference_prob(log_prob, data.keep, others, qidx)
        observed = columns(log_prob[pseudo], qidx)
        aucs = []
        for a in self.a_grid:  # a loop over the grid; each attack is vectorized
            ratio = log_ratio(observed, offline_prob(prob_out, a))
            scores = relative_score(ratio[x], ratio[z], self.gamma, self.reduce)
            aucs.append(float(roc_auc_score(data.keep[pseudo, x], scores)))
        best = self.a_grid[int(np.argmax(aucs))]
        self.last_info.update({"a_tuning_model": int(pseudo), "a_grid_auc": dict(
            zip([f"{v:g}" for v in self.a_grid], aucs, strict=True))})
        return best


@ATTACKS.register("rmia_simple")
class RMIASimple(Attack):
    """The spiking-network MI study's simplified "RMIA": score(x) = p_target(x) / mean over
    references of p_ref(x); no population z, no gamma. Returned as the log of the ratio
    (same ranking), averaged over the ``queries`` columns (all by default).

    Options: ``references`` ("all" | "out", "all"): average over every reference model (the
    study's choice) or only those that did not train on x (falling back to all for samples
    that are IN everywhere); ``queries``.
    """

    def __init__(self, references: str = "all", queries: list[str] | None = None):
        self.references = choice(references, "references", ("all", "out"))
        self.queries = query_option(queries)
        self.last_info: dict = {}

    def score(self, data: AttackInput, target: int, references: np.ndarray) -> np.ndarray:
        refs = check_models(data, target, references, "rmia_simple")
        qidx = data.query_index(self.queries)
        log_prob = data.signal("log_prob")
        if self.references == "all":
            prob, _ = masked_mean(log_prob, data.keep, refs, qidx, member=None, transform=np.exp)
            missing = 0
        else:
            prob, missing = out_mean_with_fallback(log_prob, data.keep, refs, qidx,
                                                   transform=np.exp)
        self.last_info = {"samples_without_out_refs": missing}
        return log_ratio(columns(log_prob[target], qidx), prob).mean(axis=1)
