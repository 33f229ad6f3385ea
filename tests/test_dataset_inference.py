"""Dataset inference (Maini et al. 2024): calibrated under the null (p-values of non-member
collections are uniform), powerful when members are present, and the command end to end."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import kstest, ttest_ind

from miaudit.analysis.dataset_inference import (
    dataset_inference,
    permutation_greater,
    texts_needed,
    welch_greater,
)


def features(rng, count, shift=0.0, dims=4):
    """Per-text attack scores: correlated noise, members shifted on the first two."""
    mixing = np.array([[1.0, 0.5, 0.0, 0.2], [0.0, 1.0, 0.3, 0.0], [0.0, 0.0, 1.0, 0.4],
                       [0.0, 0.0, 0.0, 1.0]])[:dims, :dims]
    values = rng.standard_normal((count, dims)) @ mixing
    values[:, :2] += shift
    return values


def test_null_p_values_are_uniform():
    rng = np.random.default_rng(0)
    welch, permuted = [], []
    for draw in range(300):
        result = dataset_inference(features(rng, 60), features(rng, 80), seed=draw,
                                   permutations=200)
        welch.append(result["p_value"])
        permuted.append(result["p_value_permutation"])
    assert kstest(welch, "uniform").pvalue > 0.01
    assert kstest(permuted, "uniform").pvalue > 0.01
    assert 0.005 < np.mean(np.array(welch) < 0.05) < 0.1


def test_members_are_detected():
    rng = np.random.default_rng(1)
    result = dataset_inference(features(rng, 300, shift=0.5), features(rng, 300))
    assert result["p_value"] < 0.01 and result["p_value_permutation"] < 0.01
    assert result["weights"][0] > 0 and result["suspect_mean"] > result["heldout_mean"]
    # the sign of a feature is learned: members lower on it are found as well
    flipped = dataset_inference(-features(rng, 300, shift=0.5), -features(rng, 300))
    assert flipped["p_value"] < 0.01


def test_welch_and_permutation_by_hand():
    a, b = np.array([3.0, 4.0, 5.0, 6.0]), np.array([1.0, 2.0, 2.0, 3.0])
    # Welch: means 4.5 and 2, variances 5/3 and 2/3, t = 2.5 / sqrt((5/3 + 2/3) / 4)
    t, p = welch_greater(a, b)
    assert t == pytest.approx(2.5 / np.sqrt((5 / 3 + 2 / 3) / 4))
    assert p == pytest.approx(ttest_ind(a, b, equal_var=False, alternative="greater").pvalue)
    # of the 70 splits of these 8 values into 4 + 4, those with a mean difference >= 2.5:
    # the observed split and the one swapping the two 3.0s: 2 / 70 in the limit
    rng = np.random.default_rng(0)
    assert permutation_greater(a, b, 20000, rng) == pytest.approx(2 / 70, abs=0.005)


def test_texts_needed_grows_as_the_member_share_falls():
    rng = np.random.default_rng(2)
    members, nonmembers = features(rng, 2000, shift=0.8), features(rng, 6000)
    sizes = [16, 32, 64, 128, 256, 512, 1024, 2048]
    needed = {f: texts_needed(members, nonmembers, f, sizes, draws=10)["texts_needed"]
              for f in (1.0, 0.25)}
    assert needed[1.0] is not None and needed[0.25] is not None
    assert needed[1.0] < needed[0.25]
    none = texts_needed(members, nonmembers, 0.0, [64, 256], draws=10)
    assert none["texts_needed"] is None  # no member: never reached


def test_refuses_too_few_texts():
    with pytest.raises(ValueError, match="at least 8"):
        dataset_inference(np.zeros((5, 2)), np.zeros((20, 2)))


def text_bundle(tmp_path, rng, leak):
    models, texts, tokens = 2, 600, 10
    keep = np.zeros((models, texts), bool)
    keep[0, :300] = True
    keep[1] = rng.permutation(keep[0])
    log_p = -rng.gamma(2.0, 0.8, size=(models, texts, tokens)) + leak * keep[:, :, None]
    path = tmp_path / "bundle.npz"
    np.savez(path, keep=keep, token_logprobs=np.minimum(log_p, -1e-3))
    return path


def test_command_on_a_bundle(tmp_path):
    from typer.testing import CliRunner

    from miaudit.cli import app

    rng = np.random.default_rng(3)
    bundle = text_bundle(tmp_path, rng, leak=0.3)
    np.save(tmp_path / "members.npy", np.arange(0, 200))
    np.save(tmp_path / "outsiders.npy", np.arange(300, 500))
    runner = CliRunner()
    common = [str(bundle), "--attacks", "loss,min_k"]
    found = runner.invoke(app, ["dataset-inference", *common, "--suspect",
                                str(tmp_path / "members.npy")])
    assert found.exit_code == 0, found.output
    assert "p = " in found.output
    p = float(found.output.split("p = ")[1].split()[0])
    assert p < 0.01
    null = runner.invoke(app, ["dataset-inference", *common, "--suspect",
                               str(tmp_path / "outsiders.npy")])
    assert null.exit_code == 0, null.output
    assert float(null.output.split("p = ")[1].split()[0]) > 0.01
    assert "not reached" in null.output
    np.save(tmp_path / "bad.npy", np.array([0, 5000]))
    bad = runner.invoke(app, ["dataset-inference", *common, "--suspect",
                              str(tmp_path / "bad.npy")])
    assert bad.exit_code == 2 and "not audited texts" in bad.output
