"""Epsilon lower bounds from canaries (miaudit.privacy.auditing) and the canary harness."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import binom

from miaudit.privacy import auditing, bounds
from miaudit.privacy.accounting import gaussian_epsilon
from miaudit.stats import metrics


# -- one run: the theorem's p-value against hand-worked values ----------------------------------
def test_p_value_pure_dp_is_the_binomial_tail():
    # delta = 0 (Steinke et al. 2023, main theorem with delta = 0): P[Binomial(r, q) >= v],
    # q = e^eps / (1 + e^eps). eps = 0: q = 1/2, r = 4, v = 3: (4 + 1) / 16.
    assert auditing.one_run_p_value(10, 4, 3, 0.0) == pytest.approx(5 / 16)
    # eps = log 3: q = 3/4, r = v = 2: 9/16
    assert auditing.one_run_p_value(10, 2, 2, math.log(3)) == pytest.approx(9 / 16)


def test_p_value_delta_term_hand_worked():
    # m = 10, r = v = 2, eps = 0, delta = 0.01. f(2) = 1/4; i = 1: (f(1) - f(2)) / 1 = 1/2;
    # i = 2: (f(0) - f(2)) / 2 = 3/8; i > 2: (1 - 1/4) / i < 1/2. p = 1/4 + 2*10*0.01*1/2.
    assert auditing.one_run_p_value(10, 2, 2, 0.0, 0.01) == pytest.approx(0.35)


def _theorem_rhs(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """The theorem's right-hand side written literally: max over all i in {1..m}."""
    q = math.exp(eps) / (1 + math.exp(eps))

    def f(t: int) -> float:
        return float(binom.sf(t - 1, r, q))

    return min(1.0, f(v) + 2 * m * delta * max((f(v - i) - f(v)) / i for i in range(1, m + 1)))


@pytest.mark.parametrize("m,r,v,eps,delta", [(50, 20, 17, 0.7, 1e-3), (200, 100, 80, 1.3, 1e-5),
                                             (30, 30, 30, 2.0, 1e-2), (40, 10, 3, 0.2, 1e-4)])
def test_p_value_matches_the_literal_theorem(m, r, v, eps, delta):
    assert auditing.one_run_p_value(m, r, v, eps, delta) == pytest.approx(
        _theorem_rhs(m, r, v, eps, delta), rel=1e-10, abs=1e-14)


def test_all_correct_pure_dp_closed_form():
    # r = v, delta = 0: q^r = beta  ->  eps = log(q / (1 - q)), q = beta^(1/r). r = 100,
    # beta = 0.05: q = 0.970487, eps = 3.49297.
    q = 0.05 ** (1 / 100)
    assert auditing.one_run_epsilon(1000, 100, 100, 0.0, 0.95) == pytest.approx(
        math.log(q / (1 - q)), abs=1e-9)
    assert auditing.one_run_epsilon(1000, 100, 100, 0.0, 0.95) == pytest.approx(3.49297, abs=1e-4)


def test_one_run_bound_is_the_root_of_the_p_value():
    eps = auditing.one_run_epsilon(1000, 200, 170, 1e-5, 0.95)
    assert eps > 0
    assert auditing.one_run_p_value(1000, 200, 170, eps, 1e-5) < 0.05
    assert auditing.one_run_p_value(1000, 200, 170, eps + 1e-6, 1e-5) >= 0.05


def test_chance_level_guesses_prove_nothing():
    assert auditing.one_run_epsilon(100, 100, 50, 0.0) == 0.0
    assert auditing.one_run_epsilon(100, 0, 0, 0.0) == 0.0


def test_one_run_monotone():
    # more correct guesses -> larger bound; larger delta or confidence -> smaller bound
    bounds = [auditing.one_run_epsilon(500, 100, v, 1e-5) for v in range(60, 101, 5)]
    assert all(b2 > b1 for b1, b2 in zip(bounds, bounds[1:]))
    assert auditing.one_run_epsilon(500, 100, 90, 1e-3) < auditing.one_run_epsilon(500, 100, 90,
                                                                                   1e-6)
    assert auditing.one_run_epsilon(500, 100, 90, 0, 0.99) < auditing.one_run_epsilon(500, 100,
                                                                                      90, 0, 0.9)


