"""Empirical defenses, adversarial training, DeMem and the memorization analysis (issue 7)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from miaudit.analysis import (
    memorization,
    memorization_analysis,
    memorization_bins,
    plot_memorization_analysis,
)
from miaudit.analysis.memorization import spearman
from miaudit.penalties.demem import loss_variance
from miaudit.recipes.adversarial import pgd_attack, robust_accuracy
from miaudit.recipes.mixup_mmd import class_matched_indices, mixup, mmd2_rbf
from miaudit.registry import OUTPUT_DEFENSES, PENALTIES, RECIPES
from miaudit.training import TrainEnv, TrainParams


def tiny_cnn(seed: int = 0, classes: int = 3) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                         nn.Flatten(), nn.Linear(16, classes))


def image_batch(n: int = 8, classes: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(n, 1, 6, 6, generator=generator),
            torch.randint(classes, (n,), generator=generator))


# -- penalties ---------------------------------------------------------------------------------
def test_l1_l2_penalties_on_hand_checked_weights():
    model = nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -2.0], [3.0, 0.0]]))
        model.bias.fill_(5.0)  # biases are not penalized
    losses = torch.zeros(3)
    assert PENALTIES.build("l1", weight=0.5)(model, losses).item() == pytest.approx(3.0)
    assert PENALTIES.build("l2", weight=0.5)(model, losses).item() == pytest.approx(7.0)


def test_demem_penalty_is_weight_times_batch_loss_variance():
    losses = torch.tensor([1.0, 2.0, 3.0, 6.0])  # mean 3, squared deviations 4 1 0 9 -> 14 / 4
    assert loss_variance(losses).item() == pytest.approx(3.5)
    demem = PENALTIES.build("demem", weight=2.0)
    assert demem(nn.Linear(1, 1), losses).item() == pytest.approx(7.0)
    with pytest.raises(ValueError, match="weight"):
        PENALTIES.build("demem", weight=-1.0)


@pytest.mark.parametrize("recipe", ["standard", "pgd_at", "trades"])
def test_demem_zero_equals_base_objective_and_positive_adds_variance(recipe):
    x, y = image_batch()
    model = tiny_cnn()
    values = {}
    for name, penalties in (("base", []), ("zero", [PENALTIES.build("demem", weight=0.0)]),
                            ("two", [PENALTIES.build("demem", weight=2.0)])):
        built = RECIPES.build(recipe, penalties=penalties)
        if hasattr(built, "generator"):
            built.generator.manual_seed(5)  # same random start for every variant
        model.zero_grad()
        values[name] = built.objective(model, x, y)
        values[name].backward()
        values[name + "_grad"] = model[0].weight.grad.clone()
    assert torch.equal(values["base"], values["zero"])
    assert torch.equal(values["base_grad"], values["zero_grad"])
    base = RECIPES.build(recipe)
    if hasattr(base, "generator"):
        base.generator.manual_seed(5)
    losses = base.sample_losses(model, x, y)
    expected = losses.mean() + 2.0 * losses.var(unbiased=False)
    assert values["two"].item() == pytest.approx(expected.item(), rel=1e-5)


# -- mixup and MMD ------------------------------------------------------------------------------
def test_mixup_mixes_inputs_and_pairs_labels():
    x = torch.tensor([[0.0, 1.0], [10.0, 20.0], [4.0, 4.0]])
    y = torch.tensor([0, 1, 2])
    mixed, y_a, y_b = mixup(x, y, 0.3, torch.tensor([1, 0, 2]))
    assert torch.allclose(mixed, torch.tensor([[7.0, 14.3], [3.0, 6.7], [4.0, 4.0]]))
    assert y_a.tolist() == [0, 1, 2] and y_b.tolist() == [1, 0, 2]
    with pytest.raises(ValueError, match="lam"):
        mixup(x, y, 1.5, torch.arange(3))


def test_mixup_recipe_loss_is_cross_entropy_against_the_mixed_target():
    x, y = image_batch(6)
    model = tiny_cnn()
    recipe = RECIPES.build("mixup_mmd", alpha=0.4)
    recipe._seed(11)
    lam = recipe.draw_lambda()
    perm = torch.randperm(6, generator=recipe._generator)
    soft = lam * F.one_hot(y, 3) + (1 - lam) * F.one_hot(y[perm], 3)
    expected = -(soft * F.log_softmax(model(lam * x + (1 - lam) * x[perm]), 1)).sum(1)
    recipe._seed(11)
    assert 0.0 < lam < 1.0
    assert torch.allclose(recipe.sample_losses(model, x, y), expected, atol=1e-6)
    plain = RECIPES.build("mixup_mmd", alpha=0.0)  # alpha = 0: no mixing
    assert torch.allclose(plain.sample_losses(model, x, y),
                          F.cross_entropy(model(x), y, reduction="none"))


def test_mmd_is_zero_for_identical_sets_and_grows_with_separation():
    a = torch.rand(20, 4, generator=torch.Generator().manual_seed(0))
    same = a.clone().requires_grad_(True)
    value = mmd2_rbf(same, a)
    value.backward()
    assert abs(value.item()) < 1e-6 and torch.isfinite(same.grad).all()
    # Closed form for single points at distance d: 2 - 2 exp(-d^2 / (2 sigma^2)).
    d = mmd2_rbf(torch.zeros(1, 2), torch.tensor([[3.0, 4.0]]), sigma=2.0).item()
    assert d == pytest.approx(2.0 - 2.0 * math.exp(-25.0 / 8.0))
    shifts = [mmd2_rbf(a, a + s, sigma=1.0).item() for s in (0.1, 0.3, 1.0, 3.0)]
    assert all(0 < u < v for u, v in zip(shifts, shifts[1:]))
    assert mmd2_rbf(a, a + 0.3).item() == pytest.approx(mmd2_rbf(a + 0.3, a).item())


def test_class_matched_validation_indices_share_labels():
    y_batch = torch.tensor([0, 0, 2, 1, 2, 2])
    y_val = torch.tensor([2, 0, 2, 0, 0, 2])  # no class 1
    kept, index = class_matched_indices(y_batch, y_val, torch.Generator().manual_seed(0))
    assert kept.tolist() == [0, 1, 2, 4, 5]
    assert torch.equal(y_val[index], y_batch[kept])


def _random_label_task(n: int = 64, n_val: int = 48, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(n + n_val, 1, 4, 4, generator=generator)
    y = torch.randint(3, (n + n_val,), generator=generator)  # pure memorization task
    return x[:n], y[:n], x[n:], y[n:]


@pytest.mark.parametrize("threshold, applied", [(0.0, True), (1.0, False)])
def test_mixup_mmd_phase_runs_only_when_gap_reaches_threshold(threshold, applied):
    x, y, x_val, y_val = _random_label_task()
    recipe = RECIPES.build("mixup_mmd", gap_threshold=threshold)
    params = TrainParams(epochs=3, batch_size=16, lr=0.05, schedule="constant")
    _, log = recipe.train(tiny_cnn(classes=3), x, y, params, TrainEnv(seed=1), x_val, y_val)
    # Never in the last epoch (as the authors' code); the first two epochs follow the gap.
    assert log["mmd_applied"] == [applied, applied, False]
    assert all(math.isfinite(v) for v in log["mmd"][:2]) == applied
    with pytest.raises(ValueError, match="validation"):
        recipe.train(tiny_cnn(classes=3), x, y, params, TrainEnv())


# -- early stopping ----------------------------------------------------------------------------
def _noisy_signal_task(n: int = 96, n_val: int = 48, seed: int = 0):
    """A bright pixel in row y marks class y; half the training labels are redrawn at random,
    so validation improves while the signal is learnt and degrades once noise is memorized."""
    generator = torch.Generator().manual_seed(seed)
    y = torch.randint(3, (n + n_val,), generator=generator)
    x = torch.rand(n + n_val, 1, 4, 4, generator=generator) * 0.5
    x[torch.arange(n + n_val), 0, y, 0] += 0.5
    y_train = y[:n].clone()
    noisy = torch.rand(n, generator=generator) < 0.5
    y_train[noisy] = torch.randint(3, (int(noisy.sum()),), generator=generator)
    return x[:n], y_train, x[n:], y[n:]


@pytest.mark.parametrize("metric", ["loss", "acc"])
def test_early_stopping_stops_and_restores_best_weights(metric):
    x, y, x_val, y_val = _noisy_signal_task()
    recipe = RECIPES.build("early_stopping", patience=3, metric=metric)
    assert recipe.needs_validation
    params = TrainParams(epochs=100, batch_size=16, lr=0.1, schedule="constant")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 3))
    model, log = recipe.train(model, x, y, params, TrainEnv(seed=2), x_val, y_val)
    values = log["val_loss"] if metric == "loss" else [-a for a in log["val_acc"]]
    best = int(np.argmin(values))  # first best epoch (ties do not count as improvement)
    assert log["best_epoch"] == [best] and best > 0
    assert len(log["epoch"]) < 100 and log["stopped_epoch"] == [best + 3]
    with torch.no_grad():
        logits = model.eval()(x_val)
    final = (F.cross_entropy(logits, y_val).item() if metric == "loss"
             else -(logits.argmax(1) == y_val).float().mean().item())
    assert final == pytest.approx(values[best], abs=1e-6)
    assert final != pytest.approx(values[-1], abs=1e-6)  # not simply the last epoch
    with pytest.raises(ValueError, match="metric"):
        RECIPES.build("early_stopping", metric="auc")
    with pytest.raises(ValueError, match="validation"):
        recipe.train(model, x, y, params, TrainEnv())


# -- MemGuard ------------------------------------------------------------------------------------
def _overfit_outputs(n: int = 240, classes: int = 5, queries: int = 2, seed: int = 0):
    """Members are more confident than non-members, as for an overfitted model."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n)
    member = rng.random(n) < 0.5
    logits = rng.normal(0.0, 1.0, (n, queries, classes)).astype(np.float32)
    logits[np.arange(n), :, labels] += (np.where(member, 7.0, 2.5) + rng.normal(0, 1, n))[:, None]
    return logits, labels, member


