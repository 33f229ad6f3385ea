"""Text attacks and sequence signals: hand-worked examples from the papers' equations, a null
test under rotation (references memorize, the target does not), and a positive control."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from miaudit.attacks import AttackInput
from miaudit.queries.signals import TEXT_SIGNALS
from miaudit.registry import ATTACKS, parse_spec


def packed(log_p, mu=None, sigma=None) -> np.ndarray:
    """(M, N, L) per-token arrays -> the stored (M, N, 1, 4 L) layout (correct = 0)."""
    log_p = np.asarray(log_p, dtype=np.float32)
    mu = np.zeros_like(log_p) if mu is None else np.asarray(mu, dtype=np.float32)
    sigma = np.ones_like(log_p) if sigma is None else np.asarray(sigma, dtype=np.float32)
    correct = np.where(np.isfinite(log_p), 0.0, np.nan).astype(np.float32)
    return np.concatenate([log_p, mu, sigma, correct], axis=-1)[:, :, None, :]


def text_input(log_p, keep, mu=None, sigma=None, texts=None) -> AttackInput:
    keep = np.asarray(keep, dtype=bool)
    return AttackInput(logits=packed(log_p, mu, sigma), labels=np.zeros(keep.shape[1], np.int64),
                       keep=keep, query_names=["identity"], modality="text", texts=texts)


def attack(spec: str):
    name, options = parse_spec(spec)
    return ATTACKS.build(name, **options)


NAN = np.nan


def test_sequence_signals_by_hand():
    # one text of 3 tokens (one pad): mean log p = (-1 - 2 - 3) / 3 = -2
    outputs = packed([[[-1.0, -2.0, -3.0, NAN]]])[0, :, 0]
    assert TEXT_SIGNALS["log_prob"](outputs)[0] == pytest.approx(-2.0)
    assert TEXT_SIGNALS["loss"](outputs)[0] == pytest.approx(2.0)
    assert TEXT_SIGNALS["prob"](outputs)[0] == pytest.approx(np.exp(-2.0))
    p = np.exp(-2.0)  # LiRA's logit scaling of the geometric-mean token probability
    assert TEXT_SIGNALS["logit_conf"](outputs)[0] == pytest.approx(np.log(p / (1 - p)))


def test_loss_attack_is_negative_log_perplexity():
    data = text_input([[[-1.0, -2.0, -3.0, NAN], [-0.5, -0.5, NAN, NAN]]], [[True, False]])
    assert attack("loss").score(data, 0, []) == pytest.approx([-2.0, -0.5])


def test_min_k_by_hand():
    # Shi et al. 2024 Eq. 1 with k = 0.4 of T = 5 tokens: E = 2, the two lowest -5 and -4
    data = text_input([[[-1.0, -5.0, -2.0, -3.0, -4.0]]], [[True]])
    assert attack("min_k:k=0.4").score(data, 0, [])[0] == pytest.approx(-4.5)
    assert attack("min_k:k=1.0").score(data, 0, [])[0] == pytest.approx(-3.0)  # = LOSS
    # a short text keeps at least one token: k = 0.2 of 3 tokens -> the lowest, -4
    short = text_input([[[-1.0, -4.0, -2.0, NAN, NAN]]], [[True]])
    assert attack("min_k:k=0.2").score(short, 0, [])[0] == pytest.approx(-4.0)


def test_min_k_pp_by_hand():
    # Zhang et al. 2024 Eq. 3: (log p - mu) / sigma per token, then the Min-K% mean
    log_p = [[[-1.0, -3.0, -2.0, NAN]]]
    mu = [[[-2.0, -2.0, -1.0, NAN]]]
    sigma = [[[0.5, 2.0, 1.0, NAN]]]
    data = text_input(log_p, [[True]], mu, sigma)
    # token scores: (−1+2)/0.5 = 2, (−3+2)/2 = −0.5, (−2+1)/1 = −1
    assert attack("min_k_pp:k=1.0").score(data, 0, [])[0] == pytest.approx((2 - 0.5 - 1) / 3)
    assert attack("min_k_pp:k=0.34").score(data, 0, [])[0] == pytest.approx(-1.0)


def test_min_k_pp_matches_a_brute_force_next_token_distribution():
    """mu and sigma as the model stores them (CausalLM._stats) against a direct computation."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers", reason="the text extra (pip install -e '.[text]')")
    from miaudit.models.causal_lm import causal_lm

    torch.manual_seed(0)
    model = causal_lm(input_shape=(6,), num_classes=11, dim=16, heads=2, layers=1).eval()
    x = torch.tensor([[10, 3, 4, 5, -1, -1], [10, 1, 2, 3, 4, 5]])
    stats = model(x).reshape(2, 4, 5).double()
    with torch.no_grad():
        logits = model.lm(input_ids=x.clamp_min(0)).logits[:, :-1].double()
    log_q = torch.log_softmax(logits, -1)
    for row in range(2):
        for j in range(5):
            target = int(x[row, j + 1])
            if target < 0:
                assert torch.isnan(stats[row, :, j]).all()
                continue
            q = log_q[row, j].exp()
            mean = float((q * log_q[row, j]).sum())
            std = float(((q * (log_q[row, j] - mean) ** 2).sum()).sqrt())
            assert float(stats[row, 0, j]) == pytest.approx(float(log_q[row, j, target]), 1e-5)
            assert float(stats[row, 1, j]) == pytest.approx(mean, 1e-5)
            assert float(stats[row, 2, j]) == pytest.approx(std, 1e-4)
            assert float(stats[row, 3, j]) == float(int(log_q[row, j].argmax()) == target)
    nll = model.sample_nll(x).detach().double()
    assert float(nll[0]) == pytest.approx(-float(stats[0, 0, :3].mean()), 1e-5)