def test_guesses_top_and_bottom():
    scores = np.array([0.1, 5.0, -3.0, 2.0, 0.0])
    assert auditing.one_run_guesses(scores, 2, 1).tolist() == [0, 1, -1, 1, 0]
    with pytest.raises(ValueError):
        auditing.one_run_guesses(scores, 4, 2)


# -- one run on mechanisms with known epsilon ---------------------------------------------------
def _randomized_response(eps: float, m: int, rng: np.random.Generator):
    """Each canary's bit S_i is released truthfully with probability e^eps / (1 + e^eps):
    eps-DP with respect to every canary, and exactly the theorem's worst case."""
    included = rng.random(m) < 0.5
    truthful = rng.random(m) < math.exp(eps) / (1 + math.exp(eps))
    return np.where(included == truthful, 1.0, -1.0), included


def test_one_run_randomized_response_close_to_truth_and_valid():
    eps, m, beta = 2.0, 2000, 0.05
    rng = np.random.default_rng(0)
    bounds = []
    for _ in range(200):
        released, included = _randomized_response(eps, m, rng)
        guess = np.where(released > 0, 1, -1)  # guess on every canary: r = m
        v = int(np.sum(guess == np.where(included, 1, -1)))
        bounds.append(auditing.one_run_epsilon(m, m, v, 0.0, 1 - beta))
    bounds = np.array(bounds)
    # Valid: the bound exceeds the truth with probability <= beta (here exactly the binomial
    # test's size); 200 draws: the count is <= 20 with probability > 0.999.
    assert np.mean(bounds > eps) <= 0.1
    # Close: within ~0.2 of eps = 2 with 2,000 canaries.
    assert 1.75 < np.median(bounds) <= eps


def test_one_run_gaussian_scores_never_above_truth():
    # Score = mu * S_i + N(0, 1): mu-GDP per canary, (eps(delta), delta)-DP for every delta.
    mu, m, delta = 2.0, 1000, 1e-5
    truth = gaussian_epsilon(mu, delta)
    rng = np.random.default_rng(1)
    bounds = []
    for _ in range(30):
        included = rng.random(m) < 0.5
        scores = mu * included + rng.standard_normal(m)
        bounds.append(auditing.one_run_audit(scores, included, [(50, 50), (100, 100)], delta,
                                             0.95).epsilon_lower)
    assert max(bounds) <= truth
    assert np.median(bounds) > 0.3 * truth  # informative: a loose but real lower bound


def test_one_run_audit_bonferroni_over_grid():
    rng = np.random.default_rng(2)
    included = rng.random(400) < 0.5
    scores = 3.0 * included + rng.standard_normal(400)
    single = auditing.one_run_audit(scores, included, (50, 50), 0.0, 0.95)
    grid = auditing.one_run_audit(scores, included, [(50, 50), (20, 20)], 0.0, 0.95)
    assert grid.grid_size == 2
    # The same (k+, k-) inside a grid is tested at beta / 2, so it proves less.
    same = auditing.one_run_audit(scores, included, [(50, 50), (1, 0)], 0.0, 0.95)
    assert same.k_pos == 50 and same.epsilon_lower < single.epsilon_lower
    assert grid.epsilon_lower >= auditing.one_run_epsilon(400, grid.guesses, grid.correct, 0.0,
                                                          1 - 0.05 / 2) - 1e-12


# -- multi-run ------------------------------------------------------------------------------------
def test_clopper_pearson_zero_successes_closed_form():
    # 0 of n: upper bound 1 - alpha^(1/n) (Beta(1, n) quantile); n = 100, alpha = 0.025.
    assert metrics.clopper_pearson_upper(0, 100, 0.025) == pytest.approx(1 - 0.025 ** 0.01)
    assert metrics.clopper_pearson_upper(100, 100, 0.025) == 1.0


