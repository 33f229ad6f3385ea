"""Dataset usage inference (DUCI, miaudit.analysis.dataset_usage): a hand-worked debiased
estimate, a known-truth simulation (small error, intervals covering the truth), a null attack
(wide intervals that still cover) and ``miaudit usage``."""

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import tiny_audit
from miaudit.analysis.dataset_usage import (
    FRACTIONS,
    debiasing,
    estimate_usage,
    evaluate_usage,
    known_fraction_sets,
    youden_point,
)

MEMBERS = np.array([[1, 0, 1, 0], [1, 1, 0, 0], [0, 0, 1, 1]], dtype=bool)
SCORES = np.array([[0.8, 0.1, 0.2, 0.3], [0.9, 0.8, 0.3, 0.1], [0.2, 0.6, 0.7, 0.4]])


def test_debiased_estimate_by_hand():
    # target 0's references (models 1, 2), pooled and descending:
    # 0.9 M, 0.8 M, 0.7 M, 0.6 N, 0.4 M, 0.3 N, 0.2 N, 0.1 N; TPR - FPR is largest (0.75) first
    # at threshold 0.7: TPR 3/4, FPR 0
    assert youden_point(SCORES[1:], MEMBERS[1:]) == (0.7, 0.75, 0.0)
    rates = debiasing(SCORES, MEMBERS)
    assert (rates.thresholds[0], rates.tpr[0], rates.fpr[0]) == (0.7, 0.75, 0.0)
    # target 0 flags only record 0 (0.8 >= 0.7): on candidates {0, 2} the guess rate is 1/2,
    # debiased (1/2 - 0) / (3/4 - 0) = 2/3; on all four 1/4 -> 1/3
    pair = estimate_usage(SCORES, MEMBERS, np.array([0, 2]), rounds=50)
    assert pair["per_target"][0] == pytest.approx(2 / 3)
    assert pair["true_fraction"][0] == 1.0
    every = estimate_usage(SCORES, MEMBERS, np.arange(4), rounds=50)
    assert every["per_target"][0] == pytest.approx(1 / 3)
    finite = [v for v in every["per_target"] if v is not None]
    assert every["estimate"] == pytest.approx(np.mean(finite)) or np.isnan(every["estimate"])


def test_shared_sort_debiasing_matches_each_targets_own_roc():
    rng = np.random.default_rng(3)
    members = rng.random((5, 300)) < 0.5
    scores = np.round(rng.normal(size=(5, 300)) + members, 1)  # many ties, across models too
    rates = debiasing(scores, members)
    for t in range(5):
        brute = youden_point(np.delete(scores, t, 0), np.delete(members, t, 0))
        assert (rates.thresholds[t], rates.tpr[t], rates.fpr[t]) == pytest.approx(brute)


def test_unit_weights_reproduce_the_point_estimate(monkeypatch):
    from miaudit.analysis import dataset_usage
    from miaudit.stats.intervals import Resamples

    def unit(targets, samples, rounds, seed):  # every record once, every target once
        return Resamples(np.ones((rounds, targets), np.int32), np.ones((rounds, samples),
                                                                         np.int32))

    monkeypatch.setattr(dataset_usage, "_draw", unit)
    scores, members = _world(separation=1.0, targets=6, records=400)
    rates = debiasing(scores, members)
    boot = dataset_usage._Bootstrap(scores, members, rates, rounds=2, seed=0)
    np.testing.assert_allclose(boot.tpr[0], rates.tpr)
    np.testing.assert_allclose(boot.fpr[0], rates.fpr)
    found = estimate_usage(scores, members, np.arange(0, 400, 3), rates=rates, bootstrap=boot)
    assert found["interval"] == pytest.approx([found["estimate"]] * 2)


def test_resampling_counts_are_uniform_multinomial_draws():
    from miaudit.analysis.dataset_usage import _draw

    drawn = _draw(5, 40, rounds=4000, seed=1)
    assert drawn.targets.shape == (4000, 5) and drawn.samples.shape == (4000, 40)
    assert (drawn.targets.sum(1) == 5).all() and (drawn.samples.sum(1) == 40).all()
    # multinomial(n, 1/n): mean 1, variance 1 - 1/n per count
    assert drawn.samples.mean() == pytest.approx(1.0)
    assert drawn.samples.var() == pytest.approx(1 - 1 / 40, abs=0.03)
    assert drawn.targets.var() == pytest.approx(1 - 1 / 5, abs=0.03)


def test_known_fraction_sets_have_the_fraction():
    rng = np.random.default_rng(0)
    members = rng.random((4, 200)) < 0.5
    for fraction in FRACTIONS:
        for row, chosen in zip(members, known_fraction_sets(members, fraction, rng), strict=True):
            size = min(row.sum(), (~row).sum())
            assert len(chosen) == size == len(np.unique(chosen))
            assert row[chosen].sum() == round(fraction * size)


def _world(separation, targets=12, records=1500, seed=0):
    rng = np.random.default_rng(seed)
    members = np.zeros((targets, records), dtype=bool)
    for row in members:  # rotation: each model trains on exactly half
        row[rng.permutation(records)[: records // 2]] = True
    hardness = rng.normal(size=records)  # shared across models, as real scores are
    scores = hardness + rng.normal(size=(targets, records)) + separation * members
    return scores, members


def test_known_truth_small_error_and_coverage():
    scores, members = _world(separation=1.5)
    found = evaluate_usage(scores, members, rounds=300)
    assert found["mean_absolute_error"] < 0.06
    assert found["coverage"] >= 5 / 6
    for check in found["fractions"]:
        assert abs(check["bias"]) < 0.05, check


def test_null_attack_gives_wide_intervals_that_cover():
    scores, members = _world(separation=0.0)
    found = evaluate_usage(scores, members, fractions=(0.0, 0.5, 1.0), rounds=300)
    assert found["coverage"] == 1.0
    widths = [c["interval"][1] - c["interval"][0] for c in found["fractions"]]
    assert min(widths) > 0.3  # an attack that sees nothing cannot say how much was used


def test_usage_command(tmp_path):
    from miaudit import audit
    from miaudit.cli import app

    results = audit(tiny_audit(tmp_path, num_models=6), show_progress=False)
    assert (results.run_dir / "usage.json").exists()
    audited = np.load(results.run_dir / "split.npz")["audited"]
    np.save(tmp_path / "candidates.npy", audited[:40])
    runner = CliRunner()
    evaluated = runner.invoke(app, ["usage", str(results.run_dir)])
    assert evaluated.exit_code == 0, evaluated.output
    assert "known fractions" in evaluated.output
    estimated = runner.invoke(app, ["usage", str(results.run_dir), "--attack", "loss",
                                    "--candidates", str(tmp_path / "candidates.npy")])
    assert estimated.exit_code == 0, estimated.output
    assert "DUCI with loss on 40 candidate records" in estimated.output
    np.save(tmp_path / "outside.npy", np.array([10 ** 6]))
    for bad in (["--attack", "nope"], ["--candidates", str(tmp_path / "outside.npy")],
                ["--candidates", str(tmp_path / "absent.npy")]):
        refused = runner.invoke(app, ["usage", str(results.run_dir), *bad])
        assert refused.exit_code == 2, (bad, refused.output)