def test_zlib_by_hand():
    texts = ["aaaaaaaaaaaaaaaaaaaaaaaaaaaa", "the quick brown fox jumps"]
    data = text_input([[[-1.0, -1.0], [-2.0, -2.0]]], [[True, False]], texts=texts)
    sizes = [len(zlib.compress(t.encode(), 9)) for t in texts]
    assert attack("zlib").score(data, 0, []) == pytest.approx([-1.0 / sizes[0], -2.0 / sizes[1]])
    with pytest.raises(ValueError, match="needs the texts"):
        attack("zlib").score(text_input([[[-1.0]]], [[True]]), 0, [])


def test_ref_model_by_hand():
    # model 0 the target; refs 1, 2, 3. Sample 0: OUT for refs 1 and 3 -> reference mean of
    # their mean log p (-3 and -5) = -4; the target's -1 -> score 3. max_references=1: ref 1.
    log_p = [[[-1.0, -1.0], [-2.0, NAN]], [[-3.0, -3.0], [-1.0, NAN]],
             [[-9.0, -9.0], [-4.0, NAN]], [[-5.0, -5.0], [-3.0, NAN]]]
    keep = [[True, False], [False, True], [True, False], [False, False]]
    data = text_input(log_p, keep)
    result = attack("ref_model").evaluate(data, 0, [1, 2, 3])
    # sample 1: OUT for refs 2 and 3 -> (-4 - 3) / 2 = -3.5; target -2 -> 1.5
    assert result.scores == pytest.approx([-1 + 4, -2 + 3.5])
    one = attack("ref_model:max_references=1").score(data, 0, [1, 2, 3])
    assert one == pytest.approx([-1 + 3, -2 + 4])


def test_text_attacks_refuse_class_logits():
    data = AttackInput(logits=np.zeros((1, 2, 1, 3), np.float32), labels=np.zeros(2, np.int64),
                       keep=np.array([[True, False]]), query_names=["identity"])
    for name in ("zlib", "min_k", "min_k_pp"):
        with pytest.raises(ValueError, match="language models"):
            attack(name).score(data, 0, [])


# -- null test and positive control under rotation ------------------------------------------
MODELS, SAMPLES, TOKENS, POPULATION = 8, 3000, 12, 600
TEXT_SPECS = ["loss", "zlib", "min_k", "min_k_pp", "ref_model", "ref_model:max_references=1",
              "lira", "lira:offline=true", "rmia:gamma=1", "rmia:gamma=1,offline=true",
              "attack_r", "attack_p", "rmia_simple"]


