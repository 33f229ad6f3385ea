"""Issue 79: the decision rules of experiments/claims.py, against hand-worked examples,
brute-force references and known-truth simulations."""

import itertools
import math
import sys

import numpy as np
import pytest

from conftest import committed, load_script
from miaudit.analysis.decision_rules import (
    Z95,
    beyond_margin_p,
    by_a_hair,
    fixed_effects,
    holm,
    interval_p,
    scale_for_power,
    tost_p,
)

# one module for every test file: paired.py and lambda_sweep.py import it by name, and the other
# test files monkeypatch that instance
claims = sys.modules.get("claims") or load_script("experiments/claims.py")


def test_holm_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04 -> monotone 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1


def closed_bonferroni(p: np.ndarray) -> np.ndarray:
    """Brute force: the closed testing procedure with Bonferroni local tests (Marcus et al.
    1976), which Holm's procedure is a shortcut of: H_i's adjusted p is the largest, over
    every intersection hypothesis containing i, of its Bonferroni p-value."""
    m = len(p)
    adjusted = np.zeros(m)
    for size in range(1, m + 1):
        for subset in itertools.combinations(range(m), size):
            local = min(1.0, size * min(p[j] for j in subset))
            for i in subset:
                adjusted[i] = max(adjusted[i], local)
    return adjusted


def test_holm_equals_closed_testing_with_bonferroni_local_tests():
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = rng.uniform(0, 0.2, rng.integers(1, 8)) ** rng.uniform(1, 3)
        assert holm(p) == pytest.approx(closed_bonferroni(p))


def test_holm_controls_the_family_wise_error_under_the_global_null():
    rng = np.random.default_rng(1)
    rejections = [(holm(rng.uniform(size=10)) < 0.05).any() for _ in range(4000)]
    assert np.mean(rejections) <= 0.055


def test_interval_p_inverts_the_interval():
    # the null at the interval's end: p = 0.05; asymmetric: the side facing the null counts
    assert interval_p(0.3, 0.1, 0.5, null=0.1) == pytest.approx(0.05)
    assert interval_p(0.3, 0.2, 0.9, null=0.2) == pytest.approx(0.05)
    assert interval_p(0.3, 0.2, 0.9) < 0.05 < interval_p(0.3, -0.01, 0.9)


def _simulate_tost(truth: float, margin: float, se: float, n: int = 20000, seed: int = 0
                   ) -> float:
    rng = np.random.default_rng(seed)
    estimates = rng.normal(truth, se, n)
    return float(np.mean([tost_p(e, e - Z95 * se, e + Z95 * se, margin) < 0.05
                          for e in estimates]))


@pytest.mark.parametrize("truth", [0.01, -0.01, 0.012])
def test_tost_size_at_and_beyond_the_margin_is_at_most_5_percent(truth):
    # known truth: the difference at (or beyond) the margin: "equivalent" at most 5% of draws
    assert _simulate_tost(truth, 0.01, 0.004) <= 0.05 + 0.005


def test_tost_has_power_inside_the_margin_and_is_the_90_percent_interval():
    assert _simulate_tost(0.0, 0.01, 0.003) > 0.9
    # p < 0.05 exactly when the 90% interval lies inside +-margin
    se = 0.004
    half90 = 1.6448536 * se
    for value in (0.0, 0.003, 0.0034, 0.0035, -0.0036):
        inside = abs(value) + half90 < 0.01
        assert (tost_p(value, value - Z95 * se, value + Z95 * se, 0.01) < 0.05) is inside


def test_beyond_the_margin_is_a_one_sided_test_past_the_nearer_end():
    se = 0.004
    assert beyond_margin_p(0.02, 0.02 - Z95 * se, 0.02 + Z95 * se, 0.01) == pytest.approx(
        0.5 * math.erfc(2.5 / math.sqrt(2)))
    assert beyond_margin_p(0.0, -0.01, 0.01, 0.01) > 0.5


