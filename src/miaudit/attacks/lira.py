"""LiRA, the likelihood-ratio attack (Carlini et al. 2022, "Membership Inference Attacks From
First Principles", Sec. IV, Algorithm 1)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from miaudit.attacks._base import Attack, AttackInput, AttackResult
from miaudit.attacks._common import (
    check_models,
    choice,
    columns,
    common_size,
    masked_mean,
    masked_median,
    masked_sq_dev,
    query_option,
)
from miaudit.registry import ATTACKS

# A per-sample std below this fraction of the pooled std is treated as degenerate: it would
# turn the log-density into +-inf (the official code only adds 1e-30).
_STD_FLOOR = 1e-3


@dataclass
class Gaussians:
    """Per-sample, per-query Gaussian fitted over one group (IN or OUT) of references."""

    center: np.ndarray  # (N, Q') median or mean
    std: np.ndarray  # (N, Q') per-sample std (np.std, ddof=0), before fallbacks
    count: np.ndarray  # (N,) references in the group
    sq_dev: np.ndarray  # (N, Q') sum of squared deviations from the group mean


def fit_group(signal: np.ndarray, keep: np.ndarray, references: np.ndarray, qidx: np.ndarray,
              member: bool, center: str, equalize: bool) -> Gaussians:
    limit = common_size(keep, references, member) if equalize else None
    mean, count = masked_mean(signal, keep, references, qidx, member, limit=limit)
    sq_dev = masked_sq_dev(signal, keep, references, qidx, member, np.nan_to_num(mean),
                           limit=limit)
    with np.errstate(invalid="ignore", divide="ignore"):
        std = np.sqrt(sq_dev / count[:, None])
    middle = mean if center == "mean" else masked_median(signal, keep, references, qidx, member,
                                                         limit=limit)
    return Gaussians(middle, std, count, sq_dev)


def pooled_std(*groups: Gaussians) -> float:
    """One global std: the root mean squared deviation of every reference value from its own
    sample's group mean (the paper's "global variance"; the official code instead takes
    np.std of all raw values, which also counts the spread between samples)."""
    total = sum(float(g.sq_dev[g.count > 0].sum()) for g in groups)
    values = sum(int(g.count.sum()) * g.center.shape[1] for g in groups)
    std = np.sqrt(total / values) if values else 0.0
    return float(std) if std > 0 else 1.0


def stouffer(z: np.ndarray) -> np.ndarray:
    """(N, Q) per-query z-scores combined into one per sample, sum(z) / sqrt(Q): Stouffer's
    method (Stouffer et al. 1949; Whitlock 2005, J. Evol. Biol. 18(5), eq. 1), the one-sided
    test of Q independent standard-normal statistics, under the paper's independence
    assumption for augmentations (Sec. VI-A). Standard normal under the null; never
    saturates, unlike its CDF."""
    return z.sum(axis=1) / np.sqrt(z.shape[1])


def fill_missing(group: Gaussians, other: Gaussians, name: str) -> int:
    """Samples with no reference in ``group`` get the other group's center plus the average
    IN-OUT shift of the samples that have both (in place). Returns how many were filled."""
    missing = group.count == 0
    if not missing.any():
        return 0
    both = (group.count > 0) & (other.count > 0)
    if not both.any():
        raise ValueError(f"lira: no sample has both IN and OUT references, so the {name} "
                         "Gaussian cannot be estimated; use more reference models")
    shift = (group.center[both] - other.center[both]).mean(axis=0)
    group.center[missing] = other.center[missing] + shift
    return int(missing.sum())


def finalize_std(group: Gaussians, global_std: float, fixed: bool) -> np.ndarray:
    """Per-sample std, or the global one where fixed / where fewer than 2 references."""
    if fixed:
        return np.full_like(group.center, global_std)
    std = np.where((group.count >= 2)[:, None], group.std, global_std)
    return np.maximum(std, _STD_FLOOR * global_std)


@ATTACKS.register("lira")
class LiRA(Attack):
    """LiRA (Carlini et al. 2022, Alg. 1) on the logit-scaled confidence phi = log(p/(1-p)).

    Options:
      offline (bool, False): only OUT references; the paper's one-sided test (Sec. IV-C),
        Lambda = Phi(z), z = (phi - mu_out) / sigma_out, with the queries' z combined by
        Stouffer's method (see ``stouffer``). The score is the combined z, which orders samples
        as Phi(z) does: log Phi(z) rounds to exactly 0.0 in float64 once z > ~38 and tied the
        most exposed samples of confident models. The official code uses the two-sided
        log-density instead; we follow the paper.
      fixed_variance (bool, False): one global std for every sample (paper Sec. IV-B); we pool
        the squared deviations from each sample's own group mean (see ``pooled_std``).
      queries (list[str] | None): query columns to use (all by default).
      center ("median" | "mean", "median"): the Gaussian's location; the official code uses the
        median of the reference values (robust to outlier models), the paper writes the mean.
      equalize (bool, True): fit every sample's IN (and OUT) Gaussian on the same number of
        references, the smallest group size over samples, taking each sample's first ones in
        reference order (as the official code truncates). Unequal sizes leak membership:
        under the rotation protocol a target member has one IN reference fewer, and the
        small-sample bias of the std then moved LiRA's null AUC to 0.40 with 7 references.

    Online score = mean over queries of log N(phi; mu_in, s_in^2) - log N(phi; mu_out, s_out^2)
    (the paper's per-query independence assumption for augmentations, Sec. VI-A).
    Samples with fewer than 2 references in a group use the global std; samples with none get
    the other group's center plus the average IN-OUT shift (counted in ``info``). Needs two
    references: with one, no sample has both an IN and an OUT fit to estimate that shift from.
    """

    modalities = ("classes", "text")  # reads per-sample signals only

    min_references = 2
    #: Carlini et al. 2022, Sec. VI-B (Fig. 8): with fewer reference models than about this,
    #: a global variance does better than per-example variances estimated from few values
    PER_EXAMPLE_VARIANCE_MIN_REFERENCES = 64

    def __init__(self, offline: bool = False, fixed_variance: bool = False,
                 queries: list[str] | None = None, center: str = "median",
                 equalize: bool = True):
        for option, value in (("offline", offline), ("fixed_variance", fixed_variance),
                              ("equalize", equalize)):
            if not isinstance(value, bool):
                raise ValueError(f"option {option!r} must be a boolean, got {value!r}")
        self.offline, self.fixed_variance, self.equalize = offline, fixed_variance, equalize
        self.queries = query_option(queries)
        self.center = choice(center, "center", ("median", "mean"))

    def caveats(self, references: int) -> list[str]:
        if self.fixed_variance or references >= self.PER_EXAMPLE_VARIANCE_MIN_REFERENCES:
            return []
        return [f"per-example variance from {references} reference models: Carlini et al. "
                f"2022 (Sec. VI-B) advise a global variance below about "
                f"{self.PER_EXAMPLE_VARIANCE_MIN_REFERENCES} (fixed_variance=true); low-FPR "
                "TPRs can fall below chance"]

    def evaluate(self, data: AttackInput, target: int, references: np.ndarray) -> AttackResult:
        refs = check_models(data, target, references, "lira", self.min_references)
        qidx = data.query_index(self.queries)
        signal = data.signal("logit_conf")
        observed = columns(signal[target], qidx)
        out = fit_group(signal, data.keep, refs, qidx, False, self.center, self.equalize)
        if self.offline:
            if not out.count.any():
                raise ValueError("lira offline: no sample has an OUT reference model")
            filled = self._fill_offline(out, signal, data.keep, refs, qidx)
            std = finalize_std(out, pooled_std(out), self.fixed_variance)
            return AttackResult(stouffer((observed - out.center) / std),
                                {"samples_without_out_refs": filled})
        inside = fit_group(signal, data.keep, refs, qidx, True, self.center, self.equalize)
        info = {"samples_without_in_refs": fill_missing(inside, out, "IN"),
                "samples_without_out_refs": fill_missing(out, inside, "OUT")}
        global_std = pooled_std(inside, out)
        log_in = norm.logpdf(observed, inside.center,
                             finalize_std(inside, global_std, self.fixed_variance))
        log_out = norm.logpdf(observed, out.center,
                              finalize_std(out, global_std, self.fixed_variance))
        return AttackResult((log_in - log_out).mean(axis=1), info)

    def _fill_offline(self, out: Gaussians, signal: np.ndarray, keep: np.ndarray,
                      refs: np.ndarray, qidx: np.ndarray) -> int:
        """Offline, a sample that is IN for every reference has no OUT fit: estimate its OUT
        center from its IN fit shifted by the average OUT-IN difference (``fill_missing``)."""
        if out.count.all():
            return 0
        inside = fit_group(signal, keep, refs, qidx, True, self.center, self.equalize)
        return fill_missing(out, inside, "OUT")
