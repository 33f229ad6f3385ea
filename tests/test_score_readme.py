"""The README's `miaudit score --keep keep.npy --logits logits.npy --labels labels.npy --out
runs/scored` runs as written (issue 76: `error: attacks[10] needs population data`), and
bundles name their queries so accuracy is read on the identity query."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from miaudit.cli import app


def outputs(models: int = 8, samples: int = 120, queries: int = 1, classes: int = 4):
    rng = np.random.default_rng(0)
    keep = np.zeros((models, samples), dtype=bool)
    for pair in range(models // 2):  # complementary pairs: every sample IN for half
        half = rng.permutation(samples) < samples // 2
        keep[2 * pair], keep[2 * pair + 1] = half, ~half
    labels = rng.integers(0, classes, samples)
    logits = rng.normal(size=(models, samples, queries, classes)).astype(np.float32)
    logits[..., :][np.arange(models)[:, None], np.arange(samples)[None, :], :, labels] += 2.0
    return keep, logits, labels


def test_readme_score_example_runs_as_written(tmp_path, monkeypatch):
    keep, logits, labels = outputs()
    monkeypatch.chdir(tmp_path)
    np.save("keep.npy", keep)
    np.save("logits.npy", logits[:, :, 0])
    np.save("labels.npy", labels)
    result = CliRunner().invoke(app, ["score", "--keep", "keep.npy", "--logits", "logits.npy",
                                      "--labels", "labels.npy", "--out", "runs/scored"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if line.startswith("note: skipping")]
    assert len(notes) == 1 and "need population data" in notes[0], result.output
    summary = json.loads((tmp_path / "runs" / "scored" / "results.json").read_text())
    assert "lira" in summary["attacks"] and "rmia" not in summary["attacks"]
    assert "rmia, rmia:offline=true" in notes[0]


def test_bundle_names_its_queries_and_accuracy_reads_identity(tmp_path):
    keep, logits, labels = outputs(queries=2)
    logits[:, :, 0] = logits[:, :, 1]  # column 1 is the clean one, column 0 shifted noise
    logits[:, :, 0] += np.random.default_rng(1).normal(scale=5.0, size=logits[:, :, 0].shape)
    bundle = tmp_path / "out.npz"
    np.savez(bundle, keep=keep, logits=logits, labels=labels,
             queries=np.array(["shift:dx=1", "identity"]))
    result = CliRunner().invoke(app, ["score", str(bundle), "--attacks", "loss;lira",
                                      "--out", str(tmp_path / "scored")])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "scored" / "results.json").read_text())
    assert summary["queries"] == ["shift:dx=1", "identity"]
    models = summary["target_models"]
    assert models["accuracy_query"] == "identity" and "accuracy_note" not in models
    clean = (logits[:, :, 1].argmax(-1) == labels).mean()
    noisy = (logits[:, :, 0].argmax(-1) == labels).mean()
    assert abs(models["test_accuracy"] - clean) < 0.1 < abs(models["test_accuracy"] - noisy)


def test_query_names_option_names_stacked_logits(tmp_path):
    keep, logits, labels = outputs(queries=2)
    for name, array in (("keep", keep), ("logits", logits), ("labels", labels)):
        np.save(tmp_path / f"{name}.npy", array)
    result = CliRunner().invoke(app, [
        "score", "--keep", str(tmp_path / "keep.npy"), "--logits", str(tmp_path / "logits.npy"),
        "--labels", str(tmp_path / "labels.npy"), "--attacks", "loss",
        "--query-names", "identity;shift:dx=1", "--out", str(tmp_path / "scored")])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "scored" / "results.json").read_text())
    assert summary["target_models"]["accuracy_query"] == "identity"
    assert "which may be an augmentation" not in result.output