def test_fixed_effects_by_hand_and_its_coverage():
    # two equal-precision estimates: the mean, with the interval narrowed by sqrt(2)
    value, low, high = fixed_effects([(1.0, 0.0, 2.0), (2.0, 1.0, 3.0)])
    assert value == pytest.approx(1.5) and high - value == pytest.approx(1 / math.sqrt(2))
    # weights 1/se^2: an estimate twice as precise weighs 4x
    assert fixed_effects([(0.0, -1, 1), (5.0, 4.5, 5.5)])[0] == pytest.approx(4.0)
    rng, hits = np.random.default_rng(2), 0
    for _ in range(4000):
        a, b = rng.normal(0.3, 0.1), rng.normal(0.3, 0.05)
        _, low, high = fixed_effects([(a, a - Z95 * 0.1, a + Z95 * 0.1),
                                      (b, b - Z95 * 0.05, b + Z95 * 0.05)])
        hits += low <= 0.3 <= high
    assert 0.94 <= hits / 4000 <= 0.96
    # an exact value (zero width) would take every weight: equal weights instead, by hand
    # (0 + 1) / 2 = 0.5, se = sqrt(0 + (1 / 1.96)^2) / 2, so the half-width is 0.5
    value, low, high = fixed_effects([(0.0, 0.0, 0.0), (1.0, 0.0, 2.0)])
    assert value == pytest.approx(0.5) and high - value == pytest.approx(0.5)
    with pytest.raises(ValueError, match="not all zero"):
        fixed_effects([(1.0, 1.0, 1.0), (1.0, 1.0, 1.0)])
    with pytest.raises(ValueError, match="non-negative width"):
        fixed_effects([(1.0, 2.0, 0.0), (1.0, 0.0, 2.0)])


@pytest.mark.parametrize(("effect", "se"), [(0.01, 0.008), (0.5, 0.4), (0.02, 0.03)])
def test_the_power_scale_gives_80_percent_power_in_simulation(effect, se):
    factor = scale_for_power(effect, se)
    assert factor == pytest.approx(((1.959964 + 0.841621) * se / effect) ** 2, rel=1e-5)
    rng = np.random.default_rng(3)
    scaled = se / math.sqrt(factor)
    estimates = rng.normal(effect, scaled, 20000)
    power = np.mean(np.abs(estimates) / scaled > Z95)
    assert power == pytest.approx(0.80, abs=0.012)
    # at the family's level the scale grows
    assert scale_for_power(effect, se, alpha=0.05 / 100) > 2 * factor


def test_by_a_hair_is_a_tenth_of_the_width():
    assert by_a_hair(0.00272, 0.0025, 0.002728) is False  # covers the null: not decided
    assert by_a_hair(0.0001, 0.0101, 0.0) and not by_a_hair(0.0011, 0.0101, 0.0)
    assert by_a_hair(-0.0101, -0.0001, 0.0)  # the other side too


# -- the seeds rule, on constructed claims (the committed outputs are not read) --------------
def _summary(auc: float, half: float = 0.02) -> dict:
    return {"config": {"model": {"name": "ann_cnn"}, "train": {"recipe": "standard", "epochs": 1}},
            "target_models": {"test_accuracy": 0.9}, "targets": [0, 1],
            "attacks": {"lira": {"pooled": {"auc": auc, "auc_ci": [auc - half, auc + half],
                                            "ci_method": "two-way"}, "per_target": []}}}


def _claim(monkeypatch, results: dict, kind: str = "greater") -> object:
    rows = {"h": claims.Row("h", "s0", "high", floor="ODE/SDE"),
            "l": claims.Row("l", "s0", "low", floor="ODE/SDE")}
    monkeypatch.setattr(claims, "ROWS", rows)
    aucs = {(experiment, stem): auc for experiment, pair in results.items()
            for stem, auc in zip(("high", "low"), pair)}
    monkeypatch.setattr(claims, "load_results", committed(lambda experiment, stem, *a: _summary(
        aucs[experiment, stem]) if (experiment, stem) in aucs else None))
    return claims.Claim("s", "h", "l", ("auc",), kind=kind, seeds={0: "s0", 1: "s1"})


