"""experiments/claims.py: the intervals and verdicts behind the experiments' claims table."""

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from sklearn.metrics import roc_auc_score

from conftest import committed, load_script, tiny_audit
from miaudit._runtime import machine
from miaudit.config import validate_config

ROOT = Path(__file__).resolve().parent.parent
claims = load_script("experiments/claims.py")


def test_hanley_mcneil_at_chance_is_the_mann_whitney_null_variance():
    # Hanley & McNeil (1982) Eq. 2 at A = 1/2, m = n: (2n + 1) / (12 n^2), the exact variance
    # of the Mann-Whitney statistic under the null.
    n = 2000
    auc, low, high = claims.hanley_mcneil(0.5, n, n)
    half = 1.959964 * math.sqrt((2 * n + 1) / (12 * n * n))
    assert auc == 0.5 and high - auc == pytest.approx(half, rel=1e-5)
    assert auc - low == pytest.approx(half, rel=1e-5)


def test_hanley_mcneil_covers_the_auc_spread_of_a_simulation():
    # Brute force: the std of the AUC over repeated draws matches the formula's standard error.
    rng = np.random.default_rng(0)
    m = 400
    aucs = [roc_auc_score(np.r_[np.ones(m), np.zeros(m)],
                          np.r_[rng.normal(1.0, 1, m), rng.normal(0.0, 1, m)])
            for _ in range(400)]
    auc, low, high = claims.hanley_mcneil(float(np.mean(aucs)), m, m)
    assert (high - low) / (2 * 1.959964) == pytest.approx(np.std(aucs), rel=0.15)


def _greater(high, low) -> str:
    return claims.done(claims.Test("auc", "", stat=claims.difference_interval(high, low))
                       ).verdict()


def test_verdicts_follow_the_interval_of_the_difference():
    higher, lower, overlapping = (0.7, 0.68, 0.72), (0.6, 0.58, 0.62), (0.69, 0.66, 0.71)
    assert _greater(higher, lower) == "reproduced"
    assert _greater(lower, higher) == "not reproduced"
    assert _greater(higher, overlapping) == "inconclusive"
    # issue 79: two intervals that overlap can still differ (separation is a ~99.4% test):
    # +0.03 with MOVER half-width hypot(0.02, 0.02) = 0.028
    assert _greater((0.7, 0.68, 0.72), (0.67, 0.65, 0.69)) == "reproduced"


def test_mover_difference_of_symmetric_intervals_adds_half_widths_in_quadrature():
    # Zou & Donner (2008) eq. 7 by hand: 0.60 +- 0.03 minus 0.58 +- 0.04 = 0.02 +- 0.05
    value, low, high = claims.difference_interval((0.60, 0.57, 0.63), (0.58, 0.54, 0.62))
    assert (value, low, high) == pytest.approx((0.02, -0.03, 0.07))
    # asymmetric: the lower end takes high's lower and low's upper half-widths
    _, low, high = claims.difference_interval((0.5, 0.47, 0.54), (0.2, 0.19, 0.24))
    assert (low, high) == pytest.approx((0.3 - 0.05, 0.3 + 0.04123105625617661))  # hypot(.04, .01)


@pytest.mark.parametrize("difference, verdict", [
    ((0.010, -0.005, 0.019), "reproduced"),        # inside +-2 points
    ((0.019, 0.011, 0.027), "inconclusive"),       # straddles the margin
    ((0.030, 0.021, 0.039), "not reproduced"),     # wholly beyond it
    ((-0.030, -0.039, -0.021), "not reproduced"),
    ((0.000, -0.030, 0.030), "inconclusive"),      # too wide to say: overlap is not equality
])
def test_similar_is_an_equivalence_test_with_a_margin(difference, verdict):
    test = claims.done(claims.Test("auc", "", stat=difference, margin=0.02))
    assert test.verdict() == verdict