def test_memguard_keeps_labels_releases_probabilities_and_fools_its_classifier():
    torch.set_num_threads(1)  # many tiny steps: threads only add overhead
    logits, labels, member = _overfit_outputs()
    defense = OUTPUT_DEFENSES.build("memguard", eps=10.0, hidden=(32, 16),
                                    classifier_steps=300, max_iter=100)
    released = defense.apply(logits, labels, member)
    assert released.shape == logits.shape and released.dtype == np.float32
    assert np.array_equal(released.argmax(-1), logits.argmax(-1))
    probs = np.exp(released.astype(np.float64))
    assert np.allclose(probs.sum(-1), 1.0, atol=1e-5) and (probs > 0).all()
    stats = defense.stats
    assert stats.defender_acc_before > 0.8
    assert stats.defender_acc_after < stats.defender_acc_before - 0.3
    assert 0.0 < stats.mean_l1 <= 2.0
    # eps = 0: nothing is released noisily, the outputs are the original log-probabilities.
    unchanged = OUTPUT_DEFENSES.build("memguard", eps=0.0, hidden=(8,), classifier_steps=20,
                                      max_iter=5).apply(logits, labels, member)
    log_p = torch.log_softmax(torch.from_numpy(logits), -1).numpy()
    assert np.allclose(unchanged, log_p, atol=1e-5)
    with pytest.raises(ValueError, match="member_mask"):
        defense.apply(logits, labels, member.astype(int))