def rotation_world(target_memorizes: bool, seed: int = 0) -> AttackInput:
    """Per-token log-probs: a per-token difficulty shared by all models, per-model noise, and
    for members a lift that varies by text (memorization). The references (models 1..M-1)
    memorize their members; the target (model 0) memorizes its real members only in the
    positive control, else a phantom keep row independent of its real one."""
    rng = np.random.default_rng(seed)
    total = SAMPLES + POPULATION
    keep = np.zeros((MODELS, total), dtype=bool)
    for i in range(SAMPLES):  # balanced: every evaluated sample IN for exactly M/2 models
        keep[rng.permutation(MODELS)[: MODELS // 2], i] = True
    lengths = rng.integers(4, TOKENS + 1, total)
    difficulty = -rng.gamma(2.0, 1.0, (total, TOKENS))
    lift = rng.exponential(0.6, total)
    phantom = rng.random(total) < 0.5
    log_p = np.empty((MODELS, total, TOKENS))
    for m in range(MODELS):
        member = keep[m] if (m > 0 or target_memorizes) else phantom & (np.arange(total) <
                                                                        SAMPLES)
        log_p[m] = difficulty + 0.3 * rng.standard_normal((total, TOKENS)) \
            + (lift * member)[:, None]
    log_p = np.minimum(log_p, -1e-3)
    log_p[:, np.arange(TOKENS)[None, :] >= lengths[:, None]] = np.nan
    mu = np.where(np.isfinite(log_p), difficulty[None] - 0.5, np.nan)
    sigma = np.where(np.isfinite(log_p), 1.5, np.nan)
    letters = np.array(list("abcdefghij"))
    texts = ["".join(rng.choice(letters, n * 3)) for n in lengths]
    data = text_input(log_p, keep, mu, sigma, texts)
    data.population = np.arange(SAMPLES, total)
    return data


@pytest.fixture(scope="module")
def null_world() -> AttackInput:
    return rotation_world(target_memorizes=False)


@pytest.fixture(scope="module")
def leaking_world() -> AttackInput:
    return rotation_world(target_memorizes=True)


@pytest.mark.parametrize("spec", TEXT_SPECS)
def test_null_under_rotation_memorizing_references(spec, null_world):
    """Target 0 learned nothing about its members: one world of 3000 texts (~1500 per side,
    standard error 0.0105) stays within 0.03; the pooled test below holds the 0.015 bound."""
    evaluated = np.arange(SAMPLES)
    scores = attack(spec).evaluate(null_world, 0, np.arange(1, MODELS)).scores[evaluated]
    auc = roc_auc_score(null_world.keep[0, evaluated], scores)
    assert abs(auc - 0.5) <= 0.03, f"{spec}: null AUC {auc:.3f}"


@pytest.mark.parametrize("spec", TEXT_SPECS)
def test_null_pooled_over_targets_is_tight(spec):
    """Four independent worlds pooled: ~6,000 texts per side, standard error 0.0053, so the
    bound 0.015 is 2.8 standard errors (the seeds are fixed: the test is deterministic)."""
    labels, values = [], []
    for target in range(4):
        world = rotation_world(target_memorizes=False, seed=10 + target)
        scores = attack(spec).evaluate(world, 0, np.arange(1, MODELS)).scores[:SAMPLES]
        labels.append(world.keep[0, :SAMPLES])
        values.append(scores)
    auc = roc_auc_score(np.concatenate(labels), np.concatenate(values))
    assert abs(auc - 0.5) <= 0.015, f"{spec}: pooled null AUC {auc:.3f}"


@pytest.mark.parametrize("spec", TEXT_SPECS)
def test_positive_control_detects_a_memorizing_target(spec, leaking_world):
    evaluated = np.arange(SAMPLES)
    scores = attack(spec).evaluate(leaking_world, 0, np.arange(1, MODELS)).scores[evaluated]
    auc = roc_auc_score(leaking_world.keep[0, evaluated], scores)
    assert auc > 0.6, f"{spec}: AUC {auc:.3f} on a memorizing target"