def test_mover_interval_covers_the_difference_of_two_independent_means():
    # a simulated world with known truth: two runs of 8 targets, accuracies N(mu, 0.01)
    rng, hits = np.random.default_rng(0), 0
    for _ in range(2000):
        a, b = rng.normal(0.60, 0.01, 8), rng.normal(0.585, 0.01, 8)
        found = claims.difference_interval(claims.t_interval(list(a)), claims.t_interval(list(b)))
        hits += found[1] <= 0.015 <= found[2]
    assert 0.93 <= hits / 2000 <= 0.985


def test_t_interval_of_identical_values_has_no_width():
    assert claims.t_interval([0.3, 0.3, 0.3]) == pytest.approx((0.3, 0.3, 0.3))
    mean, low, high = claims.t_interval([0.0, 1.0])  # n = 2: t(0.975, 1) = 12.706
    std = math.sqrt(0.5)  # sample std (n - 1)
    assert mean == 0.5 and high - mean == pytest.approx(12.7062 * std / math.sqrt(2), rel=1e-4)


def test_spearman_interval_is_symmetric_in_fisher_z():
    rho, low, high = claims.spearman_interval(0.5, 1000)
    assert low < 0.5 < high
    assert math.atanh(high) - math.atanh(0.5) == pytest.approx(math.atanh(0.5) - math.atanh(low))


def test_every_claim_names_known_rows_and_every_row_an_existing_config():
    for claim in claims.CLAIMS:
        assert claim.high in claims.ROWS, claim
        assert not claim.low or claim.low in claims.ROWS, claim
        assert set(claim.metrics) <= set(claims.METRIC_NAMES), claim
    for row in claims.ROWS.values():
        config = ROOT / "experiments" / row.experiment / f"{row.stem}.yaml"
        assert (ROOT / "experiments" / row.experiment).is_dir(), row
        # a planned row's config is not committed yet; once it is, drop `planned`
        assert config.is_file() != row.planned, (
            f"{row.label}: {config.name} is committed: drop `planned` in claims.yaml"
            if row.planned else f"{row.label}: no config {config}")


def test_the_data_file_names_existing_experiments_and_matches_the_queue():
    experiments = ROOT / "experiments"
    assert claims.DATA.parent == experiments and claims.DATA.suffix == ".yaml"
    assert len(set(claims.QUEUE)) == len(claims.QUEUE)
    for name in claims.QUEUE:  # queue.sh runs these: current experiments with configs
        assert any((experiments / name).glob("*.yaml")), name
        assert name.startswith("papers/"), name
    for row in claims.ROWS.values():  # a current row is run by the queue; archived ones not
        assert (row.experiment in claims.QUEUE) != row.experiment.startswith("archive/"), row
    for claim in claims.CLAIMS:
        high, low = (claims.ROWS[label] for label in (claim.high, claim.low or claim.high))
        for experiment in claim.seeds.values():  # each seed's copy holds the same configs
            assert (experiments / experiment).is_dir(), claim
        if claim.seeds:  # the rows are read from each seed's experiment: they share one
            assert high.experiment == low.experiment == claim.seeds[min(claim.seeds)], claim
            for experiment in claim.seeds.values():  # and the queue runs every seed's copy
                assert experiment in claims.QUEUE, (claim, experiment)
    assert list(claims.FLOORS) == ["ResNet-14", "ODE/SDE", "SNN/ANN twin", "adversarial"]


def _typo_in_a_row(data):
    data["rows"]["A"][0]["papr"] = {"auc": 0.6}  # must not silently drop the numbers


def _typo_in_a_claim(data):
    data["claims"][0]["high"] = "ResNet14"


@pytest.mark.parametrize(("typo", "message"), [(_typo_in_a_row, "papr"),
                                               (_typo_in_a_claim, "names a row")])
def test_the_data_file_refuses_a_typo(tmp_path, typo, message):
    data = yaml.safe_load(claims.DATA.read_text())
    typo(data)
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match=message):
        claims.load_data(path)


def _summary(pooled, per_target, targets):
    return {"targets": list(range(targets)), "target_models": {},
            "attacks": {"lira": {"pooled": pooled, "per_target": per_target}}}