def test_label_only_memguard_releases_only_the_label():
    logits, labels, member = _overfit_outputs(n=20, classes=4)
    released = OUTPUT_DEFENSES.build("memguard_label_only").apply(logits, labels, member)
    probs = np.exp(released.astype(np.float64))
    top = logits.argmax(-1)
    assert np.array_equal(released.argmax(-1), top)
    expected = np.full(logits.shape, 0.25 - 1e-3 / 3)
    np.put_along_axis(expected, top[..., None], 0.25 + 1e-3, -1)
    assert np.allclose(probs, expected, atol=1e-6)
    assert np.allclose(probs.sum(-1), 1.0, atol=1e-6)


# -- adversarial training ----------------------------------------------------------------------
def test_pgd_increases_loss_and_stays_in_the_eps_ball_and_box():
    x, y = image_batch(16)
    model = tiny_cnn().train()
    eps = 8 / 255
    x_adv = pgd_attack(model, x, y, eps=eps, step=2 / 255, steps=10,
                       generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        clean = F.cross_entropy(model(x), y).item()
        adversarial = F.cross_entropy(model(x_adv), y).item()
    assert adversarial > clean
    assert (x_adv - x).abs().max().item() <= eps + 1e-6
    assert x_adv.min().item() >= 0.0 and x_adv.max().item() <= 1.0
    assert model.training and all(p.grad is None for p in model.parameters())
    assert torch.equal(pgd_attack(model, x, y, eps=0.0, steps=5), x)


def test_pgd_at_sample_losses_are_cross_entropy_on_the_pgd_batch():
    x, y = image_batch(8)
    model = tiny_cnn()
    recipe = RECIPES.build("pgd_at", steps=3)
    recipe.generator.manual_seed(4)
    losses = recipe.sample_losses(model, x, y)
    x_adv = pgd_attack(model, x, y, 8 / 255, 2 / 255, 3, True, torch.Generator().manual_seed(4))
    assert losses.shape == (8,)
    assert torch.allclose(losses, F.cross_entropy(model(x_adv), y, reduction="none"))
    losses.mean().backward()
    assert all(p.grad is not None for p in model.parameters())
    with pytest.raises(ValueError, match="steps"):
        RECIPES.build("pgd_at", steps=-1)


def test_trades_with_beta_zero_trains_exactly_like_cross_entropy():
    x, y, _, _ = _random_label_task(n=32, n_val=0)
    params = TrainParams(epochs=2, batch_size=8, lr=0.1)
    weights = []
    for recipe in (RECIPES.build("standard"), RECIPES.build("trades", beta=0.0, steps=2)):
        model, _ = recipe.train(tiny_cnn(3), x, y, params, TrainEnv(seed=3))
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.allclose(weights[0], weights[1], atol=1e-7, rtol=0)
    moved = RECIPES.build("trades", beta=6.0, steps=2).train(tiny_cnn(3), x, y, params,
                                                            TrainEnv(seed=3))[0]
    assert not torch.allclose(weights[0], torch.cat([p.detach().flatten()
                                                     for p in moved.parameters()]))


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")  # Opacus, inputs w/o grad
@pytest.mark.parametrize("recipe", ["pgd_at", "trades"])
def test_adversarial_sample_losses_give_exact_opacus_per_sample_gradients(recipe):
    from opacus import GradSampleModule

    x, y = image_batch(4)
    model = GradSampleModule(tiny_cnn(), loss_reduction="sum")
    built = RECIPES.build(recipe, steps=2)
    built.generator.manual_seed(9)
    built.sample_losses(model, x, y).sum().backward()
    assert model.hooks_enabled and model.training
    brute = tiny_cnn()
    brute.load_state_dict(model._module.state_dict())
    built.generator.manual_seed(9)  # the same adversarial batch, on a plain copy
    losses = built.sample_losses(brute, x, y)
    for i in range(len(y)):  # brute force: the gradient of each sample's loss alone
        grads = torch.autograd.grad(losses[i], list(brute.parameters()), retain_graph=True)
        for p, g in zip(model._module.parameters(), grads):
            assert torch.allclose(p.grad_sample[i], g, atol=1e-6)


def test_robust_accuracy_is_at_most_natural_and_equal_at_eps_zero():
    x, y = image_batch(32)
    model = tiny_cnn()
    with torch.no_grad():
        natural = (model(x).argmax(1) == y).float().mean().item()
    assert robust_accuracy(model, x, y, eps=0.0) == pytest.approx(natural)
    assert robust_accuracy(model, x, y, eps=0.3, step=0.05, steps=20) <= natural


# -- memorization ------------------------------------------------------------------------------
def test_memorization_of_a_sample_only_in_models_get_right_is_one():
    keep = np.array([[1, 1, 0], [1, 0, 1], [0, 1, 1], [0, 0, 1]], dtype=bool)
    labels = np.array([2, 1, 0])
    # sample 0: correct exactly when IN; sample 1: always correct; sample 2: correct when OUT.
    predictions = np.where(keep, [2, 1, 9], [7, 1, 0])
    mem = memorization(predictions, labels, keep)
    assert mem.tolist() == [1.0, 0.0, -1.0]
    # logits route: one-hot logits of the same predictions, queries axis of size 2
    logits = np.eye(10, dtype=np.float32)[predictions][:, :, None, :].repeat(2, axis=2)
    assert memorization(logits, labels, keep).tolist() == [1.0, 0.0, -1.0]
    # model 0 is sample 2's only OUT model: without it, mem(sample 2) is undefined
    assert np.isnan(memorization(predictions, labels, keep, exclude=0)[2])


def test_memorization_bins_and_spearman():
    mem = np.array([-0.5, 0.0, 1e-9, 1 / 21 - 1e-9, 0.5, 1.0, np.nan])
    assert memorization_bins(mem).tolist() == [0, 0, 1, 1, 11, 21, -1]
    values = np.array([3.0, 1.0, 2.0, 5.0, np.nan])
    result = spearman(values, np.array([30.0, 10.0, 20.0, 50.0, 1.0]))
    assert result["rho"] == pytest.approx(1.0) and result["n"] == 4


def test_memorization_analysis_table_and_plot(tmp_path):
    rng = np.random.default_rng(0)
    models, n, classes = 8, 300, 4
    keep = np.argsort(rng.random((models, n)), axis=0) < models // 2
    labels = rng.integers(0, classes, n)
    hard = rng.random(n) < 0.3  # hard samples: right only when trained on
    logits = rng.normal(0, 1, (models, n, 1, classes)).astype(np.float32)
    right = keep | ~hard[None, :]
    logits[np.arange(models)[:, None], np.arange(n)[None, :], 0, labels[None, :]] += np.where(
        right, 5.0, -5.0)
    target = 0
    log_p = torch.log_softmax(torch.from_numpy(logits[target, :, 0]), -1).numpy()
    scores = log_p[np.arange(n), labels]  # LOSS attack: minus the loss
    table = memorization_analysis(logits, labels, keep, scores, target)
    assert len(table["bins"]) == 22
    counts = sum(r["n_members"] + r["n_nonmembers"] for r in table["bins"])
    assert counts + table["n_undefined"] == n
    top = table["bins"][-1]  # mem = 1: exactly the hard samples
    assert top["n_members"] + top["n_nonmembers"] == int(hard.sum())
    assert top["train_acc"] == 1.0 and top["test_acc"] == 0.0
    assert table["bins"][0]["test_acc"] == 1.0  # easy samples are always right
    assert table["mean_memorization"]["train"] == pytest.approx(hard[keep[0]].mean())
    assert table["spearman_loss_mem"]["test"]["rho"] > 0.5  # non-members: high loss <-> high mem
    path = plot_memorization_analysis(table, tmp_path / "mem.png")
    assert path.stat().st_size > 1000
