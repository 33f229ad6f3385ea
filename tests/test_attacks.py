"""Attacks: hand-worked examples, direction and null tests, and plain-loop references."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from miaudit import metrics
from miaudit.attacks import AttackInput
from miaudit.attacks._common import masked_median
from miaudit.attacks.rmia import relative_score
from miaudit.attacks.shokri import sorted_log_probs
from miaudit.attacks.song_mittal import best_threshold, modified_entropy, prediction_entropy
from miaudit.registry import ATTACKS

EXPECTED = {"loss", "lira", "shokri", "song_mittal", "correctness", "watson", "attack_p",
            "attack_r", "rmia", "rmia_simple", "dropout_search"}


# -- building inputs ---------------------------------------------------------------------------
def synthetic(models=8, samples=1500, queries=2, classes=4, shift=1.5, seed=0) -> AttackInput:
    """Balanced keep matrix; per-sample difficulty shared by all models, per-model and
    per-query noise; members get ``shift`` more on the true-class logit."""
    rng = np.random.default_rng(seed)
    keep = np.argsort(rng.uniform(size=(models, samples)), axis=0) < models // 2
    labels = rng.integers(0, classes, samples)
    logits = (1.5 * rng.normal(size=(1, samples, 1, classes))
              + 0.5 * rng.normal(size=(models, samples, 1, classes))
              + 0.3 * rng.normal(size=(models, samples, queries, classes)))
    onehot = np.eye(classes)[labels][None, :, None, :]
    logits += onehot * (1.0 + shift * keep[:, :, None, None])
    names = ["identity", "flip", *[f"shift:dx={i}" for i in range(1, queries - 1)]][:queries]
    return AttackInput(logits.astype(np.float32), labels, keep, names)


def from_probs(probs, keep, names=None) -> AttackInput:
    """Two classes, label 0, logits (log p, log(1-p)): log_prob is log p exactly."""
    probs = np.asarray(probs, dtype=np.float64)
    probs = probs[..., None] if probs.ndim == 2 else probs
    logits = np.stack([np.log(probs), np.log1p(-probs)], axis=-1)
    names = names or ["identity", "flip", "shift:dx=1"][: probs.shape[2]]
    return AttackInput(logits, np.zeros(probs.shape[1], dtype=np.int64), np.asarray(keep), names)


def from_phi(phi, keep) -> AttackInput:
    """Two classes, label 0, logits (phi, 0): LiRA's logit-scaled confidence is phi exactly."""
    phi = np.asarray(phi, dtype=np.float64)
    phi = phi[..., None] if phi.ndim == 2 else phi
    logits = np.stack([phi, np.zeros_like(phi)], axis=-1)
    names = ["identity", "flip", "shift:dx=1"][: phi.shape[2]]
    return AttackInput(logits, np.zeros(phi.shape[1], dtype=np.int64), np.asarray(keep), names)


def build(spec):
    name, options = (spec, {}) if isinstance(spec, str) else (spec[0], spec[1])
    return ATTACKS.build(name, **options)


SPECS = [
    "loss", "lira", ("lira", {"offline": True}), ("lira", {"fixed_variance": True}),
    ("lira", {"offline": True, "fixed_variance": True}), ("lira", {"center": "mean"}),
    "song_mittal", ("song_mittal", {"signal": "entropy"}),
    ("song_mittal", {"signal": "confidence"}), "correctness", "watson", "attack_p", "attack_r",
    "rmia", ("rmia", {"offline": True}), ("rmia", {"reduce": "mean", "gamma": 1.0}),
    "rmia_simple", "shokri", ("shokri", {"classifier": "logistic"}),
    ("dropout_search", {"attack": "rmia_simple", "grid": ["identity", "flip"]}),
]


def spec_id(spec):
    return spec if isinstance(spec, str) else spec[0] + ":" + ",".join(
        f"{k}={v}" for k, v in spec[1].items())


def test_every_attack_is_registered():
    assert EXPECTED <= set(ATTACKS.names())


# -- direction and null -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def shifted():
    return synthetic(shift=1.5, seed=1)


@pytest.fixture(scope="module")
def null():
    return synthetic(shift=0.0, seed=2)