def test_interval_source_by_results_layout(monkeypatch):
    """Issue 23. New results: the crossed bootstrap from results.json. Older rotation results
    (no scores committed): the per-target-summary interval. Below 1/non-members: n/m."""
    row = claims.Row("x", "nowhere", "x")
    per_target = [{"tpr@1%": 0.1, "n_members": 100, "n_nonmembers": 100},
                  {"tpr@1%": 0.3, "n_members": 100, "n_nonmembers": 100}]
    old = {"tpr@1%": 0.2, "tpr@1%_ci": [0.19, 0.21], "tpr@1%_measurable": True,
           "n_members": 200, "n_nonmembers": 200}
    monkeypatch.setattr(claims, "load_results", committed(
        lambda *a, **k: _summary(old, per_target, 2)))
    half = 1.959964 * math.sqrt(0.0115)  # tests/test_intervals.py's hand-worked case
    assert claims.interval(row, "tpr@1%") == pytest.approx((0.2, 0.0, 0.2 + half), abs=1e-6)
    new = {**old, "tpr@1%_ci": [0.1, 0.35], "ci_method": "two-way ..."}
    monkeypatch.setattr(claims, "load_results", committed(
        lambda *a, **k: _summary(new, per_target, 2)))
    assert claims.interval(row, "tpr@1%") == (0.2, 0.1, 0.35)
    assert claims.interval(row, "tpr@0.1%") is claims.NOT_MEASURABLE  # 0.1% x 200 < 1
    one = {**old, "n_members": 100, "n_nonmembers": 100}
    monkeypatch.setattr(claims, "load_results", committed(
        lambda *a, **k: _summary(one, per_target[:1], 1)))
    assert claims.interval(row, "tpr@1%") == (0.2, 0.19, 0.21)  # one target: Clopper-Pearson


def _fake_summary(model: str, recipe: str, test_accuracy: float) -> dict:
    return {"config": {"model": {"name": model}, "train": {"recipe": recipe}},
            "target_models": {"test_accuracy": test_accuracy}}


@pytest.mark.parametrize(("model", "recipe", "family"), [
    ("resnet14", "standard", "ResNet-14"), ("resnet14", "mixup_mmd", "ResNet-14"),
    ("resnet14", "pgd_at", "adversarial"), ("resnet14", "trades", "adversarial"),
    ("resnet14", "replace_finetune", "ODE/SDE"), ("sdenet", "standard", "ODE/SDE"),
    ("hbnode", "standard", "ODE/SDE"), ("snn_cnn", "ann2snn", "SNN/ANN twin"),
    ("ann_cnn", "standard", "SNN/ANN twin")])
def test_accuracy_floor_by_family(monkeypatch, model, recipe, family):
    # Issue 26: ResNet-14 >= 65%, ODE/SDE and SNN >= 60%, adversarial training >= 50% natural.
    floor = claims.FLOORS[family]
    row = claims.Row("x", "exp", "stem")
    monkeypatch.setattr(claims, "ROWS", {"x": row, "y": row})
    for accuracy, failed in ((floor - 0.001, True), (floor + 0.001, False)):
        monkeypatch.setattr(claims, "load_results", committed(
            lambda *a, acc=accuracy, **k: _fake_summary(model, recipe, acc)))
        assert claims.floor_family(row) == family
        assert bool(claims.failed_rows(claims.Claim("s", "x", "y"))) is failed


def test_a_matched_accuracy_control_is_held_to_the_floor_it_names(monkeypatch):
    # A ResNet-14 trained to an SDENet's 62% is judged by the SDENet's floor (60%), not 65%.
    monkeypatch.setattr(claims, "load_results", committed(
        lambda *a, **k: _fake_summary("resnet14", "standard", 0.62)))
    own, matched = claims.Row("x", "e", "s"), claims.Row("y", "e", "s", floor="ODE/SDE")
    monkeypatch.setattr(claims, "ROWS", {"x": own, "y": matched})
    assert claims.failed_rows(claims.Claim("s", "x", "x")) and \
        not claims.failed_rows(claims.Claim("s", "y", "y"))


