"""The blind baseline (Das et al. 2024): a planted distribution shift between members and
non-members makes it fire, a random split does not, and its scores are out-of-fold."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from miaudit.analysis.blind_baseline import blind_features, dense_features, out_of_fold_scores
from miaudit.results.external_outputs import ExternalOutputs
from miaudit.results.scoring import score_outputs

COMMON = ("the a of and to in is it that was he for on are with as his they at be this "
          "from have or by one had not but what all were when we there can an your which").split()
SOURCE_A = "ship sea captain wind sail harbour wave storm crew anchor".split()
SOURCE_B = "court judge law trial verdict witness appeal jury ruling statute".split()


def texts_from(rng: np.random.Generator, topical: list[str], count: int) -> list[str]:
    """Word salad: mostly common words, one in five from the source's topic."""
    out = []
    for i in range(count):
        words = [rng.choice(topical) if rng.random() < 0.2 else rng.choice(COMMON)
                 for _ in range(rng.integers(12, 30))]
        out.append(f"{i} " + " ".join(words))
    return out


def text_outputs(texts: list[str], keep: np.ndarray, rng: np.random.Generator) -> ExternalOutputs:
    """Per-token log-probs that carry no membership signal (a model that memorized nothing)."""
    models, samples = keep.shape
    log_p = -rng.exponential(2.0, size=(models, samples, 8))
    stats = np.concatenate([log_p, np.zeros_like(log_p), np.ones_like(log_p),
                            np.zeros_like(log_p)], axis=-1).astype(np.float32)
    return ExternalOutputs(keep=keep, logits=stats[:, :, None, :],
                           labels=np.zeros(samples, np.int64), query_names=["identity"],
                           model_names=["m0", "m1"], modality="text", texts=texts)


def scored(keep_target: np.ndarray, texts: list[str]):
    rng = np.random.default_rng(1)
    keep = np.stack([keep_target, rng.permutation(keep_target)])
    return score_outputs(text_outputs(texts, keep, rng), ["loss", "min_k"], None,
                         targets=[0]).summary


def test_planted_shift_fires_the_warning():
    rng = np.random.default_rng(0)
    texts = texts_from(rng, SOURCE_A, 150) + texts_from(rng, SOURCE_B, 150)
    members = np.r_[np.ones(150, bool), np.zeros(150, bool)]  # members: source A only
    summary = scored(members, texts)
    blind = summary.blind_baseline
    assert blind.auc > 0.9 and blind.pooled["auc_ci"][0] > 0.5
    assert blind.warning is not None and "differ in distribution" in blind.warning
    # the attacks see no membership signal, so they trail the blind baseline
    advantage = summary.attacks["loss"].over_blind["auc"]
    assert advantage.value < -0.3 and advantage.ci[1] < 0


def test_random_split_gives_no_warning():
    rng = np.random.default_rng(0)
    texts = texts_from(rng, SOURCE_A, 150) + texts_from(rng, SOURCE_B, 150)
    members = rng.permutation(np.r_[np.ones(150, bool), np.zeros(150, bool)])
    summary = scored(members, texts)
    low, high = summary.blind_baseline.pooled["auc_ci"]
    assert low < 0.5 < high
    assert summary.blind_baseline.warning is None
    advantage = summary.attacks["loss"].over_blind["auc"]
    assert advantage.ci[0] < 0 < advantage.ci[1]


def test_scores_are_out_of_fold():
    # every text carries a unique id word: a classifier scored on its own training texts
    # separates any labelling perfectly; out of fold, random labels stay near chance
    rng = np.random.default_rng(2)
    texts = [f"id{i:04d}x shared words here" for i in range(400)]
    labels = rng.permutation(np.r_[np.ones(200, bool), np.zeros(200, bool)])
    features = blind_features(texts)
    scores = out_of_fold_scores(features, labels)
    assert abs(roc_auc_score(labels, scores) - 0.5) < 0.1
    from sklearn.linear_model import LogisticRegression

    in_sample = LogisticRegression(max_iter=1000).fit(features, labels)
    assert roc_auc_score(labels, in_sample.decision_function(features)) > 0.99


def test_year_feature_by_hand():
    features = dense_features(["in 1999 and 2023 it rained", "no year 12345 here"])
    assert features[0, 1] == pytest.approx((2023 - 1900) / 199)
    assert features[0, 2] == 1.0 and features[1, 2] == 0.0 and features[1, 1] == 0.0
    assert features[0, 0] == pytest.approx(np.log1p(26) / np.log1p(26))


def test_a_planted_year_shift_alone_is_found():
    # Das et al.'s date split: non-members mention later years than members, text otherwise alike
    rng = np.random.default_rng(3)
    base = texts_from(rng, SOURCE_A, 200)
    years = np.r_[rng.integers(1990, 2019, 100), rng.integers(2021, 2025, 100)]
    texts = [f"{t} in {y}" for t, y in zip(base, years)]
    members = np.r_[np.ones(100, bool), np.zeros(100, bool)]
    scores = out_of_fold_scores(blind_features(texts), members)
    assert roc_auc_score(members, scores) > 0.8


def test_score_command_prints_the_warning(tmp_path):
    from typer.testing import CliRunner

    from miaudit.cli import app

    rng = np.random.default_rng(4)
    texts = texts_from(rng, SOURCE_A, 100) + texts_from(rng, SOURCE_B, 100)
    keep = np.zeros((2, 200), bool)
    keep[0, :100] = True
    keep[1] = ~keep[0]  # each model trained on one source only
    bundle = tmp_path / "shifted.npz"
    np.savez(bundle, keep=keep, token_logprobs=-rng.exponential(2.0, (2, 200, 8)),
             texts=np.array(texts))
    result = CliRunner().invoke(app, ["score", str(bundle), "--attacks", "loss",
                                      "--out", str(tmp_path / "scored")])
    assert result.exit_code == 0, result.output
    assert "WARNING blind baseline" in result.output and "AUC - blind" in result.output