@pytest.mark.parametrize("spec", SPECS, ids=spec_id)
def test_direction(spec, shifted):
    scores = build(spec).score(shifted, 0, np.arange(1, 8))
    assert scores.shape == (1500,) and np.isfinite(scores).all()
    assert metrics.summarize(scores, shifted.keep[0])["auc"] > 0.6


@pytest.mark.parametrize("spec", SPECS, ids=spec_id)
def test_null(spec, null):
    result = metrics.summarize(build(spec).score(null, 3, [0, 1, 2, 4, 5, 6, 7]), null.keep[3])
    assert abs(result["auc"] - 0.5) < 0.06  # 4 standard errors with 750 + 750 samples
    assert result["tpr@1%"] < 0.04


# -- hand-worked examples ---------------------------------------------------------------------
def test_loss_hand():
    data = from_probs([[[0.5, 0.25]], [[0.9, 0.9]]], [[True], [False]])
    # mean over the two queries of log p: (log 1/2 + log 1/4) / 2 = -1.5 log 2
    assert build("loss").score(data, 0, [1])[0] == pytest.approx(-1.5 * math.log(2))


LIRA_KEEP = [[True], [True], [True], [False], [False], [False]]
LIRA_PHI = [[2.0], [1.0], [3.0], [-1.0], [0.0], [1.0]]  # target, IN refs 1 and 3, OUT -1, 0, 1


def test_lira_online_hand():
    data = from_phi(LIRA_PHI, LIRA_KEEP)
    # IN: median 2, std 1; OUT: median 0, std sqrt(2/3). At phi = 2:
    # log N(2; 2, 1) - log N(2; 0, 2/3) = log sqrt(2/3) + 4 / (2 * 2/3) = 0.5 log(2/3) + 3
    score = build("lira").score(data, 0, [1, 2, 3, 4, 5])[0]
    assert score == pytest.approx(0.5 * math.log(2 / 3) + 3)
    # fixed variance: squared deviations from the group means, (1 + 1) + (1 + 0 + 1) over 5
    # values = 4/5, so the score is log N(2; 2, 4/5) - log N(2; 0, 4/5) = 2^2 / (2 * 4/5)
    fixed = ATTACKS.build("lira", fixed_variance=True).score(data, 0, [1, 2, 3, 4, 5])[0]
    assert fixed == pytest.approx(2.5)


def test_lira_offline_hand():
    data = from_phi(LIRA_PHI, LIRA_KEEP)
    # one-sided: log Phi((2 - 0) / sqrt(2/3)), Phi(x) = erfc(-x / sqrt 2) / 2
    expected = math.log(0.5 * math.erfc(-(2 / math.sqrt(2 / 3)) / math.sqrt(2)))
    score = ATTACKS.build("lira", offline=True).score(data, 0, [1, 2, 3, 4, 5])[0]
    assert score == pytest.approx(expected)


def test_lira_offline_is_the_one_sided_gaussian_test():
    """OUT reference values drawn from per-sample Gaussians: the offline score is the
    Gaussian CDF at the target's value (center=mean), and with many references it
    approaches the CDF under the true parameters."""
    rng = np.random.default_rng(5)
    refs, samples = 400, 50
    mu, sigma = rng.normal(size=samples), rng.uniform(0.5, 2.0, samples)
    phi = np.vstack([mu + 2 * sigma * rng.normal(size=samples),
                     mu + sigma * rng.normal(size=(refs, samples))])
    keep = np.zeros(phi.shape, dtype=bool)
    keep[0] = True
    data = from_phi(phi[:, :, None], keep)
    score = ATTACKS.build("lira", offline=True, center="mean").score(
        data, 0, np.arange(1, refs + 1))
    out = phi[1:]
    np.testing.assert_allclose(score, norm.logcdf((phi[0] - out.mean(0)) / out.std(0)),
                               rtol=1e-10)
    np.testing.assert_allclose(np.exp(score), norm.cdf((phi[0] - mu) / sigma), atol=0.05)


