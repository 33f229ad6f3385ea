"""Metrics against hand-computed cases, brute force and scikit-learn."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import binomtest
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

from miaudit.stats import metrics

# Hand-worked case: members score {0.9, 0.8, 0.1}, non-members {0.8, 0.3}.
SCORES = np.array([0.9, 0.8, 0.8, 0.3, 0.1])
MEMBER = np.array([True, True, False, False, True])


def test_roc_hand_computed():
    fpr, tpr, thresholds = metrics.roc_curve(SCORES, MEMBER)
    # thresholds inf, 0.9, 0.8 (the tie is one point: +1 member +1 non-member), 0.3, 0.1
    np.testing.assert_allclose(fpr, [0, 0, 0.5, 1, 1])
    np.testing.assert_allclose(tpr, [0, 1 / 3, 2 / 3, 2 / 3, 1])
    np.testing.assert_allclose(thresholds[1:], [0.9, 0.8, 0.3, 0.1])


def test_metrics_hand_computed():
    result = metrics.summarize(SCORES, MEMBER, fpr_levels=(0.0, 0.4, 0.5))
    # AUC = P(member > non-member) + P(tie)/2 over the 6 pairs = (1+1+0.5+1+0+0)/6
    assert result["auc"] == pytest.approx(7 / 12)
    # best point (fpr 0, tpr 1/3): (1/3 + 1) / 2
    assert result["balanced_accuracy"] == pytest.approx(2 / 3)
    assert result["tpr@0%"] == pytest.approx(1 / 3)
    assert result["tpr@40%"] == pytest.approx(1 / 3)
    assert result["tpr@50%"] == pytest.approx(2 / 3)
    assert result["fpr@50%"] == pytest.approx(0.5)
    assert (result["n_members"], result["n_nonmembers"]) == (3, 2)


def test_collinear_points_are_kept():
    """Tied pairs give collinear ROC points that drop_intermediate would remove."""
    scores = np.array([3, 3, 2, 2, 1, 1.0])
    member = np.array([1, 0, 1, 0, 1, 0], dtype=bool)
    fpr, tpr, _ = metrics.roc_curve(scores, member)
    assert metrics.tpr_at_fpr(fpr, tpr, 0.4) == pytest.approx(1 / 3)
    assert metrics.tpr_at_fpr(fpr, tpr, 0.7) == pytest.approx(2 / 3)


def test_all_tied_scores_are_chance():
    member = np.arange(200) % 2 == 0
    result = metrics.summarize(np.zeros(200), member)
    assert result["auc"] == 0.5 and result["tpr@1%"] == 0.0
    assert result["balanced_accuracy"] == 0.5


def brute_force(scores, member, level):
    """For every threshold t: predict member iff score >= t; best TPR with FPR <= level."""
    best = 0.0
    for t in np.unique(scores):
        predicted = scores >= t
        fpr = (predicted & ~member).sum() / (~member).sum()
        tpr = (predicted & member).sum() / member.sum()
        if fpr <= level:
            best = max(best, tpr)
    return best


@pytest.mark.parametrize("seed", range(5))
def test_against_sklearn_and_brute_force(seed):
    rng = np.random.default_rng(seed)
    member = rng.random(500) < 0.4
    scores = np.round(rng.normal(size=500) + 0.7 * member, 1)  # many ties
    result = metrics.summarize(scores, member, fpr_levels=(1e-3, 0.01, 0.1, 0.3))
    assert result["auc"] == pytest.approx(roc_auc_score(member, scores), abs=1e-12)
    for level in (1e-3, 0.01, 0.1, 0.3):
        assert result[f"tpr@{metrics.level_name(level)}"] == pytest.approx(
            brute_force(scores, member, level), abs=1e-12)
    accuracies = [((scores >= t) == member).astype(float) for t in np.unique(scores)]
    balanced = max(0.5 * (a[member].mean() + a[~member].mean()) for a in accuracies)
    assert result["balanced_accuracy"] == pytest.approx(balanced, abs=1e-12)


def test_clopper_pearson_closed_forms():
    # k = 0: upper = 1 - (alpha/2)^(1/n); k = n: lower = (alpha/2)^(1/n)
    lo, hi = metrics.clopper_pearson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** 0.1, rel=1e-6)
    lo, hi = metrics.clopper_pearson(10, 10)
    assert lo == pytest.approx(0.025 ** 0.1, rel=1e-6) and hi == 1.0


@pytest.mark.parametrize("seed", range(3))
def test_roc_equals_sklearn(seed):
    rng = np.random.default_rng(seed)
    member = rng.random(300) < 0.3
    scores = np.round(rng.normal(size=300) + member, 1 + seed)  # ties, then fewer ties
    for ours, theirs in zip(metrics.roc_curve(scores, member),
                            sk_roc_curve(member, scores, drop_intermediate=False)):
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("trials", [1, 7, 50, 1797])
def test_clopper_pearson_matches_binomtest(trials):
    successes = np.unique(np.r_[0, 1, trials // 3, trials - 1, trials].clip(0, trials))
    for confidence in (0.95, 0.99):
        lower, upper = metrics.clopper_pearson_intervals(successes, trials, confidence)
        for k, lo, hi in zip(successes, lower, upper):
            exact = binomtest(int(k), trials).proportion_ci(confidence, method="exact")
            assert lo == pytest.approx(exact.low, abs=1e-9)
            assert hi == pytest.approx(exact.high, abs=1e-9)
    assert metrics.clopper_pearson(0, trials)[0] == 0.0
    assert metrics.clopper_pearson(trials, trials)[1] == 1.0


def test_clopper_pearson_rejects_impossible_counts():
    with pytest.raises(ValueError, match="successes"):
        metrics.clopper_pearson(5, 4)


def test_measurable_flag_on_a_top_tie_group():
    """Attack-R-like scores: 3 values. The top group {2} holds 20 members and 5 of the 100
    non-members (FPR 5%), so no threshold but "nobody" reaches FPR <= 1%: TPR@1% is 0 only
    by the tie and not measurable. At 10% the top group is allowed (TPR 20/100) but not the
    next one {1} (FPR 25%)."""
    member = np.r_[np.ones(100, bool), np.zeros(100, bool)]
    scores = np.r_[np.full(20, 2.0), np.full(80, 1.0), np.full(5, 2.0), np.full(20, 1.0),
                   np.full(75, 0.0)]
    result = metrics.summarize(scores, member, fpr_levels=(0.01, 0.1))
    assert result["tpr@1%"] == 0.0 and result["fpr@1%"] == 0.0
    assert result["tpr@1%_measurable"] is False
    assert result["tpr@10%"] == pytest.approx(0.2) and result["fpr@10%"] == pytest.approx(0.05)
    assert result["tpr@10%_measurable"] is True
    # Break the tie: the same members above every non-member make 1% reachable (TPR 20%).
    scores[:20] = 3.0
    result = metrics.summarize(scores, member, fpr_levels=(0.01,))
    assert result["tpr@1%"] == pytest.approx(0.2) and result["tpr@1%_measurable"] is True


def test_measurable_when_tpr_is_truly_zero():
    """Members score lowest; the single top scorer is one non-member of 1,000. At 0.1% that
    point (FPR 0.1%) is within budget, so TPR@0.1% = 0 is a real measurement. At 0.01%, below
    1 / n_nonmembers, no real threshold is within budget: not measurable."""
    member = np.r_[np.ones(50, bool), np.zeros(1000, bool)]
    scores = np.r_[np.zeros(50), np.arange(1000.0) / 1000.0]
    scores[50 + 999] = 5.0  # the single top scorer is a non-member
    result = metrics.summarize(scores, member, fpr_levels=(1e-3, 1e-4))
    assert result["tpr@0.1%"] == 0.0 and result["tpr@0.1%_measurable"] is True
    assert result["tpr@0.01%"] == 0.0 and result["tpr@0.01%_measurable"] is False


def test_below_one_over_nonmembers_is_not_measurable_even_with_a_member_on_top():
    """Issue 23: 200 non-members, so 0.1% < 1/200 allows no false positive. The top 10
    scores are members: the "TPR" there (10/100) is a TPR at zero FPR, not a TPR at 0.1%."""
    member = np.r_[np.ones(100, bool), np.zeros(200, bool)]
    scores = np.r_[np.arange(100.0) + 1000.0 * (np.arange(100) >= 90), np.arange(200.0)]
    result = metrics.summarize(scores, member, fpr_levels=(1e-3, 5e-3))
    assert result["tpr@0.1%"] == pytest.approx(0.1) and result["tpr@0.1%_measurable"] is False
    assert result["tpr@0.5%_measurable"] is True  # 1/200: one false positive allowed


def test_summary_keys_intervals_and_json():
    rng = np.random.default_rng(0)
    member = rng.random(2000) < 0.5
    scores = rng.normal(size=2000) + member
    result = metrics.summarize(scores, member, bootstrap=50, seed=1)
    json.dumps(result, allow_nan=False)  # plain, finite Python values
    for key in ("tpr@0.001%", "tpr@0.1%", "tpr@1%"):
        lo, hi = result[f"{key}_ci"]
        assert lo <= result[key] <= hi
        boot_lo, boot_hi = result[f"{key}_ci_boot"]
        assert boot_lo <= boot_hi
    assert result["auc_ci_boot"][0] < result["auc"] < result["auc_ci_boot"][1]
    assert result == metrics.summarize(scores, member, bootstrap=50, seed=1)  # seeded
    assert result["tpr@1%_measurable"] is True
    assert list(result)[-2:] == ["n_members", "n_nonmembers"]
    stats = metrics.aggregate([result, result])  # real summaries, bool keys included
    assert stats["mean"]["auc"] == result["auc"] and "tpr@1%_measurable" not in stats["mean"]


def test_null_scores_give_chance_metrics():
    rng = np.random.default_rng(4)
    member = rng.random(20000) < 0.5
    result = metrics.summarize(rng.normal(size=20000), member)
    assert abs(result["auc"] - 0.5) < 0.02
    assert result["tpr@1%"] < 0.02
    lo, hi = result["tpr@1%_ci"]
    assert lo < 0.01 < hi  # the interval covers the null's true TPR


def test_aggregate_hand_computed():
    per_target = [{"auc": 0.6, "tpr@1%": 0.02, "tpr@1%_ci": [0.0, 0.1], "n_members": 10,
                   "tpr@1%_measurable": True},
                  {"auc": 0.8, "tpr@1%": 0.04, "tpr@1%_ci": [0.0, 0.2], "n_members": 12,
                   "tpr@1%_measurable": True}]
    stats = metrics.aggregate(per_target)
    assert set(stats) == {"mean", "std", "min", "max"}
    assert stats["mean"]["auc"] == pytest.approx(0.7)
    assert stats["std"]["auc"] == pytest.approx(np.sqrt(0.02))  # ddof=1: sqrt(2 * 0.1^2 / 1)
    assert stats["min"]["tpr@1%"] == 0.02 and stats["max"]["n_members"] == 12
    assert "tpr@1%_ci" not in stats["mean"]
    assert "tpr@1%_measurable" not in stats["mean"]  # bools are flags, not numbers
    assert metrics.aggregate(per_target[:1])["std"]["auc"] == 0.0
    # a level one target cannot measure has no mean (it would average zero-FPR TPRs)
    per_target[1]["tpr@1%_measurable"] = False
    stats = metrics.aggregate(per_target)
    assert "tpr@1%" not in stats["mean"] and stats["mean"]["auc"] == pytest.approx(0.7)


def test_per_class_matches_subsets():
    rng = np.random.default_rng(2)
    member = rng.random(600) < 0.5
    labels = rng.integers(0, 3, 600)
    labels[:5], member[:5] = 7, True  # a class with members only
    scores = rng.normal(size=600) + member * (labels == 1)
    breakdown = metrics.per_class(scores, member, labels)
    assert set(breakdown) == {0, 1, 2, 7}
    for label in (0, 1, 2):
        rows = labels == label
        assert breakdown[label] == metrics.summarize(scores[rows], member[rows])
    assert breakdown[7] == {"n_members": 5, "n_nonmembers": 0}
    assert breakdown[1]["auc"] > breakdown[0]["auc"]


@pytest.mark.parametrize("scores, member, message", [
    ([0.1, np.nan], [True, False], "NaN"),
    ([0.1, 0.2], [True, True], "at least one member"),
    ([0.1, 0.2, 0.3], [True, False], "shapes"),
    ([0.1, 0.2], [2, 0], "boolean"),
])
def test_bad_input_errors(scores, member, message):
    with pytest.raises(ValueError, match=message):
        metrics.summarize(scores, member)


def test_metric_keys_spell_the_results_suffix_grammar():
    # the one place the suffixes are spelled; summarize writes exactly these keys
    from miaudit.stats.metrics import MetricKeys, is_measurable

    names = MetricKeys("tpr@0.1%")
    assert (names.value, names.ci, names.conditional, names.simultaneous, names.measurable) == (
        "tpr@0.1%", "tpr@0.1%_ci", "tpr@0.1%_ci_conditional", "tpr@0.1%_ci_simultaneous",
        "tpr@0.1%_measurable")
    assert names.interval("simultaneous") == names.simultaneous and names.interval() == names.ci
    assert MetricKeys.of_interval("tpr@1%_ci") == MetricKeys("tpr@1%")
    assert MetricKeys.of_interval("tpr@1%") is None
    assert MetricKeys.of_measurable("tpr@1%_measurable").name == "tpr@1%"
    scores = np.r_[np.arange(10.0), np.arange(10.0) + 0.5]
    members = np.r_[np.ones(10, bool), np.zeros(10, bool)]
    pooled = metrics.summarize(scores, members, fpr_levels=[0.1, 1e-3])
    for level in ("10%", "0.1%"):
        keys = MetricKeys(f"tpr@{level}")
        assert keys.ci in pooled and keys.measurable in pooled
    assert is_measurable(pooled, "tpr@10%") and not is_measurable(pooled, "tpr@0.1%")
    assert is_measurable(pooled, "auc")  # no flag: measurable
