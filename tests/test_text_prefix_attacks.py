"""ReCaLL, Con-ReCall and DC-PDD: hand-worked examples, null tests (a target that memorized
nothing), loop-based re-implementations from the papers' definitions on the same outputs; the
prefix query and the length-batched query of causal LMs against plain forward passes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from miaudit.attacks import AttackInput
from miaudit.attacks.text_dc_pdd import first_occurrences, token_frequencies
from miaudit.registry import ATTACKS, parse_spec

NAN = np.nan
QUERIES = ["identity", "prefix", "prefix:member=true"]


def packed(log_p: np.ndarray) -> np.ndarray:
    """(M, N, Q, L) per-token log-probs -> the stored (M, N, Q, 4 L) layout."""
    log_p = np.asarray(log_p, dtype=np.float32)
    filler = np.where(np.isfinite(log_p), 0.0, np.nan).astype(np.float32)
    return np.concatenate([log_p, filler, filler + 1, filler], axis=-1)


def attack(spec: str):
    name, options = parse_spec(spec)
    return ATTACKS.build(name, **options)


def prefix_input(log_p, keep, population=(), tokens=None, vocab=None) -> AttackInput:
    keep = np.asarray(keep, dtype=bool)
    return AttackInput(logits=packed(log_p), labels=np.zeros(keep.shape[1], np.int64),
                       keep=keep, query_names=QUERIES[: np.shape(log_p)[2]], modality="text",
                       population=np.asarray(population, dtype=np.int64), tokens=tokens,
                       vocab_size=vocab)


# -- ReCaLL / Con-ReCall -------------------------------------------------------------------------
def test_recall_by_hand():
    # text 0: LL(x) = -1, LL(x | P) = mean(-2, -1) = -1.5 -> 1.5; text 1: -2 and -2 -> 1.0
    log_p = [[[[-1.0, -1.0], [-2.0, -1.0], [-1.0, -1.0]],
              [[-2.0, NAN], [-2.0, NAN], [-2.0, NAN]]]]
    data = prefix_input(log_p, [[True, False]])
    assert attack("recall").score(data, 0, []) == pytest.approx([1.5, 1.0])


def test_con_recall_by_hand_and_its_member_prefix_texts():
    # 4 texts, the target trained on 0 and 1; member prefix of 1 shot: text 0 (first member)
    log_p = np.array([[[[-1.0], [-3.0], [-1.5]], [[-1.0], [-2.0], [-1.0]],
                       [[-2.0], [-2.0], [-2.5]], [[-4.0], [-4.0], [-4.0]]]])
    data = prefix_input(log_p, [[True, True, False, False]])
    data.query_names = ["identity", "prefix", "prefix:member=true,shots=1"]
    con_recall = ATTACKS.build("con_recall", gamma=0.5,
                               member_query="prefix:member=true,shots=1")
    result = con_recall.evaluate(data, 0, [])
    # (LL_nm - 0.5 LL_m) / LL: text 1 (-2 + 0.5) / -1 = 1.5; text 2 (-2 + 1.25) / -2 = 0.375;
    # text 3 (-4 + 2) / -4 = 0.5; text 0 is in the member prefix: the lowest other score
    assert result.scores[1:] == pytest.approx([1.5, 0.375, 0.5])
    assert result.scores[0] == pytest.approx(0.375)
    assert result.info == {"member_prefix_texts": [0]}


def test_recall_needs_its_query_column():
    data = prefix_input([[[[-1.0]]]], [[True]])
    with pytest.raises(ValueError, match="'prefix' query column"):
        attack("recall").score(data, 0, [])


def world(rng, models, texts, tokens, leak):
    """Per-token log-probs of a ``models`` x ``texts`` rotation; members' unconditional
    log-probs are raised by ``leak`` and fall by 2 * ``leak`` under a non-member prefix (what
    ReCaLL expects of memorized texts); the member prefix restores them."""
    keep = rng.random((models, texts)) < 0.5
    base = -rng.gamma(2.0, 1.0, size=(texts, tokens))[None].repeat(models, 0)
    noise = lambda: rng.normal(0, 0.3, size=base.shape)  # noqa: E731
    member = keep[:, :, None]
    plain = base + leak * member + noise()
    after_nonmember = base - leak * member + noise()
    after_member = base + leak * member + noise()
    return np.minimum(np.stack([plain, after_nonmember, after_member], axis=2), -1e-3), keep


@pytest.mark.parametrize("spec", ["recall", "con_recall"])
def test_null_target_that_memorized_nothing(spec):
    rng = np.random.default_rng(0)
    log_p, keep = world(rng, 2, 3000, 12, leak=0.0)
    data = prefix_input(log_p, keep, population=[])
    scores = attack(spec).score(data, 0, [1])
    assert abs(roc_auc_score(keep[0], scores) - 0.5) < 0.03


@pytest.mark.parametrize("spec", ["recall", "con_recall"])
def test_positive_control(spec):
    rng = np.random.default_rng(1)
    log_p, keep = world(rng, 2, 1000, 12, leak=0.3)
    scores = attack(spec).score(prefix_input(log_p, keep), 0, [1])
    assert roc_auc_score(keep[0], scores) > 0.8


def loop_mean(row):
    values = [v for v in row if np.isfinite(v)]
    return sum(values) / len(values)


def test_recall_and_con_recall_equal_loops_from_the_papers():
    rng = np.random.default_rng(2)
    log_p, keep = world(rng, 3, 60, 7, leak=0.2)
    log_p[:, ::3, :, 5:] = np.nan  # shorter texts
    data = prefix_input(log_p, keep)
    for target in range(3):
        recall = attack("recall").score(data, target, [])
        con = attack("con_recall:gamma=0.7").evaluate(data, target, [])
        members = [i for i in range(60) if keep[target, i]][:5]
        for i in range(60):
            stored = log_p[target, i].astype(np.float32).astype(np.float64)
            ll, ll_nm, ll_m = (loop_mean(stored[q]) for q in range(3))
            assert recall[i] == pytest.approx(ll_nm / ll, rel=1e-9)
            if i not in members:
                assert con.scores[i] == pytest.approx((ll_nm - 0.7 * ll_m) / ll, rel=1e-9)
        assert con.info["member_prefix_texts"] == members


# -- DC-PDD ---------------------------------------------------------------------------------------
def test_dc_pdd_by_hand():
    # vocabulary 4; population texts (rows 1, 2) hold tokens 0, 0, 1, 2 (-1 pads): counts
    # 2, 1, 1, 0 over 4 tokens -> f = (3, 2, 2, 1) / 8
    tokens = np.array([[9, 3, 0, 3], [9, 0, 0, -1], [9, 1, 2, -1]])
    freq = token_frequencies(tokens[[1, 2], 1:], 4)
    assert freq == pytest.approx(np.array([3, 2, 2, 1]) / 8)
    # text 0 scores tokens 3, 0, 3 with p = 0.5, 0.25, 0.9; first occurrences: 3 and 0
    log_p = np.log([[[[0.5, 0.25, 0.9]], [[0.5, 0.5, NAN]], [[0.5, 0.5, NAN]]]]).reshape(
        1, 3, 1, 3)
    data = prefix_input(log_p, [[True, False, False]], population=[1, 2], tokens=tokens,
                        vocab=4)
    alpha = [0.5 * np.log(8 / 1), 0.25 * np.log(8 / 3)]  # 1.040 and 0.245
    assert attack("dc_pdd:a=2").score(data, 0, [])[0] == pytest.approx(np.mean(alpha))
    # the default cap a = 1 holds the first token's 1.040 at 1
    assert attack("dc_pdd").score(data, 0, [])[0] == pytest.approx((1 + alpha[1]) / 2)
    assert attack("dc_pdd:a=0.2").score(data, 0, [])[0] == pytest.approx(0.2)


def test_first_occurrences():
    ids = np.array([[3, 1, 3, 2, 1, -1], [5, 5, 5, -1, -1, -1]])
    assert first_occurrences(ids).tolist() == [[True, True, False, True, False, False],
                                               [True, False, False, False, False, False]]


def dc_pdd_loop(log_p_row, ids_row, population_ids, vocab, cap):
    """Zhang et al. 2024 Secs. 3.3-3.4 written out: Laplace frequencies, first occurrences,
    capped cross-entropy, mean."""
    counts = [0] * vocab
    for row in population_ids:
        for token in row:
            if token >= 0:
                counts[token] += 1
    total = sum(counts)
    seen, alphas = set(), []
    for token, value in zip(ids_row, log_p_row):
        if token < 0 or not np.isfinite(value) or token in seen:
            continue
        seen.add(token)
        frequency = (counts[token] + 1) / (total + vocab)
        alphas.append(min(-np.exp(value) * np.log(frequency), cap))
    return sum(alphas) / len(alphas)


def test_dc_pdd_equals_a_loop_and_is_null_without_memorization():
    rng = np.random.default_rng(3)
    models, texts, width, vocab = 2, 400, 10, 30
    ids = rng.integers(0, vocab, size=(texts, width))
    ids[::4, 7:] = -1
    tokens = np.concatenate([np.full((texts, 1), vocab), ids], axis=1)
    keep = np.zeros((models, texts), bool)
    keep[:, :300] = rng.random((models, 300)) < 0.5
    population = np.arange(300, 400)
    log_p = np.where(ids >= 0, -rng.gamma(2.0, 0.7, size=(models, texts, width)), np.nan)
    data = prefix_input(log_p[:, :, None], keep, population, tokens, vocab + 1)
    scores = attack("dc_pdd:a=2.0").score(data, 0, [1])
    for i in range(0, texts, 37):
        stored = log_p[0, i].astype(np.float32).astype(np.float64)
        assert scores[i] == pytest.approx(dc_pdd_loop(stored, ids[i], ids[population],
                                                      vocab + 1, 2.0), rel=1e-9)
    audited = np.arange(300)
    assert abs(roc_auc_score(keep[0, audited], scores[audited]) - 0.5) < 0.1


# -- the prefix query and the length-batched query -----------------------------------------------
def tiny_lm(positions=64):
    from miaudit.models.causal_lm import causal_lm

    torch.manual_seed(0)
    return causal_lm(input_shape=(12,), num_classes=20, dim=16, heads=2, layers=1,
                     positions=positions).eval()


def rows_with_padding(rng):
    x = torch.full((5, 12), -1, dtype=torch.int64)
    for row, length in enumerate([11, 3, 7, 1, 11]):
        x[row, 0] = 19
        x[row, 1 : 1 + length] = torch.from_numpy(rng.integers(0, 19, length))
    return x


def test_length_batched_query_equals_one_text_at_a_time():
    from miaudit.models import causal_lm as module

    model = tiny_lm()
    x = rows_with_padding(np.random.default_rng(4))
    batched = model(x)
    saved = module.LOGIT_BUDGET
    try:
        module.LOGIT_BUDGET = 1  # one row per micro-batch, each cut to its own length
        single = model(x)
    finally:
        module.LOGIT_BUDGET = saved
    assert torch.allclose(batched, single, atol=1e-5, equal_nan=True)
    for row in range(len(x)):  # against a plain forward pass of the unpadded text
        length = int((x[row] != -1).sum())
        logits = model.lm(input_ids=x[row : row + 1, :length]).logits[0, :-1].double()
        expected = torch.log_softmax(logits, -1).gather(-1, x[row, 1:length, None])[:, 0]
        got = batched[row].view(4, 11)[0]
        assert torch.allclose(got[: length - 1].double(), expected, atol=1e-5)
        assert torch.isnan(got[length - 1 :]).all()


def test_prefix_query_scores_the_text_after_the_prefix():
    from miaudit.auditor.stages.prefix_query import prefix_outputs

    model = tiny_lm(positions=30)
    x = rows_with_padding(np.random.default_rng(5))
    out = prefix_outputs(model, x, np.array([3, 1]), torch.device("cpu"))
    prefix = torch.cat([x[3][x[3] != -1], x[1][x[1] != -1]])  # 2 + 4 tokens: room is 18
    for row in range(len(x)):
        text = x[row][x[row] != -1]
        joined = torch.cat([prefix, text])[None]
        logits = model.lm(input_ids=joined).logits[0, len(prefix) : -1].double()
        expected = torch.log_softmax(logits, -1).gather(-1, text[1:, None])[:, 0]
        assert torch.allclose(out[row].view(4, 11)[0, : len(text) - 1].double(), expected,
                              atol=1e-5)
    with pytest.raises(ValueError, match="positions above"):
        prefix_outputs(tiny_lm(positions=12), x, np.array([3]), torch.device("cpu"))


def prefix_audit_config(tmp_path, **overrides):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_text import sentences

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentences(80)) + "\n")
    config = {
        "name": "prefix", "data": {"name": "text", "data_dir": str(corpus),
                                   "population_size": 0.1, "options": {"max_tokens": 40}},
        "model": {"name": "causal_lm", "options": {"dim": 32, "heads": 2, "layers": 1,
                                                   "positions": 160}},
        "train": {"recipe": "lm", "epochs": 20, "batch_size": 16, "optimizer": "adam",
                  "lr": 0.003, "weight_decay": 0.0, "schedule": "constant"},
        "num_models": 4, "queries": QUERIES, "device": "cpu", "threads": 1,
        "attacks": ["loss", "recall", "con_recall", "dc_pdd"],
        "output_dir": str(tmp_path / "runs")}
    config.update(overrides)
    return config


def test_audit_with_prefix_queries(tmp_path):
    from miaudit import audit
    from miaudit._runtime.io import read_tensors

    results = audit(prefix_audit_config(tmp_path), show_progress=False)
    summary = results.summary
    assert set(summary.attacks) == {"loss", "recall", "con_recall", "dc_pdd"}
    assert summary.attacks["loss"].auc > 0.6  # the models memorize their random sentences
    stored = sorted((results.run_dir / "models").glob("*/outputs/*.safetensors"))
    assert len(stored) == 4 * 3  # identity and two prefix queries, once per model
    assert read_tensors(stored[0])["logits"].dtype == torch.float16
    blind = summary.blind_baseline  # a random split: the texts alone tell nothing
    assert blind is not None and blind.warning is None
    assert "over_blind" in summary.attacks["recall"].model_dump()


def test_prefix_query_needs_room_and_population(tmp_path):
    from miaudit import audit
    from miaudit.errors import ConfigError

    no_room = prefix_audit_config(tmp_path, model={"name": "causal_lm", "options": {
        "dim": 32, "heads": 2, "layers": 1}})
    with pytest.raises(ConfigError, match="positions above"):
        audit(no_room, show_progress=False)
    with pytest.raises(ConfigError, match="queries: a language model"):
        audit(prefix_audit_config(tmp_path, queries=["prefix", "identity"]),
              show_progress=False)


def test_dc_pdd_on_a_bundle_with_token_ids(tmp_path):
    from miaudit.results.external_text import read_text_bundle
    from miaudit.results.scoring import score_outputs

    rng = np.random.default_rng(6)
    texts, width, vocab = 120, 8, 12
    ids = rng.integers(0, vocab, size=(texts, width))
    ids[::3, 6:] = -1
    keep = np.zeros((2, texts), bool)
    keep[0, :50], keep[1, 50:100] = True, True
    log_p = np.where(ids >= 0, -rng.gamma(2.0, 0.7, size=(2, texts, width)), np.nan)
    path = tmp_path / "bundle.npz"
    np.savez(path, keep=keep, token_logprobs=log_p, token_ids=ids)
    population = np.arange(100, 120)
    outputs = read_text_bundle(path, population=population)
    results = score_outputs(outputs, ["dc_pdd"], None, population=population, targets=[0])
    scores = results.memory_scores["dc_pdd"][0]  # the 100 audited texts
    for i in (0, 7, 51, 99):
        stored = log_p[0, i].astype(np.float32).astype(np.float64)
        assert scores[i] == pytest.approx(dc_pdd_loop(stored, ids[i], ids[population], vocab,
                                                      1.0), rel=1e-9)
    np.savez(path, keep=keep, token_logprobs=log_p, token_ids=ids[:, :3])
    with pytest.raises(Exception, match="token_ids must be"):
        read_text_bundle(path)
