"""Differential privacy: accountants, the NSDE bound, DP bounds on MI, DP-SGD, the CLI."""

from __future__ import annotations

import copy
import json
import math
import warnings

import numpy as np
import pytest
import torch
from opacus.accountants import create_accountant
from opacus.grad_sample import GradSampleModule
from scipy.special import ndtr
from scipy.stats import binomtest
from torch import nn
from typer.testing import CliRunner

from miaudit.cli.privacy import app as privacy_app
from miaudit.models import build_model
from miaudit.privacy import accounting, bounds, nsde, nsde_gdp
from miaudit.recipes.dpsgd import DPSGD, DPIncompatibleModelError, dp_incompatibilities
from miaudit.registry import ACCOUNTANTS, RECIPES
from miaudit.stats import metrics
from miaudit.training import TrainEnv, TrainParams

PUBLISHED_Q = 256 / 25000  # sigma 1.0, 100 epochs, delta 1e-5 (FACTS.md, Opacus 1.6.0)
PINNED = {"rdp": 6.8076, "gdp": 6.0917, "prv": 6.2862}


@pytest.fixture(autouse=True)
def _quiet() -> None:
    warnings.filterwarnings("ignore", message="Secure RNG turned off")
    warnings.filterwarnings("ignore", message="GDP accounting is experimental")
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="opacus")


# -- accounting ---------------------------------------------------------------------------------
def test_accountants_are_registered():
    assert {"rdp", "gdp", "prv"} <= set(ACCOUNTANTS.names())
    assert "dpsgd" in RECIPES.names()


@pytest.mark.parametrize("name", ["rdp", "gdp", "prv"])
def test_published_setting_is_pinned_and_equals_opacus(name):
    ours = accounting.epsilon(1.0, PUBLISHED_Q, 1e-5, epochs=100, accountant=name)
    direct = create_accountant(mechanism=name)
    direct.history = [(1.0, PUBLISHED_Q, int(100 / PUBLISHED_Q))]
    assert ours == direct.get_epsilon(delta=1e-5)
    assert ours == pytest.approx(PINNED[name], abs=5e-4)


@pytest.mark.parametrize("name", ["rdp", "gdp", "prv"])
def test_epsilon_falls_with_noise_and_grows_with_steps(name):
    by_noise = [accounting.epsilon(z, 0.01, 1e-5, steps=300, accountant=name)
                for z in (0.7, 1.0, 1.5, 2.5)]
    assert all(a > b for a, b in zip(by_noise, by_noise[1:], strict=False))
    by_steps = [accounting.epsilon(1.0, 0.01, 1e-5, steps=s, accountant=name)
                for s in (30, 300, 3000)]
    assert all(a < b for a, b in zip(by_steps, by_steps[1:], strict=False))
    assert accounting.epsilon(1.0, 0.01, 1e-5, steps=0, accountant=name) == 0.0


@pytest.mark.parametrize("name", ["rdp", "gdp"])
def test_noise_multiplier_inverts_epsilon(name):
    q = 128 / 25000
    z = accounting.noise_multiplier(8.0, 1e-5, q, epochs=50, accountant=name)
    reached = accounting.epsilon(z, q, 1e-5, epochs=50, accountant=name)
    assert 8.0 - 0.01 <= reached <= 8.0
    assert accounting.epsilon(0.98 * z, q, 1e-5, epochs=50, accountant=name) > 8.0


def test_step_convention_and_errors():
    assert accounting.resolve_steps(1 / 98, epochs=100) == 9800  # Opacus's loader: exact
    assert accounting.resolve_steps(PUBLISHED_Q, epochs=100) == int(100 / PUBLISHED_Q) == 9765
    with pytest.raises(ValueError, match="exactly one"):
        accounting.resolve_steps(0.1, epochs=1, steps=10)
    with pytest.raises(ValueError, match="sample_rate"):
        accounting.epsilon(1.0, 0.0, 1e-5, steps=10)
    with pytest.raises(ValueError, match="accountant"):
        accounting.epsilon(1.0, 0.1, 1e-5, steps=10, accountant="moments")
    with pytest.raises(ValueError, match="delta"):
        accounting.epsilon(1.0, 0.1, 0.0, steps=10)