def test_watson_hand():
    keep = [[True, True], [False, True], [False, True], [True, True]]
    probs = [[0.9, 0.6], [0.5, 0.3], [0.25, 0.3], [0.99, 0.3]]
    scores = build("watson").score(from_probs(probs, keep), 0, [1, 2, 3])
    # sample 0: log .9 - mean(log .5, log .25); sample 1 has no OUT ref: log .6 - log .3
    assert scores[0] == pytest.approx(math.log(0.9) + 1.5 * math.log(2))
    assert scores[1] == pytest.approx(math.log(2))


def test_attack_p_hand():
    keep = [[True, True, False, False, False], [False] * 5]
    probs = [[0.9, 0.8, 0.3, 0.6, 0.5], [0.5] * 5]
    scores = build("attack_p").score(from_probs(probs, keep), 0, [])
    # population = the target's non-members, confidences {0.3, 0.6, 0.5}
    np.testing.assert_allclose(scores, [1, 1, 1 / 3, 1, 2 / 3])


def test_attack_r_hand():
    keep = [[True], [False], [False], [False], [True]]
    probs = [[0.6], [0.2], [0.5], [0.7], [0.95]]
    # OUT references 0.2, 0.5, 0.7: two of three are <= 0.6; the IN one is ignored
    assert build("attack_r").score(from_probs(probs, keep), 0, [1, 2, 3, 4])[0] == \
        pytest.approx(2 / 3)


RMIA_KEEP = [[True, False, False], [True, True, False], [False, False, True]]
RMIA_PROBS = [[0.8, 0.4, 0.1], [0.6, 0.5, 0.1], [0.2, 0.3, 0.3]]


def test_rmia_online_hand():
    data = from_probs(RMIA_PROBS, RMIA_KEEP)
    # Pr(x) = (IN + OUT)/2: 0.4, 0.4, 0.2; ratios 2, 1, 0.5; z = samples 1, 2 (ratios 1, 0.5)
    # LR >= 1.5: x0 vs both z; x1 only vs z2 (LR 2); x2 never.
    scores = ATTACKS.build("rmia", gamma=1.5).score(data, 0, [1, 2])
    np.testing.assert_allclose(scores, [1.0, 0.5, 0.0])


def test_rmia_offline_hand():
    data = from_probs(RMIA_PROBS, RMIA_KEEP)
    # a = 0.5: Pr = (1.5 Pr_out + 0.5) / 2 with Pr_out 0.2, 0.3, 0.1 -> 0.4, 0.475, 0.325;
    # ratios 2, 0.842, 0.308; LR(x1, z2) = 2.74 >= 1.5, LR(x1, z1) = 1, LR(x2, .) <= 1
    scores = ATTACKS.build("rmia", offline=True, a=0.5, gamma=1.5).score(data, 0, [1, 2])
    np.testing.assert_allclose(scores, [1.0, 0.5, 0.0])


def test_rmia_gamma_one_single_query_is_a_ranking():
    """With gamma = 1 and one query, score(x) = fraction of z with ratio(z) <= ratio(x): on
    the population points themselves it is their rank among the population."""
    data = synthetic(queries=1, seed=3)
    attack = ATTACKS.build("rmia", gamma=1.0)
    scores = attack.score(data, 0, np.arange(1, 8))
    prob = np.exp(data.signal("log_prob")[:, :, 0])
    pr = np.array([0.5 * (prob[1:][data.keep[1:, i], i].mean()
                          + prob[1:][~data.keep[1:, i], i].mean()) for i in range(1500)])
    ratio = prob[0] / pr
    population = np.flatnonzero(~data.keep[0])
    ranks = np.argsort(np.argsort(ratio[population])) + 1
    np.testing.assert_allclose(scores[population] * len(population), ranks)
    order = np.argsort(ratio)
    assert (np.diff(scores[order]) >= 0).all()  # monotone in the ratio
    vote = ATTACKS.build("rmia", gamma=1.0, reduce="vote").score(data, 0, np.arange(1, 8))
    np.testing.assert_array_equal(vote, scores)  # one query: vote == mean


