"""RMIA, the relative membership-inference attack (Zarifzadeh et al. 2024, "Low-Cost High-Power
Membership Inference Attacks", Sec. 3, Eqs. 2-4 and App. B.2), and the simplified score of the
spiking-network MI study."""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp
from sklearn.metrics import roc_auc_score

from miaudit.attacks._base import Attack, AttackInput, AttackResult
from miaudit.attacks._common import (
    POPULATION_CHOICES,
    balanced_mean,
    check_models,
    choice,
    columns,
    masked_mean,
    out_mean_with_fallback,
    population_samples,
    positive_int,
    query_option,
)
from miaudit.registry import ATTACKS

_TINY = np.finfo(np.float64).tiny  # probabilities that underflow are clamped here before log
_PAIRS_PER_CHUNK = 1 << 22  # (x, z) pairs held at once by the vote


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

    Score(x) = Pr_z[LR(x, z) >= gamma], LR(x, z) = (p(x|theta) / Pr(x)) / (p(z|theta) / Pr(z))
    (paper Eqs. 2-4), Pr(.) = mean p over reference models, z = population samples.

    Options:
      offline (bool, False): OUT references only, Pr(x) = ((1 + a) Pr_OUT(x) + 1 - a) / 2.
        Online, Pr(x) = (mean over IN references + mean over OUT references) / 2
        (``balanced_mean``: the paper's references are half IN, half OUT).
      a (float | None, None): offline interpolation; None tunes it as the paper does (App.
        B.2.2): the first reference model is attacked with the others as references, for a in
        ``a_grid`` (default 0, 0.1, ..., 1), and the a with the best AUC is kept (``info``).
        Tuning uses ``tune_size`` seeded samples as x (never population samples) and z.
      gamma (float, 2.0): the LR threshold (research-code default; ML Privacy Meter v2 uses 1).
      reduce ("vote" | "mean", "vote"): over query columns, a strict majority vote of the
        per-query tests (research code) or the mean of per-query scores.
      population ("disjoint" | "target_nonmembers", "disjoint"): where z comes from.
        "disjoint": ``data.population``, samples no model trained on and never evaluated.
        Threat model: the attacker holds data from the training distribution, disjoint from
        the target's training set, and no membership labels (as ML Privacy Meter's population
        set). "target_nonmembers": the target's non-members among the evaluated samples (the
        authors' research-code convention, for comparison; it assumes the attacker knows the
        target's membership labels, and z contains the evaluated non-members, x included).
      num_z (int | None, None = all): a seeded subset of the population as z.
        The vote costs O(N * num_z * Q); the mean O((N + num_z) log num_z).
      seed (int, 0), queries (list[str] | None), tune_size (int, 2000), a_grid (list[float]).
    """

    modalities = ("classes", "text")  # reads per-sample signals only

    def __init__(self, offline: bool = False, a: float | None = None, gamma: float = 2.0,
                 reduce: str = "vote", population: str = "disjoint", num_z: int | None = None,
                 seed: int = 0, queries: list[str] | None = None, tune_size: int = 2000,
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
        self.population = choice(population, "population", POPULATION_CHOICES)
        self.num_z = positive_int(num_z, "num_z", allow_none=True)
        self.tune_size = positive_int(tune_size, "tune_size")
        self.seed, self.a_grid = int(seed), [float(v) for v in grid]
        self.queries = query_option(queries)
        self.needs_population = self.population == "disjoint"
        # tuning a attacks one reference with the others, so it needs two
        self.min_references = 2 if offline and a is None else 1

    def reference_prob(self, log_prob: np.ndarray, keep: np.ndarray, refs: np.ndarray,
                       qidx: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
        """Online Pr(x), or offline Pr_OUT(x) (before the a-interpolation)."""
        if not self.offline:
            return balanced_mean(log_prob, keep, refs, qidx, transform=np.exp)
        prob, missing = out_mean_with_fallback(log_prob, keep, refs, qidx, transform=np.exp)
        return prob, {"samples_without_out_refs": missing}

    def evaluate(self, data: AttackInput, target: int, references: np.ndarray) -> AttackResult:
        label = "rmia offline with a=None (it tunes a)" if self.min_references == 2 else "rmia"
        refs = check_models(data, target, references, label, self.min_references)
        qidx = data.query_index(self.queries)
        log_prob = data.signal("log_prob")
        info: dict = {}
        a = self.a if self.a is not None or not self.offline else \
            self.tune_a(data, refs, qidx, info)
        prob, missing = self.reference_prob(log_prob, data.keep, refs, qidx)
        if self.offline:
            prob = offline_prob(prob, a)
        ratio = log_ratio(columns(log_prob[target], qidx), prob)
        population = population_samples(data, target, self.population, self.num_z,
                                        np.random.default_rng(self.seed), "rmia")
        info.update({"a": a, "num_z": int(len(population)), **missing})
        return AttackResult(relative_score(ratio, ratio[population], self.gamma, self.reduce),
                            info)

    def tune_a(self, data: AttackInput, refs: np.ndarray, qidx: np.ndarray,
               info: dict) -> float:
        """Pick a by attacking refs[0] with refs[1:] as references (paper App. B.2.2); the
        tuning diagnostics go into ``info``."""
        pseudo, others = refs[0], refs[1:]
        log_prob = data.signal("log_prob")
        rng = np.random.default_rng(self.seed)
        candidates = np.setdiff1d(np.arange(data.keep.shape[1]), data.population)
        x = np.sort(rng.choice(candidates, min(self.tune_size, len(candidates)), replace=False))
        if data.keep[pseudo, x].all() or not data.keep[pseudo, x].any():
            raise ValueError("rmia: the tuning samples need members and non-members of the "
                             "tuning model; raise 'tune_size'")
        z = population_samples(data, pseudo, self.population,
                               min(self.num_z or len(candidates), self.tune_size), rng, "rmia")
        prob_out, _ = self.reference_prob(log_prob, data.keep, others, qidx)
        observed = columns(log_prob[pseudo], qidx)
        aucs = []
        for a in self.a_grid:  # a loop over the grid; each attack is vectorized
            ratio = log_ratio(observed, offline_prob(prob_out, a))
            scores = relative_score(ratio[x], ratio[z], self.gamma, self.reduce)
            aucs.append(float(roc_auc_score(data.keep[pseudo, x], scores)))
        info.update({"a_tuning_model": int(pseudo), "a_grid_auc": dict(
            zip([f"{v:g}" for v in self.a_grid], aucs, strict=True))})
        return self.a_grid[int(np.argmax(aucs))]


@ATTACKS.register("rmia_simple")
class RMIASimple(Attack):
    """The spiking-network MI study's simplified "RMIA" (its Table 1): score(x) =
    Pr(x|theta) / Pr(x), Pr(x) = (1/2n)(sum over IN references of Pr(x|theta') + sum over OUT
    references of Pr(x|theta')); no population z, no gamma. Returned as the log of the ratio
    (same ranking). Several ``queries`` columns (all by default) combine as for Attack-P and
    Attack-R: Pr(x|theta) is the true-class probability averaged over the queries (the study's
    Eq. 8, input dropout's mean over passes), for the target and for every reference.

    Options: ``references`` ("balanced" | "plain" | "out", "balanced"):
      "balanced": Pr(x) = (mean over IN references + mean over OUT references) / 2, which is
        the study's (1/2n)(sum_IN + sum_OUT) exactly under its 2n design (n IN and n OUT
        references per x). Samples with references of one kind only use that kind.
      "plain": the mean over every reference model. It equals "balanced" under the 2n design
        but leaks membership under the rotation protocol (M models, each the target in turn,
        the others its references): a target member has one IN reference fewer than a
        non-member, so when the references memorize, Pr(x) is lower for members and the
        score rises for them even if the target memorizes nothing. Kept for comparison only.
      "out": only the references that did not train on x (falling back to all for samples
        that are IN everywhere).
    ``combine`` ("probability" | "log_ratio", "probability"): "probability" is the ratio
      of the query-averaged probabilities above; "log_ratio" the mean over queries of the
      per-query log ratios (this package's rule before; kept for comparison).
    ``queries``.
    """

    modalities = ("classes", "text")  # reads per-sample signals only

    def __init__(self, references: str = "balanced", queries: list[str] | None = None,
                 combine: str = "probability"):
        self.references = choice(references, "references", ("balanced", "plain", "out"))
        self.combine = choice(combine, "combine", ("probability", "log_ratio"))
        self.queries = query_option(queries)

    def evaluate(self, data: AttackInput, target: int, references: np.ndarray) -> AttackResult:
        refs = check_models(data, target, references, "rmia_simple")
        qidx = data.query_index(self.queries)
        log_prob = data.signal("log_prob")
        if self.references == "balanced":
            prob, info = balanced_mean(log_prob, data.keep, refs, qidx, transform=np.exp)
        elif self.references == "plain":
            prob, _ = masked_mean(log_prob, data.keep, refs, qidx, member=None, transform=np.exp)
            info = {}
        else:
            prob, missing = out_mean_with_fallback(log_prob, data.keep, refs, qidx,
                                                   transform=np.exp)
            info = {"samples_without_out_refs": missing}
        target_log_prob = columns(log_prob[target], qidx)
        if self.combine == "log_ratio":
            return AttackResult(log_ratio(target_log_prob, prob).mean(axis=1), info)
        mean_log_prob = logsumexp(target_log_prob, axis=1) - np.log(len(qidx))
        return AttackResult(log_ratio(mean_log_prob, prob.mean(axis=1)), info)
