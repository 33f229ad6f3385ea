"""A synthetic audit world whose population-level ROC is known: the ground truth against which
the coverage of miaudit's intervals is checked (``tests/test_intervals.py``,
``benchmarks/interval_coverage.py``).

An attack's score of sample j under model t is

    s_tj = a_t + b_j + m_tj * g_t * u_j + e_tj

with a_t ~ N(0, sd_model^2) a model's offset (training randomness shifts all its scores),
b_j ~ N(0, sd_sample^2) the sample's difficulty (the same for every model: the correlation
of one sample's scores across targets), u_j ~ Gamma(shape, scale) the sample's membership
effect (most samples leak little, a few a lot: the low-FPR tail), g_t ~ LogNormal(0,
sd_strength^2) how strongly model t memorizes, m_tj membership, e_tj ~ N(0, sd_noise^2)
model-by-sample noise. An audit draws M models and N samples under the rotation protocol's
balanced design (complementary pairs: every sample a member of half the models).

The quantity an audit estimates is the population ROC of the pooled scores: over fresh models
and fresh samples. A non-member's score is N(0, s^2) with s^2 = sd_model^2 + sd_sample^2 +
sd_noise^2, so the threshold at FPR alpha is s * z_(1-alpha) and

    TPR(alpha) = E[Phi((g u - s z_(1-alpha)) / s)],   AUC = E[Phi(g u / (s sqrt 2))]

(a member and a non-member drawn independently differ by N(g u, 2 s^2)). The expectations over
g and u are computed by quadrature (:meth:`World.truth`) and checked against a very large
direct simulation (:meth:`World.simulated_truth`) in the benchmark; the test pins the values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from miaudit.stats.metrics import MetricKeys


@dataclass(frozen=True)
class World:
    sd_model: float = 0.3
    sd_sample: float = 0.8
    sd_noise: float = 0.5
    sd_strength: float = 0.3
    shape: float = 0.3
    scale: float = 1.5

    @property
    def sd_nonmember(self) -> float:
        return float(np.sqrt(self.sd_model ** 2 + self.sd_sample ** 2 + self.sd_noise ** 2))

    def truth(self, fpr_levels: Sequence[float]) -> dict[str, float]:
        """{"tpr@<level>": ..., "auc": ...} of the population, by Gauss-Hermite quadrature
        over log g and Gauss-Laguerre (generalized) quadrature over u."""
        from miaudit.stats.metrics import tpr_key

        x, wx = special.roots_hermitenorm(80)  # log g = sd_strength * x, x ~ N(0, 1)
        strength, weight_g = np.exp(self.sd_strength * x), wx / wx.sum()
        y, wy = special.roots_genlaguerre(200, self.shape - 1.0)  # u = scale * y
        effect, weight_u = self.scale * y, wy / wy.sum()
        shift = np.outer(strength, effect)  # g u on the grid
        weights = np.outer(weight_g, weight_u)
        s = self.sd_nonmember
        truth = {tpr_key(level): float(np.sum(weights * stats.norm.cdf(
            (shift - s * stats.norm.isf(level)) / s))) for level in fpr_levels}
        truth["auc"] = float(np.sum(weights * stats.norm.cdf(shift / (s * np.sqrt(2.0)))))
        return truth

    def audit(self, num_models: int, num_samples: int,
              rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(scores, members), both (num_models, num_samples): one simulated rotation audit."""
        members = balanced_memberships(num_models, num_samples, rng)
        offset = rng.normal(0.0, self.sd_model, (num_models, 1))
        strength = np.exp(rng.normal(0.0, self.sd_strength, (num_models, 1)))
        difficulty = rng.normal(0.0, self.sd_sample, num_samples)
        effect = rng.gamma(self.shape, self.scale, num_samples)
        noise = rng.normal(0.0, self.sd_noise, (num_models, num_samples))
        return offset + difficulty + members * strength * effect + noise, members

    def simulated_truth(self, fpr_levels: Sequence[float], cells: int = 20_000_000,
                        seed: int = 0) -> dict[str, float]:
        """The population ROC estimated by direct simulation, to check :meth:`truth`:
        ``cells`` member and as many non-member scores, each from its own fresh model and
        sample (the population the pooled estimate converges to), through
        :func:`miaudit.stats.metrics.summarize`."""
        from miaudit.stats.metrics import summarize

        rng = np.random.default_rng(seed)
        offsets = rng.normal(0.0, self.sd_model, 2 * cells)
        offsets += rng.normal(0.0, self.sd_sample, 2 * cells)
        offsets += rng.normal(0.0, self.sd_noise, 2 * cells)
        offsets[:cells] += (np.exp(rng.normal(0.0, self.sd_strength, cells))
                            * rng.gamma(self.shape, self.scale, cells))
        members = np.arange(2 * cells) < cells
        summary = summarize(offsets, members, fpr_levels)
        return {key: summary[key] for key in self.truth(fpr_levels)}