def test_rmia_simple_hand():
    data = from_probs([[0.6], [0.2], [0.4]], [[True], [True], [False]])
    # 0.6 / mean(0.2, 0.4) = 2
    assert build("rmia_simple").score(data, 0, [1, 2])[0] == pytest.approx(math.log(2))


def test_correctness_hand():
    logits = np.array([[[[2.0, 1.0], [0.0, 3.0]]], [[[1.0, 0.0], [1.0, 0.0]]]])
    data = AttackInput(logits, np.array([0]), np.array([[True], [False]]), ["identity", "flip"])
    assert build("correctness").score(data, 0, [1])[0] == 0.5  # right on 1 of 2 queries


def test_entropies_hand():
    p = np.array([0.7, 0.2, 0.1])
    logits = np.log(p)[None]
    label = np.array([0])
    mentr = -(0.3 * math.log(0.7)) - (0.2 * math.log(0.8) + 0.1 * math.log(0.9))
    entropy = -(0.7 * math.log(0.7) + 0.2 * math.log(0.2) + 0.1 * math.log(0.1))
    assert modified_entropy(logits, label)[0] == pytest.approx(mentr)
    assert prediction_entropy(logits, label)[0] == pytest.approx(entropy)
    # a confidently wrong prediction stays finite (logs clamped at 1e-30)
    assert np.isfinite(modified_entropy(np.array([[0.0, 800.0]]), label)).all()


def test_threshold_hand():
    # candidates 1, 3, 4, 5 -> accuracies .5, .75, .5, .75; ties go to the smallest
    assert best_threshold(np.array([3.0, 5.0]), np.array([1.0, 4.0])) == (3.0, 0.75)


def song_mittal_loop(members, nonmembers):
    """Song & Mittal's _thre_setting loop over every observed value (smallest on ties)."""
    best_value, best_accuracy = None, -1.0
    for value in sorted(np.concatenate([members, nonmembers])):
        accuracy = 0.5 * ((members >= value).mean() + (nonmembers < value).mean())
        if accuracy > best_accuracy:
            best_value, best_accuracy = value, accuracy
    return best_value, best_accuracy


@pytest.mark.parametrize("seed", range(6))
def test_threshold_search_vs_brute_force(seed):
    rng = np.random.default_rng(seed)
    members = np.round(rng.normal(0.5, 1, rng.integers(1, 80)), 1)
    nonmembers = np.round(rng.normal(0, 1, rng.integers(1, 80)), 1)
    value, accuracy = best_threshold(members, nonmembers)
    expected_value, expected_accuracy = song_mittal_loop(members, nonmembers)
    assert (value, accuracy) == pytest.approx((expected_value, expected_accuracy))


def test_song_mittal_class_thresholds_hand():
    # class 0 (samples 0, 1) and class 1 (samples 2, 3); model 0 target, models 1, 2 refs
    keep = [[True, False, True, False], [True, False, True, False], [False, True, False, True]]
    probs = [[0.9, 0.8, 0.6, 0.5], [0.95, 0.7, 0.6, 0.3], [0.8, 0.7, 0.4, 0.2]]
    data = from_probs(probs, keep)
    data.labels[2:] = 1
    data.logits[:, 2:] = data.logits[:, 2:, :, ::-1].copy()  # p is on class 1 there
    attack = ATTACKS.build("song_mittal", signal="confidence")
    scores = attack.score(data, 0, [1, 2])
    # class 0: members {.95 (ref1 s0), .7 (ref2 s1)}, non-members {.7, .8}: best t = .95 (acc .75)
    # class 1: members {.6, .2}, non-members {.3, .4}: best t = .6 (acc .75)
    np.testing.assert_allclose(np.exp(attack.last_info["thresholds"]), [0.95, 0.6])
    np.testing.assert_allclose(scores, np.log([0.9 / 0.95, 0.8 / 0.95, 1.0, 0.5 / 0.6]))