def test_gaussian_closed_form_equals_prv_without_subsampling():
    # K Gaussian mechanisms with noise multiplier z are exactly sqrt(K)/z-GDP; PRV with q = 1
    # composes the same privacy-loss distribution numerically (upper end of +-0.01).
    for z, steps in ((0.5, 4), (2.0, 10), (5.0, 100)):
        mu = math.sqrt(steps) / z
        closed = accounting.gaussian_epsilon(mu, 1e-5)
        prv = accounting.epsilon(z, 1.0, 1e-5, steps=steps, accountant="prv")
        assert closed - 0.005 <= prv <= closed + 0.025
        assert accounting.gaussian_delta(closed, mu) == pytest.approx(1e-5, rel=1e-6)
        assert accounting.gaussian_mu(closed, 1e-5) == pytest.approx(mu, rel=1e-6)


def test_epsilon_table_and_plot(tmp_path):
    table = accounting.epsilon_table(1.0, 0.01, [1, 5, 20], [1e-5, 1e-3], "rdp")
    for d, delta in enumerate(table.deltas):
        for e, epochs in enumerate(table.epochs):
            assert table.epsilon[d, e] == accounting.epsilon(1.0, 0.01, delta, epochs=epochs,
                                                             accountant="rdp")
    assert np.all(np.diff(table.epsilon, axis=1) > 0)  # grows with epochs
    assert np.all(table.epsilon[0] > table.epsilon[1])  # smaller delta, larger epsilon
    path = accounting.plot_epsilon_tables([table], tmp_path / "fig4.png")
    assert path.stat().st_size > 1000


# -- NSDE bound ---------------------------------------------------------------------------------
def test_nsde_mu_does_not_depend_on_solver_steps():
    closed = 2.0 * 3.0 * 0.5 / 1.5  # T L D / sigma
    for steps in (1, 7, 64):
        assert nsde_gdp.composed_mu(1.5, 2.0, 3.0, 0.5, steps=steps) == pytest.approx(closed)
        assert nsde_gdp.composed_mu(1.5, 2.0, 3.0, 0.5, steps=steps, iterations=9) == pytest.approx(
            3 * closed)


def test_nsde_bound_inverts_and_is_monotone():
    base = dict(T=1.0, lipschitz=2.0, distance=1.0, iterations=4)
    bound = nsde_gdp.gdp_sigma_bound(2.0, 1e-5, **base)
    assert nsde_gdp.gdp_epsilon(bound.sigma, 1e-5, **base) == pytest.approx(2.0, rel=1e-6)
    assert bound.sigma == pytest.approx(math.sqrt(4) * 2.0 / accounting.gaussian_mu(2.0, 1e-5))
    for key, larger in (("T", 2.0), ("lipschitz", 3.0), ("distance", 2.0), ("iterations", 9)):
        assert nsde_gdp.gdp_sigma_bound(2.0, 1e-5, **{**base, key: larger}).sigma > bound.sigma
    assert nsde_gdp.gdp_sigma_bound(4.0, 1e-5, **base).sigma < bound.sigma
    assert nsde_gdp.gdp_sigma_bound(2.0, 1e-3, **base).sigma < bound.sigma


