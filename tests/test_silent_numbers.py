"""Numbers that were wrong without a word (issue 22): each test reproduces one and checks
the number against an independent computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import tiny_audit
from miaudit import pipeline
from miaudit.config import validate_config
from miaudit.queries import clean_column, stored_queries


def _image_audit(tmp_path, queries):
    return tiny_audit(tmp_path, data={"name": "synthetic", "options": {
        "n_train": 120, "n_test": 40, "shape": [1, 6, 6], "num_classes": 4,
        "separation": 0.3}}, queries=queries, attacks=["loss"], train={
        "epochs": 6, "batch_size": 32, "lr": 0.1})


def _clean_accuracy(planned, run_dir):
    """Train/test accuracy of every target, evaluated here on the clean inputs."""
    run = pipeline.RunDir(run_dir)
    train, test = [], []
    audited = np.zeros(len(planned.pool.y), dtype=bool)
    audited[planned.plan.split.audited] = True
    for target in planned.plan.targets:
        model = pipeline.load_trained(run, planned.jobs[target], planned.pool, torch.device("cpu"))
        with torch.no_grad():
            correct = (model(planned.pool.x).argmax(-1) == planned.pool.y).numpy()
        member = planned.plan.keep[target]
        train.append(correct[member].mean())
        test.append(correct[~member & audited].mean())
    return float(np.mean(train)), float(np.mean(test))


def test_clean_query_is_found_in_presets_and_spellings():
    assert clean_column(["shift:dx=-1,dy=-1,flip=False", "shift:dx=0,dy=0,flip=False"]) == 1
    assert clean_column(["flip", "identity"]) == 1
    assert clean_column(["shift:dx=0,dy=0,flip=True", "dropout:p=0.1,n=2", "query0"]) is None
    assert stored_queries(["flip"]) == ["flip", "identity"]
    assert stored_queries(["shift:dx=0", "flip"]) == ["shift:dx=0", "flip"]


@pytest.mark.parametrize("queries", [["shift:dx=-1,dy=-1", "shift:dx=0,dy=0", "flip"],
                                     ["flip", "shift:dx=1"]])
def test_accuracy_comes_from_clean_inputs_whatever_the_queries(tmp_path, queries):
    """Before: accuracy and gap were read from query column 0 (here a shift or a flip)."""
    config = validate_config(_image_audit(tmp_path, queries))
    results = pipeline.audit(config, show_progress=False)
    planned = pipeline.plan_audit(config)
    train, test = _clean_accuracy(planned, results.run_dir)
    stats = results.summary["target_models"]
    assert stats["train_accuracy"] == pytest.approx(train, abs=1e-9)
    assert stats["test_accuracy"] == pytest.approx(test, abs=1e-9)
    assert stats["accuracy_query"] in ("shift:dx=0,dy=0", "identity")
    assert results.summary["queries"] == queries  # the extra clean query is not attacked


def test_attack_labels_that_share_a_scores_file_are_refused_by_score(tmp_path):
    """Before: "x y" and "x_y" both wrote x_y.npy; results.json said one AUC while the stored
    scores (and the report built from them) were the other attack's."""
    from miaudit.errors import ConfigError
    from miaudit.external import validate_outputs
    from miaudit.scoring import score_outputs

    rng = np.random.default_rng(0)
    keep = np.arange(6)[:, None] % 2 == np.arange(20)[None] % 2
    outputs = validate_outputs(keep, rng.normal(size=(6, 20, 1, 3)), rng.integers(0, 3, 20),
                               sources=dict.fromkeys(("keep", "logits", "labels"), "x"))
    specs = [{"name": "lira", "label": "x y"}, {"name": "loss", "label": "X_y"}]
    with pytest.raises(ConfigError, match="both save their scores as X_y.npy"):
        score_outputs(outputs, specs, tmp_path / "scored")
    assert not (tmp_path / "scored").exists()


@pytest.mark.parametrize("damage", ["edit", "truncate"])
def test_an_edited_or_truncated_robust_evaluation_record_is_recomputed(tmp_path, damage):
    """Before: 0.1 -> 0.2 in models/0001/eval/<key>.json was reported as 0.2 with rc 0."""
    import json

    config = validate_config(tiny_audit(tmp_path, attacks=["loss"], robust_eval={
        "eps": 0.3, "step": 0.1, "steps": 2, "max_samples": 20}))
    first = pipeline.audit(config, show_progress=False).summary["target_models"]
    run_dir = pipeline.plan_audit(config).run_dir
    (record,) = run_dir.glob("models/0001/eval/*.json")
    value = json.loads(record.read_text())
    if damage == "edit":
        value["robust"]["test"]["natural_acc"] = 0.123456
        record.write_text(json.dumps(value))
    else:
        record.write_text(record.read_text()[:40])
    with pytest.warns(RuntimeWarning, match=f"{record.name}.*recomputing"):
        again = pipeline.audit(config, show_progress=False).summary["target_models"]
    assert again["test_natural_acc_per_target"] == first["test_natural_acc_per_target"]
    assert pipeline.RunDir(run_dir).eval_record(1, record.stem) is not None  # rewritten intact