def test_shokri_features_and_separable_case():
    logits = np.log(np.array([[[0.2, 0.7, 0.1]]]))
    np.testing.assert_allclose(sorted_log_probs(logits), np.log([[0.7, 0.2, 0.1]]))
    rng = np.random.default_rng(0)
    keep = np.argsort(rng.uniform(size=(6, 400)), axis=0) < 3
    probs = np.where(keep, 0.99, 0.6) + 0.005 * rng.uniform(size=keep.shape)
    data = from_probs(np.minimum(probs, 0.999), keep)
    scores = ATTACKS.build("shokri", classifier="logistic").score(data, 0, np.arange(1, 6))
    assert (scores[keep[0]] > 0.5).all() and (scores[~keep[0]] < 0.5).all()


def test_dropout_search_picks_the_informative_column():
    data = synthetic(queries=2, shift=0.0, seed=4)
    data.query_names[:] = ["dropout:p=0.01,n=10", "dropout:p=0.1,n=10"]
    informative = synthetic(queries=2, shift=2.0, seed=4).logits
    data.logits[:, :, 1] = informative[:, :, 1]  # membership shows in the second column only
    attack = ATTACKS.build("dropout_search", attack="attack_r")
    scores = attack.score(data, 0, np.arange(1, 8))
    assert attack.last_info["chosen_query"] == "dropout:p=0.1,n=10"
    grid = attack.last_info["grid_auc"]
    assert grid["dropout:p=0.1,n=10"] > 0.7 > grid["dropout:p=0.01,n=10"]
    expected = ATTACKS.build("attack_r", queries=["dropout:p=0.1,n=10"]).score(
        data, 0, np.arange(1, 8))
    np.testing.assert_array_equal(scores, expected)


# -- vectorized vs plain loops ------------------------------------------------------------------
@pytest.fixture(scope="module")
def small():
    return synthetic(models=9, samples=120, queries=3, classes=3, seed=7)


def ref_values(data, signal, refs, i, member, q):
    """Plain per-sample selection: the values of sample i over references in the group."""
    return np.array([data.signal(signal)[r, i, q] for r in refs
                     if member is None or data.keep[r, i] == member])


def test_masked_median_vs_numpy(small):
    refs = np.arange(1, 9)
    for member in (True, False):
        median = masked_median(small.signal("logit_conf"), small.keep, refs, np.arange(3), member)
        for i in range(120):
            for q in range(3):
                assert median[i, q] == pytest.approx(
                    np.median(ref_values(small, "logit_conf", refs, i, member, q)))


@pytest.mark.parametrize("options", [{}, {"center": "mean"}, {"fixed_variance": True},
                                     {"offline": True}, {"offline": True, "center": "mean"},
                                     {"equalize": False}, {"equalize": False, "offline": True}])
def test_lira_vs_loop(small, options):
    refs = np.arange(1, 9)
    scores = ATTACKS.build("lira", **options).score(small, 0, refs)
    offline, center = options.get("offline", False), options.get("center", "median")
    phi = small.signal("logit_conf")
    fits, residuals = {}, []
    for member in (True, False):
        sizes = [len(ref_values(small, "logit_conf", refs, i, member, 0)) for i in range(120)]
        # equalize: every sample keeps its first min(size) references of the group
        size = min(sizes) if options.get("equalize", True) else None
        assert min(sizes) < max(sizes)  # the case that equalizing changes
        for i in range(120):
            for q in range(3):
                values = ref_values(small, "logit_conf", refs, i, member, q)[:size]
                middle = np.median(values) if center == "median" else values.mean()
                fits[member, i, q] = (middle, values.std())
                if member is False or not offline:
                    residuals.extend(values - values.mean())
    pooled = np.sqrt(np.mean(np.square(residuals)))
    expected = np.zeros(120)
    for i in range(120):
        for q in range(3):
            out_mu, out_sd = fits[False, i, q]
            in_mu, in_sd = fits[True, i, q]
            if options.get("fixed_variance"):
                out_sd = in_sd = pooled
            if offline:
                expected[i] += norm.logcdf(phi[0, i, q], out_mu, out_sd) / 3
            else:
                expected[i] += (norm.logpdf(phi[0, i, q], in_mu, in_sd)
                                - norm.logpdf(phi[0, i, q], out_mu, out_sd)) / 3
    np.testing.assert_allclose(scores, expected, rtol=1e-9, atol=1e-9)