def test_a_row_floor_must_be_a_known_family(tmp_path):
    data = yaml.safe_load(claims.DATA.read_text())
    data["rows"]["A"][0]["floor"] = "ODE"
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match="floor 'ODE' is not one of"):
        claims.load_data(path)


def _seeded_summary(auc: float) -> dict:
    return {"config": {"model": {"name": "ann_cnn"}, "train": {"recipe": "standard"}},
            "target_models": {"test_accuracy": 0.9}, "targets": [0, 1],
            "attacks": {"lira": {"pooled": {"auc": auc, "auc_ci": [auc - 0.02, auc + 0.02],
                                            "ci_method": "two-way"}, "per_target": []}}}


@pytest.mark.parametrize(("results", "verdict"), [
    ({}, "not run"),
    ({"s0": (0.7, 0.6)}, "reproduced (one seed: seed 0)"),
    ({"s0": (0.7, 0.6), "s1": (0.71, 0.6)}, "reproduced (seeds pooled; seeds 0, 1 each "
                                            "reproduced)"),
    ({"s0": (0.7, 0.6), "s1": (0.6, 0.7)}, "seeds disagree: seed 0 reproduced; seed 1 not "
                                           "reproduced"),
    ({"s0": (0.7, 0.6), "s1": (0.65, 0.64)}, "reproduced (seeds pooled; reproduced at seed 0; "
                                             "seed 1 inconclusive, same direction)")])
def test_a_claim_with_seeds_is_decided_on_the_seeds_pooled(monkeypatch, results, verdict):
    # Issue 26 item 5, issue 79: one seed is said so; two are pooled (fixed effects), and
    # "seeds disagree" only when they are significant in opposite directions.
    claim = _seeded_claim(monkeypatch, results)
    assert claims.decide(claim)[0] == verdict


def _seeded_claim(monkeypatch, results, accuracy=0.9):
    rows = {"h": claims.Row("h", "s0", "high", floor="ODE/SDE"),
            "l": claims.Row("l", "s0", "low", floor="ODE/SDE")}
    monkeypatch.setattr(claims, "ROWS", rows)
    aucs = {(experiment, stem): auc for experiment, pair in results.items()
            for stem, auc in zip(("high", "low"), pair)}

    def load(experiment, stem, *a):
        if (experiment, stem) not in aucs:
            return None
        summary = _seeded_summary(aucs[experiment, stem])
        summary["target_models"]["test_accuracy"] = accuracy[experiment] if isinstance(
            accuracy, dict) else accuracy
        return summary

    monkeypatch.setattr(claims, "load_results", committed(load))
    return claims.Claim("s", "h", "l", ("auc",), seeds={0: "s0", 1: "s1"})


def test_rows_below_the_floor_at_every_seed_are_a_failed_run_not_a_disagreement(monkeypatch):
    # Both seeds failed the floor (at different accuracies, and with different readings below
    # it): the claim is a failed run, counted as one, not "seeds disagree".
    claim = _seeded_claim(monkeypatch, {"s0": (0.7, 0.6), "s1": (0.6, 0.7)},
                          accuracy={"s0": 0.40, "s1": 0.45})
    verdict = claims.decide(claim)[0]
    assert verdict == ("failed run: seed 0 h (40.0% test, floor 60%), l (40.0% test, floor 60%); "
                       "seed 1 h (45.0% test, floor 60%), l (45.0% test, floor 60%); below the "
                       "floor: seeds differ (seed 0 reproduced; seed 1 not reproduced)")
    monkeypatch.setattr(claims, "CLAIMS", [claim])
    assert "1 claims: 1 failed run (below the floors, not counted: 1 seeds differ)" in (
        claims.claims_table())


