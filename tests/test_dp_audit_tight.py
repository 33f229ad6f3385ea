"""Tight DP audits (issue 81): the Gaussian-DP and f-DP analyses against mechanisms with known
privacy, the gradient-canary hook in DP-SGD and the all-iterates threat model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import binomtest, nct

from miaudit.privacy import auditing, fdp_audit, gaussian_audit
from miaudit.privacy.accounting import gaussian_epsilon

DELTA = 1e-5


def _exceedance_ok(exceed: int, trials: int) -> bool:
    """One-sided binomial test of 'exceedance rate <= 5%' (rejected only at p < 0.01)."""
    return binomtest(exceed, trials, 0.05, alternative="greater").pvalue >= 0.01


def _gaussian_mechanism(rng: np.random.Generator, mu: float, m: int):
    included = rng.random(m) < 0.5
    return rng.normal(size=m) + mu * included, included


# -- the Gaussian-DP estimate (Nasr et al. 2023) --------------------------------------------------
def test_mu_lower_bound_inverts_the_noncentral_t():
    # the bound is the noncentrality at which the observed t sits at the upper 5% tail
    bound = gaussian_audit.mu_lower_bound(4.0, 30, 0.5, 0.05)
    assert nct.sf(4.0, 30, bound / 0.5) == pytest.approx(0.05, abs=1e-8)
    assert gaussian_audit.mu_lower_bound(0.5, 30, 0.5, 0.05) == 0.0  # t below the null's 95%


def test_gaussian_audit_hand_worked():
    # in: 1, 3 (mean 2); out: -1, 1 (mean 0); pooled sd = sqrt((2 + 2) / 2) = sqrt 2
    audit = gaussian_audit.gaussian_audit([1.0, 3.0], [-1.0, 1.0], DELTA, 0.95)
    assert audit.mu_hat == pytest.approx(2 / math.sqrt(2))
    assert audit.epsilon_hat == pytest.approx(gaussian_epsilon(math.sqrt(2), DELTA))
    assert audit.mu_lower < audit.mu_hat


def test_gaussian_audit_valid_on_the_gaussian_mechanism():
    """400 simulated one-run audits of a mu = 1 Gaussian mechanism (200 canaries): the 95%
    lower bound exceeds the true mu (equivalently eps) in at most 5% of them."""
    rng = np.random.default_rng(0)
    exceed = 0
    for _ in range(400):
        scores, included = _gaussian_mechanism(rng, 1.0, 200)
        exceed += gaussian_audit.one_run_gaussian_audit(scores, included, DELTA).mu_lower > 1.0
    assert _exceedance_ok(exceed, 400), exceed
    assert exceed >= 5  # the bound is exact, not conservative: it does exceed sometimes


def test_gaussian_audit_recovers_80_percent_on_the_gaussian_mechanism():
    rng = np.random.default_rng(1)
    for mu in (0.5, 1.0, 2.0):
        scores, included = _gaussian_mechanism(rng, mu, 2000)
        audit = gaussian_audit.one_run_gaussian_audit(scores, included, DELTA)
        assert audit.epsilon_lower >= 0.8 * gaussian_epsilon(mu, DELTA), (mu, audit)


def test_gaussian_audit_null_proves_nothing_often():
    rng = np.random.default_rng(2)
    zero = sum(gaussian_audit.one_run_gaussian_audit(*_gaussian_mechanism(rng, 0.0, 100),
                                                     DELTA).epsilon_lower == 0
               for _ in range(100))
    assert zero >= 85


def test_llr_statistic_matches_a_literal_likelihood_ratio():
    y = np.array([[0.3, -1.0], [1.2, 0.1], [0.0, 2.0]])
    z, q = 1.5, 0.2

    def density(x, mean):
        return np.exp(-(x - mean) ** 2 / (2 * z * z))

    literal = np.log(((1 - q) * density(y, 0) + q * density(y, 1)) / density(y, 0)).sum(0)
    np.testing.assert_allclose(gaussian_audit.subsampled_gaussian_llr(y, z, q), literal)


# -- the f-DP one-run audit (Mahloujifar et al. 2024) ----------------------------------------------
def test_fdp_chance_level_rejects_nothing():
    # half of the guesses right is what a perfectly private mechanism gives: nothing rejected
    assert not fdp_audit.rejected(100, 40, 20, np.array([0.5, 1.0]), "gdp", 0.05).any()
    assert fdp_audit.largest_rejected(100, 40, 20, "dp", 0.05, DELTA) == 0.0


def test_fdp_rejection_is_monotone_in_privacy_and_in_correct_guesses():
    grid = np.linspace(0.05, 4, 80)
    hits = fdp_audit.rejected(1000, 100, 95, grid, "gdp", 0.05)
    assert hits.any() and not hits.all()
    assert np.all(np.diff(hits.astype(int)) <= 0)  # rejected below a threshold, then never
    bounds = [fdp_audit.largest_rejected(1000, 100, c, "gdp", 0.05, DELTA) for c in (70, 85, 100)]
    assert bounds == sorted(bounds) and bounds[0] < bounds[-1]


def test_fdp_inverse_blow_up_closed_forms():
    x = np.array([0.1, 0.5, 0.9])
    np.testing.assert_allclose(fdp_audit.inverse_blow_up(x, 0.0, "gdp"), x)
    # (eps, delta) with eps = log 2, delta = 0.05: max(0, (x - d)/2, 1 - d - 2 (1 - x))
    expected = np.maximum.reduce([np.zeros(3), (x - 0.05) / 2, 1 - 0.05 - 2 * (1 - x)])
    np.testing.assert_allclose(fdp_audit.inverse_blow_up(x, math.log(2), "dp", 0.05), expected)


@pytest.mark.parametrize("family, truth", [("gdp", 1.0), ("dp", 1.0)])
def test_fdp_valid_on_known_mechanisms(family, truth):
    """1,000 simulated audits with 200 canaries and 40 guesses (top 20, bottom 20): the true
    parameter (mu of a Gaussian mechanism, eps of randomized response) is rejected at 95% in at
    most 5% of them."""
    rng = np.random.default_rng(3)
    exceed = 0
    for _ in range(1000):
        included = rng.random(200) < 0.5
        if family == "gdp":
            scores = rng.normal(size=200) + truth * included
        else:  # eps-randomized response of the coin, ties broken at random
            keep = rng.random(200) < math.exp(truth) / (1 + math.exp(truth))
            scores = np.where(keep, included, ~included) + 1e-3 * rng.random(200)
        guesses = auditing.one_run_guesses(scores, 20, 20)
        correct = int(np.sum(guesses * np.where(included, 1, -1) == 1))
        exceed += bool(fdp_audit.rejected(200, 40, correct, np.array([truth]), family, 0.05,
                                          0.0)[0])
    assert _exceedance_ok(exceed, 1000), exceed


def test_fdp_tighter_than_steinke_on_the_gaussian_mechanism():
    rng = np.random.default_rng(4)
    scores, included = _gaussian_mechanism(rng, 2.0, 2000)
    grid = [(100, 100), (200, 200)]
    fdp = fdp_audit.fdp_one_run_audit(scores, included, grid, DELTA, 0.95, "gdp")
    steinke = auditing.one_run_audit(scores, included, grid, DELTA, 0.95)
    truth = gaussian_epsilon(2.0, DELTA)
    assert steinke.epsilon_lower < fdp.epsilon_lower <= truth
    assert fdp.epsilon_lower >= 0.5 * truth  # measured 0.61 of the truth (docs/dp-audits.md)
    assert fdp.epsilon_lower <= fdp_audit.max_fdp_epsilon(2000, grid, DELTA, 0.95, "gdp")


def test_fdp_bad_options_are_refused():
    with pytest.raises(ValueError, match="family"):
        fdp_audit.fdp_one_run_audit([1.0, 0.0], [True, False], (1, 1), DELTA, family="rdp")
    with pytest.raises(ValueError, match="delta"):
        fdp_audit.fdp_one_run_audit([1.0, 0.0], [True, False], (1, 1), 0.0, family="gdp")


# -- gradient canaries in DP-SGD (all_iterates) ------------------------------------------------
def _all_iterates(**extra):
    from miaudit.dp_audit.canary import run_dp_audit

    torch.set_num_threads(1)
    spec = {"threat_model": "all_iterates", "canaries": 200,
            "model": {"name": "mlp", "options": {"hidden": [32]}},
            "train": {"recipe": "dpsgd", "epochs": 2, "batch_size": 64, "lr": 0.5,
                      "recipe_options": {"noise_multiplier": 1.0}},
            "gradient_canary_norm": 4.0, **extra}
    return run_dp_audit(spec).as_dict()


def test_all_iterates_observes_the_noise_and_the_canaries():
    report = _all_iterates()
    assert report["mode"] == "all_iterates" and report["steps"] == 2 * 23
    # out canaries and unsampled steps: pure N(0, z^2) noise with z = 1
    assert report["observed_noise_std"] == pytest.approx(1.0, abs=0.03)
    assert set(report["analyses"]) == {"gaussian", "fdp", "steinke", "clopper_pearson"}
    # z = 1, q = 1/23, 46 steps: mu = q sqrt(T (e - 1)) = 0.39; nothing near a contradiction
    assert report["epsilon_lower"] < report["claimed_epsilon"]


def test_all_iterates_catches_noise_scaled_twice():
    report = _all_iterates(planted_bug="noise_over_batch")
    assert report["observed_noise_std"] < 0.05  # 1 / 62
    gaussian = report["analyses"]["gaussian"]
    assert gaussian["epsilon_lower"] > report["claimed_epsilon"]


def test_gradient_canary_rows_are_clipped_and_directions_orthonormal():
    from miaudit.recipes.gradient_canaries import GradientCanaries

    canaries = GradientCanaries(np.ones(5, dtype=bool), 0, kind="direction")
    canaries._directions(40)
    gram = canaries.basis.double() @ canaries.basis.double().T
    np.testing.assert_allclose(gram.numpy(), np.eye(5), atol=1e-6)
    coordinates = GradientCanaries(np.ones(5, dtype=bool), 0)
    coordinates._directions(40)
    rows = coordinates._rows(np.array([0, 3]), 40, 4.0)
    assert rows.norm(dim=1).tolist() == [4.0, 4.0]
    assert coordinates.project(rows[1])[3] == 4.0


def test_all_iterates_config_is_checked():
    from pydantic import ValidationError

    from miaudit.dp_audit.settings import DPAuditConfig

    with pytest.raises(ValidationError, match="needs recipe dpsgd"):
        DPAuditConfig.model_validate({"threat_model": "all_iterates"})
    with pytest.raises(ValidationError, match="do not apply"):
        DPAuditConfig.model_validate({"analyses": ["clopper_pearson"]})
    with pytest.raises(ValidationError, match="all_iterates"):
        DPAuditConfig.model_validate({"planted_bug": "unclipped_layer"})
    cfg = DPAuditConfig.model_validate({"delta": 0.0})
    assert cfg.analysis_names() == ["steinke", "fdp"] and cfg.fdp_families() == ["dp"]


def test_cli_all_iterates_writes_json_and_html(tmp_path):
    import json

    from typer.testing import CliRunner

    from miaudit.cli import app

    runner = CliRunner()
    bad = runner.invoke(app, ["dp-audit", "--threat-model", "everything"])
    assert bad.exit_code == 2 and "threat_model" in bad.output
    bad = runner.invoke(app, ["dp-audit", "--threat-model", "all_iterates"])  # not dpsgd
    assert bad.exit_code == 2 and "dpsgd" in bad.output
    torch.set_num_threads(1)
    out, page = tmp_path / "audit.json", tmp_path / "audit.html"
    done = runner.invoke(app, [
        "dp-audit", "--threat-model", "all_iterates", "--analysis", "gaussian", "--analysis",
        "steinke", "--recipe", "dpsgd:noise_multiplier=1.0", "--model", "mlp:hidden=[16]",
        "--epochs", "1", "--canaries", "100", "--output", str(out), "--html", str(page)])
    assert done.exit_code == 0, done.output
    report = json.loads(out.read_text())
    assert list(report["analyses"]) == ["gaussian", "steinke"]
    assert report["audit"] == report["analyses"]["gaussian"]  # the first is the headline
    html = page.read_text()
    assert "claimed vs audited" in html and "gaussian" in html and "steinke" in html


def test_adversarial_canaries_are_crafted_in_range_and_audited():
    from miaudit.dp_audit import canary

    torch.set_num_threads(1)
    cfg = canary.DPAuditConfig.model_validate({
        "canaries": 32, "canary_kind": "adversarial", "reference_models": 1, "craft_steps": 5,
        "model": {"name": "mlp", "options": {"hidden": [16]}}, "guesses": [[8, 8]],
        "train": {"epochs": 15, "batch_size": 64, "lr": 0.1}})
    setup = canary.prepare(cfg)
    start = canary.make_canaries(setup.canaries.base_x, setup.canaries.base_y, 32, "ood", 10, 0)
    crafted = setup.canaries
    assert crafted.kind == "adversarial" and not torch.equal(crafted.x, start.x)
    assert torch.equal(crafted.y, start.y)  # labels kept, inputs moved
    assert float(crafted.x.min()) >= 0.0 and float(crafted.x.max()) <= 1.0
    report = canary.one_run(setup).as_dict()
    assert report["analyses"]["steinke"]["epsilon_lower"] > 0.2  # non-private: memorized


def test_unclipped_layer_bug_skips_clipping_on_the_first_tensor_only():
    from opacus.optimizers import DPOptimizer

    from miaudit.recipes.gradient_canaries import plant_bug

    def optimizer(layer):
        return DPOptimizer(torch.optim.SGD(layer.parameters(), lr=0.1), noise_multiplier=0.0,
                           max_grad_norm=1.0, expected_batch_size=2)

    rows = {"weight": torch.tensor([[[3.0, 4.0]], [[0.3, 0.4]]]),
            "bias": torch.tensor([[0.0], [0.0]])}
    sums = {}
    for bug in (None, "unclipped_layer"):
        layer = torch.nn.Linear(2, 1)
        opt = optimizer(layer)
        for name, p in layer.named_parameters():
            p.grad_sample = rows[name].clone()
        if bug:
            plant_bug(opt, bug)
        opt.clip_and_accumulate()
        sums[bug] = layer.weight.summed_grad.clone()
    # clipped: row 1 (norm 5) to norm 1, row 2 (norm 0.5) kept: (0.6 + 0.3, 0.8 + 0.4)
    torch.testing.assert_close(sums[None], torch.tensor([[0.9, 1.2]]), atol=1e-5, rtol=0)
    torch.testing.assert_close(sums["unclipped_layer"], torch.tensor([[3.3, 4.4]]))
