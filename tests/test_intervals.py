"""The crossed (samples x targets) bootstrap: replicates against explicit resampling, the
simultaneous band, and coverage against a synthetic world with known truth."""

from __future__ import annotations

import numpy as np
import pytest

from miaudit.analysis.synthetic_world import World, balanced_memberships, coverage_study
from miaudit.stats import intervals, metrics, summary_intervals

LEVELS = (1e-3, 1e-2, 0.3)
#: The synthetic world's population truth (World() defaults), by quadrature; a direct
#: simulation of 2 x 10^7 scores (benchmarks/interval_coverage.py) agrees to the 4th digit.
TRUTH = {"tpr@0.1%": 0.03602723168093086, "tpr@1%": 0.07423445709898946,
         "auc": 0.5994590389012062}


def scores_with(decimals: int | None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    members = balanced_memberships(6, 90, rng)
    scores = rng.normal(size=members.shape) + 0.8 * members + rng.normal(size=90)
    return (scores if decimals is None else np.round(scores, decimals)), members


@pytest.mark.parametrize("decimals", [None, 1, 0])
def test_replicates_equal_the_estimator_on_explicit_resamples(decimals):
    """Each replicate is summarize() of the resampled array itself (rows and columns repeated
    by their counts), with and without tied scores."""
    scores, members = scores_with(decimals)
    resamples = intervals.Resamples.draw(*scores.shape, rounds=6, seed=3)
    replicates = intervals.replicate_metrics(scores, members, resamples, LEVELS)
    for b in range(6):
        rows = np.repeat(np.arange(scores.shape[0]), resamples.targets[b])
        cols = np.repeat(np.arange(scores.shape[1]), resamples.samples[b])
        expected = metrics.summarize(scores[np.ix_(rows, cols)].ravel(),
                                     members[np.ix_(rows, cols)].ravel(), LEVELS)
        for key, values in replicates.items():
            assert values[b] == pytest.approx(expected[key], abs=1e-6), key


def test_unit_weights_give_the_point_estimate():
    scores, members = scores_with(None)
    ones = intervals.Resamples(np.ones((2, 6), np.int32), np.ones((2, 90), np.int32))
    replicates = intervals.replicate_metrics(scores, members, ones, LEVELS)
    pooled = metrics.summarize(scores.ravel(), members.ravel(), LEVELS)
    for key, values in replicates.items():
        assert values == pytest.approx([pooled[key]] * 2, abs=1e-6)


def test_hand_worked_replicate():
    """Two targets, three samples; the replicate takes target 0 twice and samples 0, 0, 2.
    Cells: target 0 scores (3, 1, 2), members (T, F, F). Resampled: scores 3, 3, 2 (x2
    each): members {3, 3} x2, non-member {2} x2; AUC 1, TPR at any FPR 1."""
    scores = np.array([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
    members = np.array([[True, False, False], [False, True, True]])
    resample = intervals.Resamples(np.array([[2, 0]], np.int32), np.array([[2, 0, 1]], np.int32))
    out = intervals.replicate_metrics(scores, members, resample, (0.0,))
    assert out["auc"][0] == 1.0 and out["tpr@0%"][0] == 1.0
    assert out["balanced_accuracy"][0] == 1.0


def test_one_target_resamples_samples_only():
    resamples = intervals.Resamples.draw(1, 50, rounds=20, seed=0)
    assert (resamples.targets == 1).all() and (resamples.samples.sum(axis=1) == 50).all()
    assert "not covered" in resamples.method
    assert "two-way" in intervals.Resamples.draw(4, 50, rounds=2).method


def test_resamples_are_seeded_and_sum_to_the_sizes():
    first = intervals.Resamples.draw(16, 300, rounds=50, seed=7)
    again = intervals.Resamples.draw(16, 300, rounds=50, seed=7)
    np.testing.assert_array_equal(first.samples, again.samples)
    assert (first.targets.sum(axis=1) == 16).all() and (first.samples.sum(axis=1) == 300).all()


def test_percentile_interval_drops_nan():
    values = np.r_[np.arange(1001.0), np.nan]
    assert intervals.percentile_interval(values) == pytest.approx([25.0, 975.0])


def test_simultaneous_band_widens_the_marginal_intervals():
    """One statistic: the band is its percentile interval. Twenty independent statistics:
    each band is wider than its marginal interval, and 95% of replicates lie inside all
    twenty bands at once (brute-force count)."""
    rng = np.random.default_rng(0)
    single = rng.normal(size=2000)
    band = intervals.simultaneous_band([single])[0]
    marginal = intervals.percentile_interval(single)
    assert band[0] == pytest.approx(marginal[0], abs=0.02)
    assert band[1] == pytest.approx(marginal[1], abs=0.02)
    many = rng.normal(size=(20, 2000))
    bands = np.array(intervals.simultaneous_band(list(many)))
    marginals = np.array([intervals.percentile_interval(r) for r in many])
    assert (bands[:, 0] < marginals[:, 0]).all() and (bands[:, 1] > marginals[:, 1]).all()
    inside = ((many >= bands[:, :1]) & (many <= bands[:, 1:])).all(axis=0).mean()
    assert 0.95 <= inside <= 0.97  # the depth steps by one replicate per statistic


def test_world_truth_is_pinned_and_matches_a_direct_simulation():
    world = World()
    assert world.truth((1e-3, 1e-2)) == pytest.approx(TRUTH, rel=1e-9)
    simulated = world.simulated_truth((1e-3, 1e-2), cells=400_000, seed=1)
    assert simulated["auc"] == pytest.approx(TRUTH["auc"], abs=0.002)
    assert simulated["tpr@1%"] == pytest.approx(TRUTH["tpr@1%"], abs=0.002)
    assert simulated["tpr@0.1%"] == pytest.approx(TRUTH["tpr@0.1%"], abs=0.002)


def test_balanced_memberships_are_complementary_pairs():
    keep = balanced_memberships(8, 101, np.random.default_rng(0))
    assert (keep[0::2] ^ keep[1::2]).all() and (keep.sum(axis=0) == 4).all()


def test_crossed_bootstrap_covers_the_truth_where_the_pooled_interval_does_not():
    """Fast version of benchmarks/interval_coverage.py (300 audits of 2,000 samples there):
    80 simulated rotation audits of 16 models on 800 samples. The crossed bootstrap's 95%
    interval covers the population truth in >= 90% of them at TPR@0.1%, TPR@1% and for AUC;
    the old pooled Clopper-Pearson interval, which ignores the correlation of a sample's
    scores across targets and the training randomness, covers it in fewer than 75%."""
    result = coverage_study(World(), audits=80, num_models=16, num_samples=800, rounds=300,
                            seed=1)
    assert result.truth == pytest.approx(TRUTH)
    for key in TRUTH:
        assert result.new[key] >= 0.9, (key, result.new)
    for key in ("tpr@0.1%", "tpr@1%"):
        assert result.old[key] < 0.75, (key, result.old)
    # the interval claims.py builds from per-target summaries (no scores) errs wide
    for key in TRUTH:
        assert result.summaries[key] >= 0.9, (key, result.summaries)
        assert result.summaries_width[key] >= result.new_width[key]


def test_target_summary_interval_hand_computed():
    """Two targets with TPR 0.1 and 0.3 (100 members each), pooled 0.2: between-target
    variance 0.02 / 2 = 0.01, mean binomial variance (0.09 + 0.21) / 2 / 100 = 0.0015;
    half-width 1.95996 * sqrt(0.0115) = 0.2102, the lower end clipped at 0."""
    per_target = [{"tpr@1%": 0.1, "n_members": 100}, {"tpr@1%": 0.3, "n_members": 100}]
    low, high = summary_intervals.target_summary_interval({"tpr@1%": 0.2}, per_target, "tpr@1%")
    half = 1.959964 * np.sqrt(0.0115)
    assert (low, high) == pytest.approx((0.0, 0.2 + half), abs=1e-6)


def paired_audits(noise_a: float, noise_b: float, audits: int, seed: int = 3):
    """Simulated rotation audits (the synthetic world's scores) seen by two attacks that add
    their own noise to the same signal: equal noise, equal truth (by symmetry)."""
    rng = np.random.default_rng(seed)
    for _ in range(audits):
        scores, members = World().audit(8, 400, rng)
        yield (scores + rng.normal(0, noise_a, scores.shape),
               scores + rng.normal(0, noise_b, scores.shape), members)


def paired_records(a: np.ndarray, b: np.ndarray, members: np.ndarray, rounds: int = 200):
    resamples = intervals.Resamples.draw(*a.shape, rounds=rounds, seed=7)
    replicates = {name: intervals.replicate_metrics(s, members, resamples, (1e-2,))
                  for name, s in (("a", a), ("b", b))}
    attacks = {name: {"pooled": metrics.summarize(s.ravel(), members.ravel(), (1e-2,))}
               for name, s in (("a", a), ("b", b))}
    intervals.add_paired_differences(attacks, replicates, ("auc", "tpr@1%"))
    return attacks, replicates


def test_paired_difference_of_an_attack_with_itself_is_zero():
    a, _, members = next(paired_audits(0.5, 0.5, 1))
    attacks, _ = paired_records(a, a.copy(), members)
    assert attacks["a"]["differences"]["b"]["auc"] == {"value": 0.0, "ci": [0.0, 0.0]}
    assert set(attacks["b"]["differences"]) == {"a"}


def test_paired_difference_covers_zero_when_the_attacks_are_equal():
    """Null check: two attacks of the same truth (symmetric noise on the same signal, new
    models and samples in each of 60 simulated audits): the paired 95% interval of their AUC
    difference covers 0 in >= 90% of the audits."""
    covered = []
    for a, b, members in paired_audits(0.5, 0.5, 60):
        attacks, _ = paired_records(a, b, members)
        low, high = attacks["a"]["differences"]["b"]["auc"]["ci"]
        covered.append(low <= 0.0 <= high)
    assert np.mean(covered) >= 0.9, np.mean(covered)


def test_paired_difference_decides_where_separate_intervals_overlap():
    """Direction check: attack a sees the signal with less noise (sd 0.1 vs 2.0; AUC higher by
    ~0.04): its paired AUC difference is positive in every audit and its interval excludes 0
    in >= 60% of 20 audits, while the two separate intervals (each wide from the targets' and
    samples' randomness that the attacks share) never separate (measured: 16 and 0 of 20)."""
    paired, separate = [], []
    for a, b, members in paired_audits(0.1, 2.0, 20):
        attacks, replicates = paired_records(a, b, members)
        assert attacks["a"]["differences"]["b"]["auc"]["value"] > 0
        paired.append(attacks["a"]["differences"]["b"]["auc"]["ci"][0] > 0)
        separate.append(intervals.percentile_interval(replicates["a"]["auc"])[0]
                        > intervals.percentile_interval(replicates["b"]["auc"])[1])
    assert np.mean(paired) >= 0.6 and np.mean(separate) <= 0.2, (paired, separate)