def test_the_plan_counts_a_claim_waiting_for_its_second_seed(monkeypatch, tmp_path):
    # The claim's rows name seed 0's experiment; seed 1's missing config still holds it back.
    claim = _seeded_claim(monkeypatch, {"s0": (0.7, 0.6), "s1": (0.7,)})  # s1: no "low"
    for experiment in ("s0", "s1"):
        (tmp_path / experiment).mkdir()
        for stem in ("high", "low"):
            (tmp_path / experiment / f"{stem}.yaml").write_text("")
    monkeypatch.setattr(claims, "HERE", tmp_path)
    monkeypatch.setattr(claims, "QUEUE", ["s0", "s1"])
    monkeypatch.setattr(claims, "CLAIMS", [claim])
    plan = claims.plan_text()
    assert "s0: configs 2; without results: none; planned: none; decides 1 claims, 0 waiting" in (
        plan)
    assert "s1: configs 2; without results: low; planned: none; decides 1 claims, 1 waiting" in (
        plan)


GROWN_TO_16 = [  # (16-model config, the 8-model config whose models it reuses), per seed folder
    *[(f"papers/C/rotation16{seed}/{stem}", f"papers/C/rotation{seed}/{stem}")
      for seed in ("", "_seed1")
      for stem in ("0_ann", "1_snn_t1", "2_snn_t2", "4_snn_t4", "5_snn_t4_dropout")],
    *[(f"papers/B/fast_at_resnet14{seed}/{grown}", f"papers/B/fast_at_resnet14{seed}/{base}")
      for seed in ("", "_seed1")
      for grown, base in (("6_fast_at_16", "1_fast_at"),
                          ("7_fast_at_demem_0.2_16", "2_fast_at_demem_0.2"),
                          ("8_fast_at_demem_1.0_16", "4_fast_at_demem_1.0"),
                          ("9_fast_at_matched_16", "5_fast_at_matched"))],
]


@pytest.mark.parametrize(("grown", "base"), GROWN_TO_16)
def test_a_config_grown_to_16_models_differs_from_its_base_only_in_num_models(grown, base):
    # The grown config reuses the base's run directory and models only while everything but
    # num_models is the same (the run identity leaves num_models out); an edit to one copy
    # alone would silently train a new family under the same claim.
    def load(name):
        return yaml.safe_load((ROOT / "experiments" / f"{name}.yaml").read_text())
    grown_config, base_config = load(grown), load(base)
    assert (grown_config.pop("num_models"), base_config.pop("num_models")) == (16, 8)
    assert grown_config == base_config


def test_every_config_run_line_names_its_own_folder():
    # A config's "# Run:" comment is the command that reproduces it: after a move it must name
    # the folder the config is in (and --only, when given, the config itself).
    experiments = ROOT / "experiments"
    for config in experiments.glob("**/*.yaml"):
        if "outputs" in config.parts or config.parent == experiments:
            continue
        for line in config.read_text().splitlines():
            if line.startswith("# Run: python experiments/run.py "):
                words = line.split()
                assert words[4] == str(config.parent.relative_to(experiments)), config
                if "--only" in words:
                    assert words[words.index("--only") + 1] == config.stem, config


def test_a_cross_run_paired_difference_decides_only_while_its_inputs_are_unchanged(monkeypatch):
    # Issue 26: two runs with the same memberships are compared by paired.py's interval of the
    # difference; a rerun (a new results.json digest) falls back to the two intervals.
    rows = {"h": claims.Row("h", "e", "high"), "l": claims.Row("l", "e", "low")}
    monkeypatch.setattr(claims, "ROWS", rows)
    summaries = {stem: {**_seeded_summary(auc), "sha256": stem} for stem, auc
                 in (("high", 0.61), ("low", 0.60))}  # overlapping intervals: inconclusive
    monkeypatch.setattr(claims, "load_results", committed(
        lambda experiment, stem, *a: summaries[stem]))
    key = claims.paired_key(rows["h"], rows["l"])
    entry = {"digests": ["high", "low"], "auc": {"value": 0.01, "ci": [0.004, 0.016]}}
    monkeypatch.setattr(claims, "paired_entries", lambda: {key: entry})
    claim = claims.Claim("s", "h", "l", ("auc",))
    verdict, text = claims.decide(claim)
    assert verdict == "reproduced" and "paired bootstrap +0.010 [+0.004, +0.016]" in text
    summaries["low"]["sha256"] = "rerun"
    assert claims.decide(claim)[0] == "inconclusive"
    # a "similar" claim reads the same entry: its paired interval within the AUC margin (0.01)
    summaries["low"]["sha256"] = "low"
    entry["auc"] = {"value": 0.002, "ci": [-0.004, 0.008]}
    verdict, text = claims.decide(claims.Claim("s", "h", "l", ("auc",), kind="similar"))
    assert verdict == "reproduced" and ("+0.002 [-0.004, +0.008] (paired bootstrap; margin "
                                        "+-0.010, the paper's absolute: no paper level "
                                        "here)") in text