def test_epsilon_from_rates_hand_worked():
    # FPR = 0.1, FNR = 0.2, delta = 0: max(log(0.9 / 0.2), log(0.8 / 0.1)) = log 8
    assert auditing.epsilon_from_rates(0.1, 0.2) == pytest.approx(math.log(8))
    # delta = 0.05: log((1 - 0.05 - 0.2) / 0.1) = log 7.5
    assert auditing.epsilon_from_rates(0.1, 0.2, 0.05) == pytest.approx(math.log(7.5))
    assert auditing.epsilon_from_rates(0.5, 0.5) == 0.0


def test_certified_epsilon_keeps_the_valid_side_of_a_vacuous_pair():
    # FPR upper 0.999 with delta 0.01: the first side's numerator 1 - 0.01 - 0.999 < 0 is
    # vacuous, the second still counts: log((1 - 0.01 - 0.001) / 0.999) < 0
    both = auditing.certified_epsilon(np.array([0.999, 0.1]), np.array([0.001, 0.2]), 0.01)
    assert both[0] == pytest.approx(math.log(0.989 / 0.999))
    assert both[1] == pytest.approx(math.log(0.79 / 0.1))  # max(log(0.89/0.2), log(0.79/0.1))
    assert auditing.certified_epsilon(1.0, 1.0) == -np.inf  # both vacuous


def test_one_definition_of_the_empirical_bound_and_of_clopper_pearson():
    # the audit-scores bound (bounds.empirical_epsilon) and the canary bound
    # (auditing.epsilon_from_rates) are the same formula over the same Clopper-Pearson bounds
    rng = np.random.default_rng(3)
    scores = np.concatenate([rng.normal(2, 1, 400), rng.normal(0, 1, 400)])
    labels = np.arange(800) < 400
    found = bounds.empirical_epsilon(scores, labels, 1e-5, thresholds=[1.0], alpha=0.05)
    fp, fn = int((scores[~labels] >= 1).sum()), int((scores[labels] < 1).sum())
    fpr_up = metrics.clopper_pearson_upper(fp, 400, 0.025)
    fnr_up = metrics.clopper_pearson_upper(fn, 400, 0.025)
    assert found.epsilon_lower == pytest.approx(float(auditing.epsilon_from_rates(
        fpr_up, fnr_up, 1e-5)))
    assert found.epsilon_lower > 0.5
    # the two-sided interval's upper end is the one-sided bound at alpha / 2
    assert metrics.clopper_pearson(fp, 400)[1] == pytest.approx(float(fpr_up))
    assert bounds.clopper_pearson_upper is metrics.clopper_pearson_upper


def test_multi_run_perfect_separation_hand_worked():
    # 100 + 100 runs, split: 50 + 50 evaluation runs, 0 errors, each rate at alpha / 2:
    # u = 1 - 0.025^(1/50), eps = log((1 - u) / u).
    u = 1 - 0.025 ** (1 / 50)
    audit = auditing.multi_run_audit(np.ones(100), np.zeros(100), 0.0, 0.95, "split")
    assert audit.epsilon_lower == pytest.approx(math.log((1 - u) / u))
    assert audit.runs_in == audit.runs_out == 50
    assert audit.fpr == audit.fnr == 0.0


def test_multi_run_bonferroni_divides_alpha_by_thresholds():
    # Two distinct scores -> 3 thresholds; the best one is tested at alpha / (2 * 3).
    u = 1 - (0.05 / 6) ** (1 / 40)
    audit = auditing.multi_run_audit(np.ones(40), np.zeros(40), 0.0, 0.95, "bonferroni")
    assert audit.thresholds_tried == 3
    assert audit.epsilon_lower == pytest.approx(math.log((1 - u) / u))