def test_nsde_gaussian_bound_equals_opacus_prv_and_classic_is_looser():
    # K compositions at noise multiplier sigma / (T L D), no subsampling: PRV with q = 1.
    sigma, T, L, D, K = 3.0, 1.0, 1.5, 1.0, 5
    ours = nsde_gdp.gdp_epsilon(sigma, 1e-5, T=T, lipschitz=L, distance=D, iterations=K)
    prv = accounting.epsilon(sigma / (T * L * D), 1.0, 1e-5, steps=K, accountant="prv")
    assert ours - 0.005 <= prv <= ours + 0.025
    for eps, k in ((0.5, 1), (2.0, 4), (0.9, 1)):
        gauss = nsde_gdp.gdp_sigma_bound(eps, 1e-5, T=T, lipschitz=L, distance=D, iterations=k)
        classic = nsde_gdp.gdp_sigma_bound(eps, 1e-5, T=T, lipschitz=L, distance=D, iterations=k,
                                   composition="classic")
        assert classic.sigma > gauss.sigma
    with pytest.raises(ValueError, match="classic"):
        nsde_gdp.gdp_sigma_bound(8.0, 1e-5, T=T, lipschitz=L, distance=D, composition="classic")


def test_nsde_training_epsilon_is_dpsgd_accounting():
    assert nsde.training_epsilon(1.0, 256, 25000, 100, 1e-5, "rdp") == pytest.approx(
        PINNED["rdp"], abs=5e-4)
    assert nsde.training_epsilon(1.0, 256, 25000, 10, 1e-5, "rdp", sensitivity=2.0) == \
        accounting.epsilon(0.5, PUBLISHED_Q, 1e-5, epochs=10, accountant="rdp")


def test_nsde_bound_for_a_spectrally_normalized_sdenet():
    model = build_model("sdenet", input_shape=(3, 8, 8), num_classes=3, width=0.25, steps=4,
                        spectral_norm=True)
    result = nsde_gdp.gdp_model_privacy(model, 8.0, 1e-5, distance=0.5)
    # Three SDE blocks in sequence: post-processing (paper A, Sec. 5.3), one composition.
    assert result.bound.iterations == 1
    assert result.sigma_model == pytest.approx(0.5)  # default convention: k sqrt(T)
    expected = nsde_gdp.gdp_epsilon(result.sigma_model, 1e-5, T=1.0,
                                lipschitz=result.bound.lipschitz, distance=0.5, iterations=1)
    assert result.epsilon_model == pytest.approx(expected)
    assert result.satisfied == (result.sigma_model >= result.bound.sigma)
    unbounded = build_model("sdenet", input_shape=(3, 8, 8), num_classes=3, width=0.25, steps=2)
    with pytest.raises(ValueError, match="Lipschitz"):
        nsde_gdp.gdp_model_privacy(unbounded, 8.0, 1e-5, distance=0.5)


# -- paper A: Theorem 4.1, Remark 1, Corollary 4.2, Sec. 5.3 ----------------------------------
C_1E5 = math.sqrt(2 * math.log(1.25e5))  # sqrt(2 ln(1.25 / delta)) at delta = 1e-5: 4.8448


def test_theorem41_pinned_values_in_both_forms():
    """Paper A, Theorem 4.1 at eps 0.5, delta 1e-5, T = L = 1: the proof's Gaussian mechanism
    gives sigma = c T L / eps = 9.690; the printed statement c (T L / eps)^2 = 19.379."""
    base = dict(T=1.0, lipschitz=1.0)
    assert nsde.DEFAULT_FORM == "proof"
    assert nsde.theorem41_sigma(0.5, 1e-5, **base) == pytest.approx(9.690, abs=5e-4)
    assert nsde.theorem41_sigma(0.5, 1e-5, form="printed", **base) == pytest.approx(19.379,
                                                                                     abs=5e-4)
    assert nsde.theorem41_sigma(0.5, 1e-5, **base) == pytest.approx(C_1E5 / 0.5)
    # T L enters linearly (proof) or squared (printed).
    assert nsde.theorem41_sigma(0.5, 1e-5, T=2.0, lipschitz=1.5) == pytest.approx(
        3 * C_1E5 / 0.5)
    assert nsde.theorem41_sigma(0.5, 1e-5, T=2.0, lipschitz=1.5, form="printed") == \
        pytest.approx(C_1E5 * 36)