@pytest.mark.parametrize(("attack", "models", "verdict"), [
    ({"attack": "lira", "options": {}}, (16, 8), "not comparable: h 15 reference models per "
                                                 "target, l 7 (compare at equal numbers)"),
    ({"attack": "lira", "options": {}}, (8, 8), "reproduced"),
    ({"attack": "loss", "options": {}}, (16, 8), "reproduced")])  # LOSS uses no references
def test_runs_calibrated_on_different_numbers_of_reference_models_are_not_compared(
        monkeypatch, attack, models, verdict):
    # LiRA with more reference models is stronger (paper A's SDENet at the floor, the same 8
    # targets: AUC 0.520 with 7, 0.530 with 15): a claim between two such runs measures that too.
    rows = {"h": claims.Row("h", "e", "high"), "l": claims.Row("l", "e", "low")}
    monkeypatch.setattr(claims, "ROWS", rows)
    summaries = {}
    for stem, auc, count in (("high", 0.7, models[0]), ("low", 0.6, models[1])):
        summary = _seeded_summary(auc)
        summary["attacks"]["lira"].update(attack)
        summaries[stem] = {**summary, "num_models": count}
    monkeypatch.setattr(claims, "load_results", committed(
        lambda experiment, stem, *a: summaries[stem]))
    decided = claims.decide(claims.Claim("s", "h", "l", ("auc",)))[0]
    assert decided == verdict or decided == f"{verdict}; as measured: reproduced"


@pytest.mark.parametrize(("stat", "said"), [
    # +0.01, lower end -0.01: SE 0.0102, ((1.96 + 0.84) x 0.0102 / 0.01)^2 = 8.2
    ((0.01, -0.01, 0.03), "~8.2x the targets and samples for 80% power"),
    ((0.001, -0.02, 0.022), "effect ~0: > 100x"),
    ((-0.002, -0.005, 0.001), "estimate against the claim")])
def test_an_inconclusive_claim_says_what_scale_would_decide_it(stat, said):
    # Issue 26: "say what scale would decide it"; issue 79: at 80% power, said as such.
    assert claims.done(claims.Test("auc", "", stat=stat)).to_decide().startswith(said)


def test_the_scale_to_decide_reads_the_paired_interval(monkeypatch):
    rows = {"h": claims.Row("h", "e", "high"), "l": claims.Row("l", "e", "low")}
    monkeypatch.setattr(claims, "ROWS", rows)
    summaries = {stem: {**_seeded_summary(auc), "sha256": stem} for stem, auc
                 in (("high", 0.61), ("low", 0.60))}
    monkeypatch.setattr(claims, "load_results", committed(
        lambda experiment, stem, *a: summaries[stem]))
    entry = {"digests": ["high", "low"], "auc": {"value": 0.01, "ci": [-0.01, 0.03]}}
    monkeypatch.setattr(claims, "paired_entries",
                        lambda: {claims.paired_key(rows["h"], rows["l"]): entry})
    verdict, text = claims.decide(claims.Claim("s", "h", "l", ("auc",)))
    assert verdict == "inconclusive" and "(~8.2x the targets and samples for 80% power" in text


def test_scaling_targets_and_samples_by_four_halves_the_interval_or_better():
    # the power figure's premise, in the synthetic world with known truth: 4x the targets and
    # 4x the samples narrow the crossed-bootstrap interval by at least sqrt(4) = 2 (measured
    # 2.4-3.0x: the model x sample term shrinks by 16), so its factor is an upper bound.
    from miaudit.analysis.synthetic_world import World, coverage_study

    small, large = (coverage_study(World(), 4, models, samples, rounds=200, seed=1).new_width
                    for models, samples in ((8, 1000), (32, 4000)))
    assert all(small[key] / large[key] > 1.9 for key in small), (small, large)