def test_attack_r_and_watson_vs_loop(small):
    refs = np.arange(1, 9)
    attack_r = ATTACKS.build("attack_r").score(small, 0, refs)
    watson = ATTACKS.build("watson", queries=["identity", "flip"]).score(small, 0, refs)
    log_p = small.signal("log_prob")
    for i in range(120):
        fractions = [(ref_values(small, "log_prob", refs, i, False, q) <= log_p[0, i, q]).mean()
                     for q in range(3)]
        assert attack_r[i] == pytest.approx(np.mean(fractions))
        calibrated = [log_p[0, i, q] - ref_values(small, "log_prob", refs, i, False, q).mean()
                      for q in range(2)]
        assert watson[i] == pytest.approx(np.mean(calibrated))


@pytest.mark.parametrize("reduce", ["mean", "vote"])
@pytest.mark.parametrize("offline", [False, True])
def test_rmia_vs_loop(small, reduce, offline):
    refs = np.arange(1, 9)
    options = {"offline": True, "a": 0.3} if offline else {}
    scores = ATTACKS.build("rmia", reduce=reduce, gamma=1.3, **options).score(small, 0, refs)
    prob = np.exp(small.signal("log_prob"))
    ratio = np.zeros((120, 3))
    for i in range(120):
        for q in range(3):
            out = prob[refs][~small.keep[refs, i], i, q].mean()
            inside = prob[refs][small.keep[refs, i], i, q].mean()
            pr = 0.5 * (1.3 * out + 0.7) if offline else 0.5 * (inside + out)
            ratio[i, q] = prob[0, i, q] / pr
    population = np.flatnonzero(~small.keep[0])
    for i in range(120):
        passed = np.array([[ratio[i, q] / ratio[z, q] >= 1.3 for q in range(3)]
                           for z in population])
        expected = passed.mean() if reduce == "mean" else (passed.sum(1) >= 2).mean()
        assert scores[i] == pytest.approx(expected)


def test_rmia_vote_tie_fails():
    # two queries: x beats z on one and loses on the other -> no majority -> not counted
    ratio_x, ratio_z = np.log([[2.0, 0.5]]), np.log([[1.0, 1.0]])
    assert relative_score(ratio_x, ratio_z, 1.5, "vote")[0] == 0.0
    assert relative_score(ratio_x, ratio_z, 1.5, "mean")[0] == 0.5


def test_rmia_tunes_a_on_references(shifted):
    attack = ATTACKS.build("rmia", offline=True, reduce="mean", tune_size=600)
    attack.score(shifted, 0, np.arange(1, 8))
    info = attack.last_info
    assert info["a_tuning_model"] == 1 and len(info["a_grid_auc"]) == 11
    assert info["a"] == float(max(info["a_grid_auc"], key=info["a_grid_auc"].get))


# -- option and input errors ------------------------------------------------------------------
@pytest.mark.parametrize("name, options, message", [
    ("lira", {"offline": "yes"}, "offline"),
    ("lira", {"center": "mode"}, "center"),
    ("lira", {"queries": []}, "queries"),
    ("rmia", {"a": 0.3}, "'a'"),
    ("rmia", {"reduce": "max"}, "reduce"),
    ("rmia", {"gamma": 0}, "gamma"),
    ("rmia", {"num_z": 0}, "num_z"),
    ("song_mittal", {"signal": "loss"}, "signal"),
    ("shokri", {"classifier": "svm"}, "classifier"),
    ("rmia_simple", {"references": "in"}, "references"),
    ("dropout_search", {"attack": "lira", "grid": "dropout"}, "grid"),
    ("dropout_search", {"attack": "rmia:queries=identity"}, "queries"),
])
def test_bad_options(name, options, message):
    with pytest.raises(ValueError, match=message):
        ATTACKS.build(name, **options)


def test_bad_models_and_queries(small):
    with pytest.raises(ValueError, match="own reference"):
        build("lira").score(small, 0, [0, 1])
    with pytest.raises(ValueError, match="at least 1 reference"):
        build("watson").score(small, 0, [])
    with pytest.raises(ValueError, match="not collected"):
        ATTACKS.build("loss", queries=["shift:dx=9"]).score(small, 0, [])