def test_theorem41_inverse_and_validity_range():
    """sigma = 2, T = L = 1 (the study's default SDENet) implies eps = sqrt(2 ln 1.25e5) / 2 =
    2.42 > 1: outside Theorem 4.1's range 0 < eps < 1."""
    eps = nsde.theorem41_epsilon(2.0, 1e-5, T=1.0, lipschitz=1.0)
    assert eps == pytest.approx(2.4224, abs=5e-5) and not nsde.in_theorem_range(eps)
    printed = nsde.theorem41_epsilon(2.0, 1e-5, T=1.0, lipschitz=1.0, form="printed")
    assert printed == pytest.approx(math.sqrt(C_1E5 / 2.0))
    for form in nsde.FORMS:
        for target in (0.1, 0.5, 0.99):
            sigma = nsde.theorem41_sigma(target, 1e-5, T=0.7, lipschitz=1.3, form=form)
            assert nsde.theorem41_epsilon(sigma, 1e-5, T=0.7, lipschitz=1.3,
                                          form=form) == pytest.approx(target)
    for bad in (1.0, 2.0, 0.0):
        with pytest.raises(ValueError, match="epsilon"):
            nsde.theorem41_sigma(bad, 1e-5, T=1.0, lipschitz=1.0)
    with pytest.raises(ValueError, match="form"):
        nsde.theorem41_sigma(0.5, 1e-5, T=1.0, lipschitz=1.0, form="squared")


def test_remark1_adds_the_quadrature_lipschitz_constant():
    # Remark 1: Euler-Maruyama replaces T L_f by T L_f + L_eps.
    plain = nsde.theorem41_sigma(0.5, 1e-5, T=1.0, lipschitz=2.0)
    em = nsde.theorem41_sigma(0.5, 1e-5, T=1.0, lipschitz=2.0, l_eps=1.0)
    assert em == pytest.approx(plain * 3 / 2)
    assert nsde.theorem_sensitivity(0.5, 2.0, 0.25) == pytest.approx(1.25)


def test_corollary42_strong_composition():
    """Corollary 4.2: sigma = 4 sqrt(K ln(1.25/delta) ln(1/delta')) T L / eps' for
    (eps', K delta + delta')-DP; it is Theorem 4.1's proof form at the per-iteration eps of
    strong composition, eps' / (2 sqrt(2 K ln(1/delta'))) (Dwork & Roth, Cor. 3.21)."""
    K, eps_p, d, d_p = 10, 0.5, 1e-5, 1e-6
    sigma = nsde.corollary42_sigma(eps_p, d, d_p, K, T=1.0, lipschitz=1.0)
    hand = 4 * math.sqrt(10 * math.log(1.25e5) * math.log(1e6)) / 0.5
    assert sigma == pytest.approx(hand)
    per_iteration = eps_p / (2 * math.sqrt(2 * K * math.log(1 / d_p)))
    assert sigma == pytest.approx(nsde.theorem41_sigma(per_iteration, d, T=1.0, lipschitz=1.0))
    assert nsde.corollary42_sigma(eps_p, d, d_p, 4 * K, T=1.0, lipschitz=1.0) == \
        pytest.approx(2 * sigma)  # sqrt(K)
    assert nsde.corollary42_epsilon(sigma, d, d_p, K, T=1.0, lipschitz=1.0) == \
        pytest.approx(eps_p)
    with pytest.raises(ValueError, match="epsilon_prime"):
        nsde.corollary42_sigma(1.5, d, d_p, K, T=1.0, lipschitz=1.0)


