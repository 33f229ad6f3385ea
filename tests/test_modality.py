"""The kind of outputs as one object (miaudit.auditor.modality): each modality answers what
differs between class logits and a language model's per-token statistics, and its answers
match what the models and the statistics produce."""

import numpy as np
import torch

from miaudit import DATASETS, MODELS
from miaudit.auditor.modality import CLASSES, MODALITIES, TEXT, modality_of
from miaudit.data import make_pool
from miaudit.results.target_models import classifier_stats


def _text_pool(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"text number {i} with words" for i in range(12)))
    return make_pool(DATASETS.get("text")(data_dir=corpus, max_tokens=16), "all", None, 0)


def _class_pool():
    return make_pool(DATASETS.get("digits")(data_dir=None), "all", 40, 0)


def test_each_pool_has_its_modality_and_the_names_are_the_attacks_names(tmp_path):
    assert modality_of(_text_pool(tmp_path)) is TEXT and modality_of(_class_pool()) is CLASSES
    assert MODALITIES == {"classes": CLASSES, "text": TEXT}


def test_the_stored_width_is_what_the_models_output(tmp_path):
    for pool in (_text_pool(tmp_path), _class_pool()):
        torch.manual_seed(0)
        name = "causal_lm" if modality_of(pool) is TEXT else "small_cnn"
        options = {"dim": 16, "heads": 2, "layers": 1} if name == "causal_lm" else {}
        model = MODELS.get(name)(input_shape=pool.input_shape, num_classes=pool.num_classes,
                                 **options).eval()
        with torch.no_grad():
            outputs = modality_of(pool).stored(model(pool.x[:3]))
        assert outputs.shape == (3, modality_of(pool).output_width(pool)), name
        assert outputs.dtype == (torch.float16 if name == "causal_lm" else torch.float32)


def test_texts_and_classes_are_answered_by_the_modality(tmp_path):
    text_pool, class_pool = _text_pool(tmp_path), _class_pool()
    assert TEXT.texts(text_pool, np.array([2, 0])) == [text_pool.texts[2], text_pool.texts[0]]
    assert CLASSES.texts(class_pool, np.array([0])) is None
    assert CLASSES.has_classes and not TEXT.has_classes
    extras = TEXT.attack_extras(text_pool)
    assert extras["modality"] == "text" and extras["texts"] == list(text_pool.texts)
    assert CLASSES.attack_extras(class_pool) == {}


def test_class_statistics_carry_their_query_and_the_near_chance_caveat():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 100, 1, 10))  # random: chance accuracy
    labels, keep = rng.integers(0, 10, 100), rng.random((2, 100)) < 0.5
    audited = np.arange(100)
    stats = CLASSES.target_stats(logits, labels, keep, audited, [0, 1], 0, "identity")
    assert stats.accuracy_query == "identity"
    assert stats.test_accuracy == classifier_stats(logits, labels, keep, audited, [0, 1],
                                                   0).test_accuracy
    assert "learned (almost) nothing" in CLASSES.caveats(stats, logits)[0]
    assert TEXT.caveats(stats, logits) == []