@pytest.mark.parametrize(("results", "verdict"), [
    # significant in opposite directions: the only disagreement
    ({"s0": (0.7, 0.6), "s1": (0.6, 0.7)}, "seeds disagree: seed 0 reproduced; seed 1 not "
                                           "reproduced"),
    # one seed decides, the other points the same way: pooled, said what each shows
    ({"s0": (0.7, 0.6), "s1": (0.65, 0.64)}, "reproduced (seeds pooled; reproduced at seed 0; "
                                             "seed 1 inconclusive, same direction)"),
    ({"s0": (0.7, 0.6), "s1": (0.64, 0.65)}, "reproduced (seeds pooled; reproduced at seed 0; "
                                             "seed 1 inconclusive, other direction)"),
    # neither decides alone, pooled they do (+0.025 twice, MOVER half-width 0.0283 each: SE
    # 0.0144, pooled 0.0102, z = 2.45)
    ({"s0": (0.625, 0.60), "s1": (0.625, 0.60)}, "reproduced (seeds pooled; seeds 0, 1 each "
                                               "inconclusive)"),
    ({"s0": (0.7, 0.6), "s1": (0.71, 0.6)}, "reproduced (seeds pooled; seeds 0, 1 each "
                                            "reproduced)"),
    ({"s0": (0.7, 0.6)}, "reproduced (one seed: seed 0)"),
])
def test_seeds_disagree_only_when_significant_in_opposite_directions(monkeypatch, results,
                                                                     verdict):
    assert claims.decide(_claim(monkeypatch, results))[0] == verdict


def test_holm_adjusts_over_the_whole_table(monkeypatch):
    # +0.05 with MOVER half-width 0.0283: p ~ 0.0005 decides alone and beside nine nulls
    # (Holm's first step: 0.005); +0.035 (p ~ 0.015) decides alone but not beside them, and
    # says what it was unadjusted
    for auc, kept in ((0.65, True), (0.635, False)):
        claim = _claim(monkeypatch, {"s0": (auc, 0.6)})
        assert claims.decide(claim)[0].startswith("reproduced")
        found = [claims.assess(claim) for _ in range(10)]
        for null in found[1:]:
            null.pooled = [claims.done(claims.Test("auc", "", stat=(0.0, -0.03, 0.03)))]
        assert claims.adjust(found) == 10
        verdict = claims.verdict_of(found[0])
        assert verdict.startswith("reproduced") is kept
        assert ("unadjusted: reproduced" in verdict) is not kept


def test_an_equivalence_margin_scales_with_the_measured_level(monkeypatch):
    # paper: TPR@0.1% 1.0% vs 0.9%, margin 0.5 points: half its level; ours at 0.1%: 0.05 points
    rows = {"h": claims.Row("h", "e", "a", paper={"tpr@0.1%": 0.010}),
            "l": claims.Row("l", "e", "b", paper={"tpr@0.1%": 0.009})}
    monkeypatch.setattr(claims, "ROWS", rows)
    claim = claims.Claim("s", "h", "l", ("tpr@0.1%",), kind="similar")
    margin, absolute = claims.relative_margin(claim, "tpr@0.1%", (0.001, 0, 0), (0.001, 0, 0))
    assert absolute == 0.005 and margin == pytest.approx(0.005 * 0.001 / 0.0095)


def test_a_regenerated_table_and_findings_page_match_the_committed_ones(tmp_path):
    claims.main(["--out", str(tmp_path)])
    for name in ("CLAIMS.md", "FINDINGS.md"):
        assert (tmp_path / name).read_text() == (claims.HERE / name).read_text(), (
            f"experiments/{name} is stale: run python experiments/claims.py")


def test_an_independent_memorization_widens_the_interval_by_its_own_uncertainty():
    # Fisher/Clopper-Pearson half-widths 0.03 / 0.04; the jackknife over 8 memorization models
    # gives se 0.04 / 2.365 (Student t, 7 df: half-width 0.04): hypot per side
    table = {"independent": {"memorization_models": list(range(8, 16)),
                             "jackknife_se": {"rho_test": 0.04 / 2.364624251592785}}}
    value, low, high = claims.widened((0.5, 0.47, 0.54), table, "rho_test")
    assert (low, high) == pytest.approx((0.5 - 0.05, 0.5 + math.hypot(0.04, 0.04)))
    assert claims.widened((0.5, 0.47, 0.54), {}, "rho_test") == (0.5, 0.47, 0.54)


@pytest.mark.parametrize("seed", ["", "_seed1"])
def test_the_independent_memorization_configs_differ_from_the_floor_only_in_the_family(seed):
    import yaml

    def body(path):
        return yaml.safe_load((claims.HERE / "papers/B" / path / "1_resnet14.yaml").read_text())

    new, old = body(f"memorization_independent{seed}"), body(f"memorization_floor{seed}")
    assert new.pop("num_models") == 16 and old.pop("num_models") == 8
    assert new.pop("memorization_models") == 8 and new == old