def test_nsde_guarantee_record_is_json_and_flags_the_range():
    out = nsde.nsde_guarantee(2.0, 1.0, 1.0, 1e-5, epsilon=0.5, iterations=10,
                              delta_prime=1e-6)
    json.dumps(out)
    assert out["form"] == "proof" and out["sigma"] == 2.0
    assert out["epsilon_implied"] == pytest.approx(2.4224, abs=5e-5)
    assert out["in_range"] is False
    assert out["sigma_required"] == pytest.approx(9.690, abs=5e-4)
    assert out["sigma_satisfied"] is False
    assert out["corollary_delta"] == pytest.approx(10 * 1e-5 + 1e-6)
    assert out["corollary_epsilon"] == pytest.approx(
        nsde.corollary42_epsilon(2.0, 1e-5, 1e-6, 10, T=1.0, lipschitz=1.0))
    ok = nsde.nsde_guarantee(20.0, 1.0, 1.0, 1e-5, form="printed", epsilon=0.5)
    assert ok["in_range"] and ok["sigma_satisfied"]
    assert ok["sigma_required"] == pytest.approx(19.379, abs=5e-4)
    above = nsde.nsde_guarantee(20.0, 1.0, 1.0, 1e-5, epsilon=3.0)
    assert above["sigma_required"] is None and above["sigma_satisfied"] is None


def test_sde_blocks_in_sequence_cost_nothing_extra():
    """Paper A, Sec. 5.3: several SDE blocks keep the same epsilon (post-processing)."""
    one = build_model("sdenet", input_shape=(3, 8, 8), num_classes=3, width=0.25, steps=2)
    nine = build_model("sdenet", input_shape=(3, 8, 8), num_classes=3, width=0.25, steps=2,
                       blocks=3)
    a = nsde.model_guarantee(one, 1e-5, lipschitz=1.0)
    b = nsde.model_guarantee(nine, 1e-5, lipschitz=1.0)
    assert (a["n_sde_blocks"], b["n_sde_blocks"]) == (3, 9)
    assert a["epsilon_implied"] == b["epsilon_implied"]
    # default (Oganesyan) convention: Theorem 4.1's sigma = k sqrt(T) = 0.5
    assert a["sigma"] == pytest.approx(0.5) and a["lipschitz_source"] == "given"
    assert a["sde_convention"] == "oganesyan"
    paper = build_model("sdenet", input_shape=(3, 8, 8), num_classes=3, width=0.25, steps=2,
                        convention="paper")  # Theorem 4.1's sigma = k sqrt(s/T)
    assert nsde.model_guarantee(paper, 1e-5, lipschitz=1.0)["sigma"] == pytest.approx(
        0.5 * math.sqrt(2))
    with pytest.raises(ValueError, match="Lipschitz"):
        nsde.model_guarantee(one, 1e-5)


def test_cli_nsde_theorem_forms():
    from typer.testing import CliRunner

    from miaudit.cli.privacy import app as privacy_app

    runner = CliRunner()
    result = runner.invoke(privacy_app, ["nsde", "--epsilon", "0.5"])
    assert result.exit_code == 0 and "9.6896" in result.output and "proof" in result.output
    result = runner.invoke(privacy_app, ["nsde", "--epsilon", "0.5", "--form", "printed"])
    assert result.exit_code == 0 and "19.3792" in result.output
    result = runner.invoke(privacy_app, ["nsde", "--sigma", "2"])
    assert result.exit_code == 0 and "2.4224" in result.output and "outside" in result.output
    result = runner.invoke(privacy_app, ["nsde", "--epsilon", "2"])
    assert result.exit_code != 0 and "range" in result.output


# -- DP bounds on membership inference ----------------------------------------------------------
def test_roc_bound_is_monotone_through_delta_and_one():
    fpr = np.linspace(0, 1, 2001)
    for eps, delta in ((0.5, 1e-5), (2.0, 0.01), (8.0, 1e-5)):
        tpr = bounds.roc_bound(fpr, eps, delta)
        assert tpr[0] == pytest.approx(delta) and tpr[-1] == 1.0
        assert np.all(np.diff(tpr) >= -1e-15) and np.all(tpr >= fpr - 1e-15)
    assert np.allclose(bounds.roc_bound(fpr, 0.0, 0.0), fpr)  # 0-DP: no attack beats chance