def balanced_memberships(num_models: int, num_samples: int,
                         rng: np.random.Generator) -> np.ndarray:
    """(M, N) bool in complementary pairs: model 2k on a random half, model 2k + 1 on the
    other half (the rotation protocol's keep matrix, ``miaudit.auditor.design``)."""
    if num_models % 2:
        raise ValueError(f"num_models must be even, got {num_models}")
    halves = rng.random((num_models // 2, num_samples)).argsort(axis=1) < num_samples // 2
    return np.stack([halves, ~halves], axis=1).reshape(num_models, num_samples)


@dataclass(frozen=True)
class Coverage:
    """Per metric: the share of simulated audits whose interval covered the truth, and the
    mean interval width, for the crossed bootstrap (``new``) and the old intervals."""

    audits: int
    truth: dict[str, float]
    new: dict[str, float]
    old: dict[str, float]
    new_width: dict[str, float]
    old_width: dict[str, float]
    summaries: dict[str, float]  # summary_intervals.target_summary_interval (no scores needed)
    summaries_width: dict[str, float]


def coverage_study(world: World, audits: int, num_models: int, num_samples: int,
                   fpr_levels: Sequence[float] = (1e-3, 1e-2), rounds: int | None = None,
                   seed: int = 0) -> Coverage:
    """Simulate ``audits`` rotation audits of ``num_models`` models on ``num_samples``
    samples; count how often each interval covers the population truth. Old intervals: the
    pooled Clopper-Pearson interval for TPR (what results.json called ``tpr@X_ci`` before
    the crossed bootstrap) and, for AUC, the t interval over the per-target AUCs."""
    from scipy.stats import t as student

    from miaudit.stats import intervals, metrics, summary_intervals

    truth = world.truth(fpr_levels)
    rng = np.random.default_rng(seed)
    kinds = ("new", "old", "summaries")
    hits = {kind: {key: 0 for key in truth} for kind in kinds}
    widths = {kind: {key: 0.0 for key in truth} for kind in kinds}
    for audit in range(audits):
        scores, members = world.audit(num_models, num_samples, rng)
        pooled = metrics.summarize(scores.ravel(), members.ravel(), fpr_levels)
        resamples = intervals.Resamples.draw(num_models, num_samples,
                                             rounds or intervals.ROUNDS, seed=seed + audit)
        new = intervals.intervals(intervals.replicate_metrics(scores, members, resamples,
                                                              fpr_levels))
        per_target = [metrics.summarize(s, m, fpr_levels) for s, m in zip(scores, members)]
        aucs = [entry["auc"] for entry in per_target]
        half = student.ppf(0.975, num_models - 1) * np.std(aucs, ddof=1) / np.sqrt(num_models)
        old = {key: pooled[MetricKeys(key).ci] for key in truth if key != "auc"}
        old["auc"] = [np.mean(aucs) - half, np.mean(aucs) + half]
        summaries = {key: summary_intervals.target_summary_interval(pooled, per_target, key)
                     for key in truth}
        for kind, found in (("new", new), ("old", old), ("summaries", summaries)):
            for key, value in truth.items():
                low, high = found[key]
                hits[kind][key] += int(low <= value <= high)
                widths[kind][key] += (high - low) / audits
    share = {kind: {k: v / audits for k, v in hits[kind].items()} for kind in kinds}
    return Coverage(audits, truth, share["new"], share["old"], widths["new"], widths["old"],
                    share["summaries"], widths["summaries"])


def paired_audit(world_a: World, world_b: World, num_models: int, num_samples: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scores_a, scores_b, members): two audits with the same memberships and samples (the
    same data, seed and protocol; e.g. one model family at two latencies), whose models are
    trained apart. The samples' difficulty and their membership effect's draw are shared (an
    easy or a vulnerable sample is so for both), scaled by each world's ``scale``; model
    offsets, strengths and noise are each run's own. Both worlds need the same ``shape``."""
    if world_a.shape != world_b.shape:
        raise ValueError("paired worlds share the membership effect's draw: same shape")
    members = balanced_memberships(num_models, num_samples, rng)
    difficulty = rng.normal(0.0, 1.0, num_samples)
    effect = rng.gamma(world_a.shape, 1.0, num_samples)

    def scores(world: World) -> np.ndarray:
        offset = rng.normal(0.0, world.sd_model, (num_models, 1))
        strength = np.exp(rng.normal(0.0, world.sd_strength, (num_models, 1)))
        noise = rng.normal(0.0, world.sd_noise, (num_models, num_samples))
        return (offset + world.sd_sample * difficulty
                + members * strength * world.scale * effect + noise)
    return scores(world_a), scores(world_b), members


@dataclass(frozen=True)
class PairedCoverage:
    """Per metric: the true difference (world a - world b), the share of audits whose paired
    interval covered it and its mean width, and how often each rule decided a > b: the paired
    interval excluding 0 from below, and two separate intervals not overlapping."""

    audits: int
    truth: dict[str, float]
    covered: dict[str, float]
    width: dict[str, float]
    decided_paired: dict[str, float]
    decided_separate: dict[str, float]


def paired_coverage_study(world_a: World, world_b: World, audits: int, num_models: int,
                          num_samples: int, fpr_levels: Sequence[float] = (1e-3, 1e-2),
                          rounds: int | None = None, seed: int = 0) -> PairedCoverage:
    """Simulate ``audits`` pairs of rotation audits (:func:`paired_audit`) and check the
    interval of :func:`miaudit.analysis.paired_runs.paired_difference` against the difference
    of the two populations' truths (quadrature). The replicates are at the default FPR levels
    (``fpr_levels`` picks the metrics checked)."""
    from miaudit.analysis.paired_runs import replicated
    from miaudit.stats import intervals

    truth_a, truth_b = world_a.truth(fpr_levels), world_b.truth(fpr_levels)
    truth = {key: truth_a[key] - truth_b[key] for key in truth_a}
    rng = np.random.default_rng(seed)
    rounds = rounds or intervals.ROUNDS
    totals = {name: dict.fromkeys(truth, 0.0) for name in ("covered", "width", "paired",
                                                            "separate")}
    for audit in range(audits):
        a, b, members = paired_audit(world_a, world_b, num_models, num_samples, rng)
        resamples = intervals.Resamples.draw(num_models, num_samples, rounds, seed + audit)
        # what paired_runs.paired_difference computes, its replicates kept for the separate
        # intervals (one bootstrap per run, not two)
        runs = [replicated(scores, members, resamples) for scores in (a, b)]
        found = intervals.paired_differences(*(pooled for pooled, _ in runs),
                                             *(reps for _, reps in runs), tuple(truth))
        own = [intervals.intervals(reps) for _, reps in runs]
        for key, value in truth.items():
            low, high = found[key]["ci"]
            totals["covered"][key] += low <= value <= high
            totals["width"][key] += high - low
            totals["paired"][key] += low > 0
            totals["separate"][key] += own[0][key][0] > own[1][key][1]
    share = {name: {key: total / audits for key, total in values.items()}
             for name, values in totals.items()}
    return PairedCoverage(audits, truth, share["covered"], share["width"], share["paired"],
                          share["separate"])