def test_the_lambda_sweep_reads_each_finished_lambda_with_its_intervals(monkeypatch):
    sweep = load_script("experiments/lambda_sweep.py")
    summary = {"target_models": {"test_accuracy": 0.6, "test_accuracy_ci": [0.59, 0.61],
                                 "test_robust_acc_per_target": [0.3, 0.32, 0.34]},
               "targets": [0, 1, 2], "attacks": {sweep.ATTACK: {"pooled": {
                   "auc": 0.66, "auc_ci": [0.65, 0.67], "tpr@0.1%": 0.014,
                   "tpr@0.1%_ci": [0.012, 0.018], "tpr@1%": 0.06, "tpr@1%_ci": [0.055, 0.065],
                   "n_nonmembers": 5000, "ci_method": "crossed"}}}}
    finished = {"1_fast_at", "3_fast_at_demem_0.5", "5_fast_at_matched"}
    monkeypatch.setattr(claims, "load_results", committed(lambda experiment, stem:
                        summary if stem in finished else None))
    points = sweep.sweep("papers/B/fast_at_resnet14")
    assert sorted(points) == [0.0, 0.5]  # lambdas 0.2 and 1.0 have not finished
    assert points[0.5]["auc"] == (0.66, 0.65, 0.67)
    assert points[0.5]["robust_accuracy"][0] == pytest.approx(0.32)
    matched = sweep.controls("papers/B/fast_at_resnet14")
    assert list(matched) == ["fast AT, 20 epochs"]  # the control is not a lambda of the line
    assert sweep.controls("papers/B/fast_at") == {}  # no control there
    text = sweep.table({"papers/B/fast_at_resnet14": points},
                       {"papers/B/fast_at_resnet14": matched})
    assert "| ResNet-14, seed 0 | 0.5 | 60.0 [59.0, 61.0] | 32.0" in text
    assert "| ResNet-14, seed 0 | control: fast AT, 20 epochs | 60.0 [59.0, 61.0] |" in text


def _accuracy_summary(per_target_test, seed=0, data_dir="/a"):
    return {"targets": [0, 1, 2], "num_models": 3, "protocol": "rotation", "pool_size": 100,
            "config": {"seed": seed, "data": {"name": "cifar10", "data_dir": data_dir}},
            "target_models": {"per_target_test": per_target_test}}


@pytest.mark.parametrize("other_seed, other_dir, paired", [
    (0, "/b", True),    # where the data were read from does not change the memberships
    (1, "/a", False),   # another seed draws other memberships: fall back to MOVER
])
def test_similar_accuracies_pair_over_targets_only_with_the_same_memberships(
        monkeypatch, other_seed, other_dir, paired):
    summaries = {"high": _accuracy_summary([0.60, 0.62, 0.61]),
                 "low": _accuracy_summary([0.58, 0.61, 0.59], other_seed, other_dir)}
    monkeypatch.setattr(claims, "load_results", committed(lambda experiment, stem: summaries[stem]))
    high, low = (claims.Row(stem, "e", stem) for stem in ("high", "low"))
    found = claims.paired_accuracy_difference(high, low, "test_accuracy")
    if not paired:
        assert found is None
        return
    # by hand: differences 0.02, 0.01, 0.02; mean 0.01667, sd 0.005774, t(0.975, 2) = 4.3027
    assert found == pytest.approx((0.016667, 0.002324, 0.031010), abs=1e-5)