@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
def test_gaussian_roc_touches_the_matching_dp_bound(mu, eps):
    # mu-GDP is (eps, delta(eps))-DP with delta from Balle & Wang; the line e^eps x + delta is
    # tangent to the Gaussian ROC at x* = Phi(-eps/mu - mu/2), so the ROC lies below the bound
    # and meets it there; with a smaller delta it would cross it.
    delta = accounting.gaussian_delta(eps, mu)
    grid = np.concatenate([np.logspace(-12, 0, 3000), np.linspace(0, 1, 3001)])
    assert np.all(bounds.gaussian_roc(grid, mu) <= bounds.roc_bound(grid, eps, delta) + 1e-12)
    touch = ndtr(-eps / mu - mu / 2)
    assert bounds.gaussian_roc(touch, mu) == pytest.approx(
        float(bounds.roc_bound(touch, eps, delta)), rel=1e-9, abs=1e-14)
    assert bounds.gaussian_roc(touch, mu) > bounds.roc_bound(touch, eps, 0.5 * delta)


def test_randomized_response_attains_the_pure_dp_bound():
    for eps in (0.3, 1.0, 4.0):
        p = math.exp(eps) / (1 + math.exp(eps))  # eps-DP randomized response
        assert float(bounds.roc_bound(1 - p, eps, 0.0)) == pytest.approx(p, rel=1e-12)


def test_clopper_pearson_matches_scipy_exact_interval():
    for k, n in ((0, 10), (3, 10), (50, 200), (199, 200)):
        ours = metrics.clopper_pearson_upper(np.array([k]), n, 0.05)[0]
        two_sided = binomtest(k, n).proportion_ci(confidence_level=0.90, method="exact")
        assert ours == pytest.approx(two_sided.high, rel=1e-9)
    assert metrics.clopper_pearson_upper(np.array([10]), 10, 0.05)[0] == 1.0


def test_empirical_epsilon_of_a_separable_attack_is_large_and_exact():
    labels = np.repeat([1, 0], 1000)
    scores = labels.astype(float)
    audit = bounds.empirical_epsilon(scores, labels, 1e-5, claimed_epsilon=1.0,
                                     thresholds=[0.5])
    upper = 1 - 0.025 ** (1 / 1000)  # Clopper-Pearson at 0 of 1000, alpha / 2 (Bonferroni)
    assert audit.epsilon_lower == pytest.approx(math.log((1 - 1e-5 - upper) / upper))
    assert audit.epsilon_lower > 4 and audit.verdict == "contradicted"
    assert audit.fpr == 0 and audit.fnr == 0
    gridded = bounds.empirical_epsilon(scores, labels, 1e-5)  # 100 thresholds, Bonferroni
    assert 3.5 < gridded.epsilon_lower < audit.epsilon_lower


def test_empirical_epsilon_of_a_null_attack_is_near_zero():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 4000)
    audit = bounds.empirical_epsilon(rng.normal(size=4000), labels, 1e-5, claimed_epsilon=1.0)
    assert audit.epsilon_lower < 0.2 and audit.verdict == "consistent"


def test_empirical_epsilon_of_a_dp_mechanism_is_valid_and_tight():
    # The optimal attack on eps-DP randomized response: lower bound below eps, but close.
    rng = np.random.default_rng(1)
    eps, n = 1.0, 20000
    p = math.exp(eps) / (1 + math.exp(eps))
    labels = np.repeat([1, 0], n)
    says_member = np.where(labels == 1, rng.random(2 * n) < p, rng.random(2 * n) >= p)
    audit = bounds.empirical_epsilon(says_member.astype(float), labels, 0.0,
                                     claimed_epsilon=eps)
    assert 0.85 < audit.epsilon_lower <= eps and audit.verdict == "consistent"


def test_plot_roc_bounds(tmp_path):
    fpr = np.logspace(-4, 0, 50)
    path = bounds.plot_roc_bounds({"gaussian mu=1": (fpr, bounds.gaussian_roc(fpr, 1.0))},
                                  [1.0, 8.0], 1e-5, tmp_path / "fig5.png")
    assert path.stat().st_size > 1000


