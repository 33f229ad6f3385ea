"""Text data, the causal_lm model, the language-model recipes and a text audit end to end
(texts generated here: no download, no ../shared)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("transformers", reason="the text extra: pip install 'miaudit[text]'")
pytest.importorskip("peft", reason="the text extra: pip install 'miaudit[text]'")

from miaudit.auditor.identity import pool_digest  # noqa: E402
from miaudit.data import make_pool  # noqa: E402
from miaudit.data.text import PAD, load_text  # noqa: E402
from miaudit.errors import ConfigError, DataError  # noqa: E402

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango uniform victor whiskey").split()


def sentences(count: int, seed: int = 0) -> list[str]:
    """Distinct random word sequences: each needs memorizing to be predicted."""
    rng = np.random.default_rng(seed)
    return [f"{i} " + " ".join(rng.choice(WORDS, 5)) for i in range(count)]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(sentences(80)) + "\n")
    return path


def test_formats_give_the_same_documents(tmp_path):
    texts = ["first text", "second, with a comma", "third\nwith two lines", "fourth"]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps({"body": t}) for t in texts))
    (tmp_path / "a.csv").write_text("id,body\n" + "\n".join(
        f'{i},"{t}"' for i, t in enumerate(texts)) + "\n")
    (tmp_path / "a.fortune").write_text("\n%\n".join(texts) + "\n%\n")
    for name, options in (("a.jsonl", {"field": "body"}), ("a.csv", {"field": "body"}),
                          ("a.fortune", {"format": "fortune"})):
        assert load_text(data_dir=tmp_path / name, **options).texts == texts, name
    (tmp_path / "b.jsonl").write_text(json.dumps({"body": "fifth"}))
    folder = load_text(data_dir=tmp_path, pattern="*.jsonl", field="body")
    assert folder.texts == [*texts, "fifth"]  # sorted files: a.jsonl, then b.jsonl
    with pytest.raises(DataError, match="no column 'text'"):
        load_text(data_dir=tmp_path / "a.csv")
    (tmp_path / "c.txt").write_text("\n".join(texts))  # lines: one document per line
    assert load_text(data_dir=tmp_path / "c.txt").texts == [
        "first text", "second, with a comma", "third", "with two lines", "fourth"]


def test_documents_tokens_padding_and_dedup(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("ab\nabc\nab\nlonger line here\nx\n")
    splits = load_text(data_dir=path, max_tokens=6)
    assert splits.texts == ["ab", "abc", "longer", "x"]  # duplicate "ab" dropped, cut to 6
    x = splits.x_train
    assert x.dtype == torch.int64 and x.shape == (4, 7)
    assert x[0].tolist() == [256, 97, 98, PAD, PAD, PAD, PAD]  # BOS, bytes, padding
    assert splits.num_classes == 257 and splits.y_train.eq(0).all()


def test_chunks(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("abcdefgh\nijklmnop\nqrstuvwx\n")
    splits = load_text(data_dir=path, unit="chunk", max_tokens=5)
    # stream: a..h EOT i..p EOT q..x EOT = 27 tokens -> 5 full chunks of 5
    assert splits.x_train.shape == (5, 6) and (splits.x_train[:, 1:] != PAD).all()
    assert splits.texts[0] == "abcde"


def test_content_digest_follows_the_text_and_the_tokenizer(corpus, tmp_path):
    first = make_pool(load_text(data_dir=corpus), "all", None, 0)
    other = tmp_path / "other.txt"
    other.write_text(corpus.read_text().replace("alpha", "alpha!", 1))
    changed = make_pool(load_text(data_dir=other), "all", None, 0)
    bpe = make_pool(load_text(data_dir=corpus, tokenizer="bpe:300"), "all", None, 0)
    digests = {pool_digest(p.x, p.y) for p in (first, changed, bpe)}
    assert len(digests) == 3
    again = make_pool(load_text(data_dir=corpus, tokenizer="bpe:300"), "all", None, 0)
    assert torch.equal(again.x, bpe.x)  # BPE training is deterministic
    subset = make_pool(load_text(data_dir=corpus), "all", 10, 3)
    index = [first.texts.index(t) for t in subset.texts]
    assert torch.equal(first.x[index], subset.x)  # texts follow the pool subset


def test_bad_options_fail_with_one_line(corpus, tmp_path):
    with pytest.raises(ValueError, match="unit must be"):
        load_text(data_dir=corpus, unit="page")
    with pytest.raises(ValueError, match="bpe:<vocab size>"):
        load_text(data_dir=corpus, tokenizer="bpe:12")
    with pytest.raises(ValueError, match="does not exist"):
        load_text(data_dir=corpus, tokenizer=str(tmp_path / "nope"))
    (tmp_path / "few.txt").write_text("one\ntwo\n")
    with pytest.raises(DataError, match="at least 4"):
        load_text(data_dir=tmp_path / "few.txt")


def test_checkpoint_folder_offline_and_its_checks(tmp_path):
    from miaudit.models.causal_lm import causal_lm, tiny_gpt2

    tiny_gpt2(257, 16, 1, 16, 2, 0.0).save_pretrained(tmp_path / "ckpt")
    model = causal_lm(input_shape=(16,), num_classes=257, checkpoint=str(tmp_path / "ckpt"))
    assert model(torch.full((2, 16), 5)).shape == (2, 4 * 15)
    with pytest.raises(ValueError, match="positions"):
        causal_lm(input_shape=(40,), num_classes=257, checkpoint=str(tmp_path / "ckpt"))
    with pytest.raises(ValueError, match="tokenizer"):
        causal_lm(input_shape=(16,), num_classes=1000, checkpoint=str(tmp_path / "ckpt"))
    with pytest.raises(ValueError, match="config.json"):
        causal_lm(input_shape=(16,), num_classes=257, checkpoint=str(tmp_path))


def test_lora_trains_adapters_only_and_dp_lora_records_epsilon(corpus):
    from miaudit.models.causal_lm import causal_lm
    from miaudit.recipes.dpsgd import DPSGD
    from miaudit.recipes.language_model import LoRA
    from miaudit.training.engine import TrainEnv, TrainParams

    pool = make_pool(load_text(data_dir=corpus, max_tokens=24), "all", None, 0)
    params = TrainParams(epochs=1, batch_size=16, optimizer="adam", lr=1e-3, weight_decay=0)

    def build():
        torch.manual_seed(0)
        return causal_lm(input_shape=pool.input_shape, num_classes=pool.num_classes, dim=32,
                         heads=2, layers=1)

    base = {k: v.clone() for k, v in build().state_dict().items()}
    model, _ = LoRA(r=4).train(build(), pool.x, pool.y, params, TrainEnv())
    state = model.state_dict()
    frozen = [k for k in state if "lora_" not in k]
    assert any("lora_A" in k for k in state)
    for key in frozen:  # the base weights did not move
        plain = key.replace("base_model.model.", "").replace(".base_layer", "")
        assert torch.equal(state[key], base[plain]), key
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dp_model, log = DPSGD(base="lora", noise_multiplier=1.0).train(
            build(), pool.x, pool.y, params, TrainEnv())
    assert log["epsilon"][-1] > 0 and np.isfinite(log["epsilon"][-1])
    assert set(dp_model.state_dict()) == set(state)  # loads back into the LoRA architecture
    with pytest.raises(ValueError, match="use base lora"):
        DPSGD(base="lm", noise_multiplier=1.0)


def text_config(corpus, tmp_path, **overrides):
    config = {
        "name": "text-test", "data": {"name": "text", "data_dir": str(corpus),
                                      "population_size": 0.1, "options": {"max_tokens": 40}},
        "model": {"name": "causal_lm", "options": {"dim": 32, "heads": 2, "layers": 1}},
        "train": {"recipe": "lm", "epochs": 30, "batch_size": 16, "optimizer": "adam",
                  "lr": 0.003, "weight_decay": 0.0, "schedule": "constant"},
        "num_models": 4, "queries": ["identity"], "device": "cpu", "threads": 1,
        "attacks": ["loss", "zlib", "min_k", "min_k_pp", "ref_model", "lira", "rmia:gamma=1"],
        "output_dir": str(tmp_path / "runs"),
    }
    config.update(overrides)
    return config


def test_text_audit_end_to_end(corpus, tmp_path):
    from miaudit import audit

    results = audit(text_config(corpus, tmp_path), show_progress=False)
    summary = results.summary
    models = summary.target_models
    assert models.accuracy_kind == "next-token top-1 accuracy"
    assert models.train_loss < models.test_loss  # the models fit their members
    assert models.train_accuracy > models.test_accuracy
    for label in ("loss", "min_k", "lira"):  # overfit on random word sequences: leaks
        assert summary.attacks[label].pooled["auc"] > 0.6, label
    exposed = np.load(results.run_dir / "exposed.npz")
    pool_texts = set(sentences(80))
    assert "texts" in exposed and all(t in pool_texts for t in exposed["texts"])
    html = (results.run_dir / "report.html").read_text()
    assert exposed["texts"][0].split()[1] in html  # shown as text
    outputs = sorted((results.run_dir / "models").glob("*/outputs/*.safetensors"))
    assert len(outputs) == 4  # one query output per model, stored once
    again = audit(text_config(corpus, tmp_path, attacks=["loss", "min_k_pp"]),
                  show_progress=False)
    assert again.summary.timing.train_seconds_this_run == 0  # rescoring trains nothing


@pytest.mark.parametrize("overrides, message", [
    ({"attacks": ["loss", "watson"]}, "'watson' does not apply to text"),
    ({"queries": ["identity", "flip"]}, "queries: a language model"),
    ({"train": {"recipe": "standard"}}, "does not train language models"),
])
def test_text_audit_refusals(corpus, tmp_path, overrides, message):
    from miaudit import audit

    with pytest.raises(ConfigError, match=message):
        audit(text_config(corpus, tmp_path, **overrides), show_progress=False)
    assert not (tmp_path / "runs").exists()  # refused before anything was written


def test_text_attacks_refused_on_class_data(tmp_path):
    from miaudit import audit

    with pytest.raises(ConfigError, match="'zlib' does not apply to class logits"):
        audit({"attacks": ["loss", "zlib"], "num_models": 2, "output_dir": str(tmp_path)},
              show_progress=False)


def test_score_accepts_token_logprobs_made_elsewhere(tmp_path):
    """`miaudit score` on an .npz of per-token log-probs: the text suite, texts for zlib,
    and the same scores as the attacks on the audit's own layout."""
    from typer.testing import CliRunner

    from miaudit.cli import app

    rng = np.random.default_rng(0)
    models, texts, tokens = 6, 200, 10
    keep = np.zeros((models, texts), dtype=bool)
    for i in range(texts):
        keep[rng.permutation(models)[:3], i] = True
    log_p = -rng.gamma(2.0, 1.0, (models, texts, tokens)) + 0.8 * keep[..., None]
    log_p = np.minimum(log_p, -1e-3)
    log_p[:, :50, 6:] = np.nan  # shorter texts
    words = [f"text {i} " + " ".join(rng.choice(WORDS, 3)) for i in range(texts)]
    bundle = tmp_path / "lm.npz"
    np.savez(bundle, keep=keep, token_logprobs=log_p, texts=np.array(words))
    out = tmp_path / "scored"
    result = CliRunner().invoke(app, ["score", str(bundle), "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "results.json").read_text())
    assert {"loss", "zlib", "min_k", "lira"} <= set(summary["attacks"])
    assert "min_k_pp" not in summary["attacks"]  # no token_mu / token_sigma given
    assert summary["attacks"]["loss"]["pooled"]["auc"] > 0.7
    assert summary["target_models"]["accuracy_kind"].startswith("not given")
    bad = tmp_path / "bad.npz"
    np.savez(bad, keep=keep, token_logprobs=-log_p)
    result = CliRunner().invoke(app, ["score", str(bad), "--out", str(tmp_path / "b")])
    assert result.exit_code == 2 and "natural" in result.output
    result = CliRunner().invoke(app, ["score", str(bundle), "--attacks", "watson",
                                      "--out", str(tmp_path / "c")])
    assert result.exit_code == 2 and "does not apply to text" in result.output


def test_checkpoint_content_enters_the_model_identity(tmp_path):
    from miaudit.auditor.components import build_recipe
    from miaudit.auditor.identity import code_digests
    from miaudit.config import ModelConfig, TrainConfig
    from miaudit.models.causal_lm import tiny_gpt2

    tiny_gpt2(257, 16, 1, 16, 2, 0.0).save_pretrained(tmp_path / "ckpt")
    model = ModelConfig(name="causal_lm", options={"checkpoint": str(tmp_path / "ckpt")})
    recipe = build_recipe(TrainConfig(recipe="lm"))
    first = code_digests("text", model.name, model.options, recipe)
    torch.manual_seed(1)
    tiny_gpt2(257, 16, 1, 16, 2, 0.0).save_pretrained(tmp_path / "ckpt")  # replaced in place
    assert code_digests("text", model.name, model.options, recipe) != first


def stand_in_checkpoint(folder, texts):
    """A local folder laid out like save_pretrained("gpt2") + its tokenizer, tiny: a BPE
    tokenizer (HF tokenizers) and a 1-layer GPT-2 with its vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from miaudit.models.causal_lm import tiny_gpt2

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, bos_token="<|endoftext|>",
                                        eos_token="<|endoftext|>")
    tokenizer.save_pretrained(folder)
    tiny_gpt2(len(tokenizer), 129, 1, 32, 2, 0.0).save_pretrained(folder)


def test_gpt2_lora_config_runs_with_a_local_checkpoint_and_its_tokenizer(tmp_path,
                                                                         monkeypatch):
    """examples/text/gpt2_lora.yaml as shipped, with a tiny stand-in for gpt2-local, on the
    CPU at a toy scale: the HF tokenizer folder, the checkpoint folder and LoRA through the
    whole audit."""
    from pathlib import Path

    from miaudit import audit
    from miaudit.config import load_config

    texts = sentences(60)
    monkeypatch.chdir(tmp_path)
    stand_in_checkpoint(tmp_path / "gpt2-local", texts)
    (tmp_path / "corpus.jsonl").write_text("\n".join(json.dumps({"text": t}) for t in texts))
    example = Path(__file__).resolve().parents[1] / "examples" / "text" / "gpt2_lora.yaml"
    cfg = load_config(example, {"device": "cpu", "num_models": 4, "data.pool_size": 40,
                                "train.epochs": 1, "output_dir": str(tmp_path / "runs"),
                                "threads": 1})
    results = audit(cfg, show_progress=False)
    assert set(results.summary.attacks) >= {"zlib", "min_k_pp", "ref_model", "lira"}
    state = next((results.run_dir / "models").glob("*/weights.safetensors"))
    from safetensors import safe_open

    with safe_open(str(state), framework="pt") as weights:
        assert any("lora_A" in key for key in weights.keys())