def test_paired_py_skips_only_entries_computed_from_the_committed_results(monkeypatch):
    paired = load_script("experiments/paired.py")
    summaries = {"high": {"sha256": "h1"}, "low": {"sha256": "l1"}}
    monkeypatch.setattr(claims, "load_results", committed(
        lambda experiment, stem: summaries.get(stem)))
    high, low = claims.Row("h", "e", "high"), claims.Row("l", "e", "low")
    entry = {"digests": ["h1", "l1"], "auc": {"value": 0.01, "ci": [0.0, 0.02]}}
    assert paired.is_current(entry, high, low, ("auc",))
    assert not paired.is_current(entry, high, low, ("auc", "tpr@1%"))  # a metric it lacks
    assert not paired.is_current(None, high, low, ("auc",))
    summaries["low"]["sha256"] = "rerun"  # the low run was rerun: recompute
    assert not paired.is_current(entry, high, low, ("auc",))


def test_paired_py_keeps_what_a_missing_partner_needs_and_pairs_with_it_later(
        monkeypatch, tmp_path):
    # A run directory rarely outlives its session: paired.py keeps the scores of a row whose
    # partner is not here (not run yet), and the partner, run after the directory is gone,
    # pairs with them; a rerun of the kept row (another digest) no longer does.
    import json
    import shutil

    from miaudit.auditor.stages import audit

    paired = load_script("experiments/paired.py")
    folders = {stem: audit(validate_config(tiny_audit(tmp_path, **extra)),
                           show_progress=False).run_dir
               for stem, extra in (("high", {}), ("low", {"train": {"epochs": 2}}))}
    records = {stem: json.loads((folder / "results.json").read_text())
               for stem, folder in folders.items()}
    on_record = {"high": records["high"]}  # the low row is not run yet
    monkeypatch.setattr(claims, "load_results", committed(lambda experiment, stem:
                                                          on_record.get(stem)))
    monkeypatch.setattr(claims, "HERE", tmp_path)
    high, low = claims.Row("h", "e", "high"), claims.Row("l", "e", "low")
    wanted = [(high, low, ("auc",))]
    outputs = tmp_path / "e" / "outputs"

    paired.keep_for_later(wanted, [])
    assert sorted(p.name for p in outputs.iterdir()) == ["high.scores.npz"]
    on_record["low"] = records["low"]
    both_here, _ = paired.compute(high, low, ("auc",), [])
    shutil.rmtree(folders["high"])  # gone with its session
    entry, what = paired.compute(high, low, ("auc",), [])
    assert what == "computed" and entry == both_here
    paired.keep_for_later(wanted, [])  # the low row's partner is kept: nothing more to keep
    assert sorted(p.name for p in outputs.iterdir()) == ["high.scores.npz"]
    on_record["high"] = {**records["high"], "sha256": "a rerun"}
    assert paired.compute(high, low, ("auc",), [])[1].startswith("run directory not here")


def test_run_refuses_bf16_configs_where_bfloat16_has_no_kernels(monkeypatch, tmp_path):
    # experiments/README.md plans its costs with bfloat16 kernels: without them (2026-12-01's
    # AVX2 CPU) a bf16 config trains ~10x slower than fp32, so run.py refuses it up front
    run = load_script("experiments/run.py")

    def config(precision, **overrides):
        audit = tiny_audit(tmp_path, device="cpu", **overrides)
        return validate_config({**audit, "train": {**audit["train"], "precision": precision}})

    cfg = config("bf16")
    monkeypatch.setattr(machine, "native_bf16", lambda device: False)
    refusal = "without bfloat16 kernels.*train.precision fp32.*--slow-bf16"  # and the ways out
    with pytest.raises(run.ConfigError, match=refusal):
        run.check_bf16_kernels(cfg, allow_slow=False)
    run.check_bf16_kernels(cfg, allow_slow=True)  # asked for: runs
    fp32_references = config("fp32", protocol="fixed_target", reference_train={
        "epochs": 8, "batch_size": 32, "lr": 0.1, "precision": "bf16"})
    with pytest.raises(run.ConfigError):  # bf16 reference models count too
        run.check_bf16_kernels(fp32_references, allow_slow=False)
    run.check_bf16_kernels(config("fp32"), allow_slow=False)  # fp32: nothing to refuse
    monkeypatch.setattr(machine, "native_bf16", lambda device: True)
    run.check_bf16_kernels(cfg, allow_slow=False)