@pytest.mark.parametrize("selection", auditing.SELECTIONS)
def test_multi_run_randomized_response_valid_and_close(selection):
    # One bit per run, flipped with probability 1 / (1 + e^eps): eps-DP, and the threshold
    # between 0 and 1 meets eps's constraint with equality.
    eps, runs = 1.0, 2000
    q = math.exp(eps) / (1 + math.exp(eps))
    rng = np.random.default_rng(3)
    bounds = []
    for _ in range(100):
        scores_in = (rng.random(runs) < q).astype(float)
        scores_out = (rng.random(runs) >= q).astype(float)
        bounds.append(auditing.multi_run_audit(scores_in, scores_out, 0.0, 0.95, selection,
                                               seed=int(rng.integers(1000))).epsilon_lower)
    bounds = np.array(bounds)
    assert np.mean(bounds > eps) <= 0.1
    assert np.median(bounds) > 0.75 * eps


def test_multi_run_gaussian_never_above_truth():
    mu, delta = 1.5, 1e-3
    truth = gaussian_epsilon(mu, delta)
    rng = np.random.default_rng(4)
    for _ in range(20):
        audit = auditing.multi_run_audit(mu + rng.standard_normal(500),
                                         rng.standard_normal(500), delta, 0.95, "bonferroni")
        assert 0 < audit.epsilon_lower <= truth


def test_multi_run_monotone_in_separation():
    rng = np.random.default_rng(5)
    noise_in, noise_out = rng.standard_normal(200), rng.standard_normal(200)
    bounds = [auditing.multi_run_audit(shift + noise_in, noise_out, 0.0, 0.95,
                                       "bonferroni").epsilon_lower for shift in (0.5, 1, 2, 4)]
    assert all(b2 > b1 for b1, b2 in zip(bounds, bounds[1:]))


def test_multi_run_null_proves_nothing_often():
    rng = np.random.default_rng(6)
    positive = [auditing.multi_run_audit(rng.standard_normal(100), rng.standard_normal(100), 0.0,
                                         0.95, "split", seed=s).epsilon_lower > 0
                for s in range(100)]
    assert np.mean(positive) <= 0.1  # a null mechanism is 0-DP: any positive bound is an error


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="selection"):
        auditing.multi_run_audit(np.ones(4), np.zeros(4), selection="best")
    with pytest.raises(ValueError, match="confidence"):
        auditing.one_run_epsilon(10, 5, 5, 0.0, 1.5)
    with pytest.raises(ValueError):
        auditing.one_run_p_value(10, 5, 6, 1.0)


# -- canaries -----------------------------------------------------------------------------------
def test_canaries_kinds_and_disjoint_base():
    from miaudit.dp_audit.canary import inclusion_bits, make_canaries

    x = torch.arange(40, dtype=torch.float32).reshape(40, 1, 1, 1)
    y = torch.arange(40) % 4
    natural = make_canaries(x, y, 10, "natural", 4, seed=0)
    assert set(natural.base_x.flatten().tolist()).isdisjoint(natural.x.flatten().tolist())
    assert len(natural.base_y) == 30
    assert torch.equal(natural.y, y[torch.from_numpy(natural.source)])
    flipped = make_canaries(x, y, 10, "mislabelled", 4, seed=0)
    assert torch.equal(flipped.x, natural.x)
    assert bool((flipped.y != y[torch.from_numpy(flipped.source)]).all())
    ood = make_canaries(x, y, 10, "ood", 4, seed=0)
    assert ood.x.shape == (10, 1, 1, 1) and len(ood.base_y) == 40
    bits = inclusion_bits(4000, seed=1)
    assert abs(bits.mean() - 0.5) < 0.03
    assert np.array_equal(bits, inclusion_bits(4000, seed=1))


def test_config_is_validated_before_training():
    from pydantic import ValidationError

    from miaudit.dp_audit.settings import DPAuditConfig

    with pytest.raises(ValidationError):
        DPAuditConfig(runs=1)
    with pytest.raises(ValidationError):
        DPAuditConfig(canaries=10, guesses=[(8, 8)])
    with pytest.raises(ValidationError, match="delta"):
        DPAuditConfig.model_validate({"train": {"recipe": "dpsgd", "recipe_options": {
            "target_epsilon": 1.0, "delta": 1e-3}}, "delta": 1e-5})
    with pytest.raises(ValidationError):
        DPAuditConfig.model_validate({"model": {"name": "no_such_model"}})
    cfg = DPAuditConfig.model_validate({"train": {"recipe": "dpsgd", "recipe_options": {
        "target_epsilon": 1.0}}, "delta": 1e-6})
    assert cfg.recipe_options()["delta"] == 1e-6