# -- DP-SGD -------------------------------------------------------------------------------------
def _data(n: int = 40, features: int = 6, classes: int = 3, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    y = torch.randint(classes, (n,), generator=generator)
    x = torch.randn(n, features, generator=generator) * 0.3 + nn.functional.one_hot(
        y, features).float()
    return x, y


def _mlp(features: int = 6, classes: int = 3) -> nn.Module:
    return build_model("mlp", input_shape=(features,), num_classes=classes, hidden=(8,))


def test_dpsgd_records_the_accountants_epsilon_every_epoch():
    x, y = _data()
    recipe = RECIPES.build("dpsgd", penalties=[], noise_multiplier=1.0, accountant="rdp")
    model, log = recipe.train(_mlp(), x, y, TrainParams(epochs=2, batch_size=2, lr=0.1),
                              TrainEnv(seed=0))
    # q = 1/20; empty Poisson batches (P ~ 0.13 each) must still count as noise-only steps.
    assert recipe.engine.accountant.history == [(1.0, 0.05, 40)]
    assert log["epsilon"] == [accounting.epsilon(1.0, 0.05, 1e-5, steps=s, accountant="rdp")
                              for s in (20, 40)]
    assert not isinstance(model, GradSampleModule)
    _mlp().load_state_dict(model.state_dict())  # saved weights load into the architecture


def test_dpsgd_target_epsilon_is_met():
    # 93 batches: Opacus's Poisson sampler takes int(1 / (1 / 93)) = 92 steps per epoch; the
    # noise must be solved for the steps actually taken.
    x, y = _data(n=93)
    recipe = DPSGD(target_epsilon=4.0, accountant="gdp")
    _, log = recipe.train(_mlp(), x, y, TrainParams(epochs=2, batch_size=1, lr=0.1),
                          TrainEnv(seed=1))
    assert recipe.engine.accountant.history[-1][-1] == 2 * 92
    assert 4.0 - 0.01 <= log["epsilon"][-1] <= 4.0


def test_dpsgd_refuses_models_without_per_sample_gradients():
    ode = build_model("odenet", input_shape=(1, 8, 8), num_classes=3, width=0.25,
                      solver="dopri5", norm="group")
    recipe = DPSGD(noise_multiplier=1.0)
    x, y = torch.rand(8, 1, 8, 8), torch.randint(3, (8,))
    with pytest.raises(DPIncompatibleModelError, match="dopri5"):
        recipe.train(ode, x, y, TrainParams(epochs=1, batch_size=4), TrainEnv())
    # BatchNorm with per-evaluation statistics is not torch's: not replaced, so refused
    sonode = build_model("sonode", input_shape=(1, 8, 8), num_classes=3, width=0.25, steps=2,
                         bn_stats="per_evaluation")
    with pytest.raises(DPIncompatibleModelError, match="per solver evaluation"):
        recipe.architecture(sonode)

    class Adjoint(nn.Module):  # no declared reason: found by the attribute heuristic
        def __init__(self):
            super().__init__()
            self.adjoint = True
            self.linear = nn.Linear(6, 3)

        def forward(self, x):
            return self.linear(x)

    assert dp_incompatibilities(Adjoint())
    with pytest.raises(ValueError, match="adjoint"):
        recipe.architecture(Adjoint())
    assert dp_incompatibilities(_mlp()) == []


def test_dpsgd_replaces_batchnorm_with_groupnorm_and_trains():
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
    recipe = DPSGD(noise_multiplier=0.5, accountant="rdp")
    with pytest.warns(UserWarning, match="GroupNorm"):
        fixed = recipe.architecture(model)
    kinds = {type(m) for m in fixed.modules()}
    assert nn.GroupNorm in kinds and nn.BatchNorm2d not in kinds
    x, y = torch.rand(16, 1, 8, 8), torch.randint(3, (16,))
    trained, log = recipe.train(fixed, x, y, TrainParams(epochs=1, batch_size=4), TrainEnv())
    assert len(log["epsilon"]) == 1 and math.isfinite(log["epsilon"][0])


def test_dpsgd_option_errors():
    with pytest.raises(ValueError, match="exactly one"):
        DPSGD(target_epsilon=8.0, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="exactly one"):
        DPSGD()
    with pytest.raises(ValueError, match="penalties"):
        RECIPES.build("dpsgd", penalties=[object()], noise_multiplier=1.0)
    with pytest.raises(ValueError, match="trust_base"):
        DPSGD(noise_multiplier=1.0, base="mixup_mmd")
    with pytest.raises(ValueError, match="accountant"):
        DPSGD(noise_multiplier=1.0, accountant="moments")
    with pytest.raises(ValueError, match="max_grad_norm"):
        DPSGD(noise_multiplier=1.0, max_grad_norm=0)


def test_dpsgd_over_pgd_at_gives_exact_per_sample_gradients():
    from miaudit.recipes.adversarial import pgd_attack

    torch.manual_seed(0)
    model = _mlp()
    reference = copy.deepcopy(model)  # same weights, no Opacus hooks
    x, y = _data(n=6)
    recipe = DPSGD(noise_multiplier=1.0, base="pgd_at:steps=2,eps=0.1,step=0.05")
    wrapped = GradSampleModule(model)
    recipe.base.generator.manual_seed(0)
    recipe.objective(wrapped, x, y).backward()  # the attack's passes must not be recorded
    recipe.base.generator.manual_seed(0)
    x_adv = pgd_attack(reference, x, y, 0.1, 0.05, 2, True, recipe.base.generator)
    for i in range(len(y)):  # brute force: one backward per sample
        loss = nn.functional.cross_entropy(reference(x_adv[i : i + 1]), y[i : i + 1])
        grads = torch.autograd.grad(loss, list(reference.parameters()))
        for p, g in zip(model.parameters(), grads, strict=True):
            assert torch.allclose(p.grad_sample[i], g, atol=1e-6)
    trained, log = DPSGD(noise_multiplier=1.0, accountant="rdp",
                         base="pgd_at:steps=2,eps=0.1,step=0.05").train(
        _mlp(), *_data(), TrainParams(epochs=1, batch_size=8), TrainEnv())
    assert len(log["epsilon"]) == 1


# -- CLI ----------------------------------------------------------------------------------------
def test_cli_smoke(tmp_path):
    runner = CliRunner()
    result = runner.invoke(privacy_app, ["epsilon", "-z", "1", "-b", "256", "-n", "25000",
                                         "-e", "100", "-a", "rdp", "-a", "gdp"])
    assert result.exit_code == 0, result.output
    assert "6.8076" in result.output and "6.0917" in result.output
    result = runner.invoke(privacy_app, ["noise", "--epsilon", "8", "-q", "0.00512", "-e", "50",
                                         "-a", "gdp"])
    assert result.exit_code == 0 and "0.63" in result.output
    result = runner.invoke(privacy_app, ["table", "-z", "1", "-q", "0.01", "-e", "1", "-e", "5",
                                         "-a", "rdp", "-d", "1e-5"])
    assert result.exit_code == 0 and "delta 1e-05" in result.output
    out = tmp_path / "eps.png"
    result = runner.invoke(privacy_app, ["plot", "-z", "1", "-q", "0.01", "--max-epochs", "5",
                                         "--points", "3", "-a", "gdp", "-o", str(out)])
    assert result.exit_code == 0 and out.stat().st_size > 1000
    result = runner.invoke(privacy_app, ["nsde", "--bound", "gdp", "--epsilon", "2", "-L", "2",
                                         "-K", "4"])
    sigma = nsde_gdp.gdp_sigma_bound(2.0, 1e-5, T=1.0, lipschitz=2.0, distance=1.0,
                                 iterations=4).sigma
    assert result.exit_code == 0 and f"{sigma:.4f}" in result.output
    result = runner.invoke(privacy_app, ["epsilon", "-z", "1", "-e", "1"])  # no sample rate
    assert result.exit_code != 0