def test_one_run_audit_end_to_end_tiny():
    """A tiny non-private MLP memorizes mislabelled canaries: the bound is positive."""
    from miaudit.dp_audit.canary import run_dp_audit

    torch.set_num_threads(1)
    report = run_dp_audit({
        "data": {"name": "digits"}, "model": {"name": "mlp", "options": {"hidden": [64]}},
        "train": {"epochs": 40, "batch_size": 64, "lr": 0.1, "weight_decay": 0.0},
        "canaries": 64, "canary_kind": "mislabelled", "guesses": [[16, 16]], "delta": 0.0})
    data = report.as_dict()
    assert data["mode"] == "one_run" and data["claimed_epsilon"] is None
    assert data["epsilon_lower"] > 0.5
    assert data["epsilon_lower"] <= data["max_provable"]


def test_cli_audit_validates_and_writes_json(tmp_path):
    import json

    from typer.testing import CliRunner

    from miaudit.cli import app

    runner = CliRunner()
    bad = runner.invoke(app, ["dp-audit", "--canary-kind", "shiny"])
    assert bad.exit_code == 2 and "canary_kind" in bad.output
    bad = runner.invoke(app, ["dp-audit", "--recipe", "dpsgd"])  # no epsilon or noise
    assert bad.exit_code == 2 and "target_epsilon" in bad.output
    out = tmp_path / "audit.json"
    torch.set_num_threads(1)
    done = runner.invoke(app, ["dp-audit", "--epochs", "2", "--canaries", "16",
                               "--guesses", "4,4", "--output", str(out)])
    assert done.exit_code == 0, done.output
    report = json.loads(out.read_text())
    assert report["mode"] == "one_run" and report["audit"]["guesses"] == 8


def test_dp_audit_reads_a_config_section(tmp_path):
    import json

    import yaml
    from typer.testing import CliRunner

    from miaudit.cli import app

    section = {"dp_audit": {"train": {"epochs": 2}, "canaries": 16, "guesses": [[4, 4]],
                            "canary_kind": "ood"}}
    (tmp_path / "audit.yaml").write_text(yaml.safe_dump(section))
    out = tmp_path / "audit.json"
    torch.set_num_threads(1)
    done = CliRunner().invoke(app, ["dp-audit", "-c", str(tmp_path / "audit.yaml"), "-o",
                                    str(out)])
    assert done.exit_code == 0, done.output
    report = json.loads(out.read_text())
    assert report["config"]["canary_kind"] == "ood" and report["audit"]["guesses"] == 8
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"dp_audit": {"canaris": 3}}))
    bad = CliRunner().invoke(app, ["dp-audit", "-c", str(tmp_path / "bad.yaml")])
    assert bad.exit_code == 2 and "canaris" in bad.output


def test_max_provable_matches_perfect_attacks():
    grid = [(6, 6), (32, 32)]
    perfect = np.r_[np.ones(32), np.zeros(32)], np.r_[np.ones(32), np.zeros(32)].astype(bool)
    audit = auditing.one_run_audit(perfect[0], perfect[1], grid, 1e-5, 0.95)
    assert audit.correct == audit.guesses == 64
    assert auditing.max_one_run_epsilon(grid, 1e-5, 0.95, 64) == pytest.approx(
        audit.epsilon_lower)
    rng = np.random.default_rng(7)
    separated = auditing.multi_run_audit(10 + rng.random(32), rng.random(32), 0.0, 0.95,
                                         "bonferroni")
    assert auditing.max_multi_run_epsilon(32, 32, 0.0, 0.95, "bonferroni") == pytest.approx(
        separated.epsilon_lower)
