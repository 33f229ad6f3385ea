"""`miaudit score`: attacks over outputs made elsewhere give the audit's own numbers."""

import json

import numpy as np
from typer.testing import CliRunner

from conftest import tiny_audit
from miaudit.auditor import stages as pipeline
from miaudit.auditor.rundir import RunDir
from miaudit.cli import app
from miaudit.config import validate_config

ATTACKS = ["loss", "lira", "lira:offline=true"]


def _audit_and_outputs(tmp_path):
    cfg = validate_config(tiny_audit(tmp_path, attacks=ATTACKS,
                                     data={**tiny_audit(tmp_path)["data"],
                                           "population_size": 0}))
    results = pipeline.audit(cfg, show_progress=False)
    planned = pipeline.plan_audit(cfg)
    logits = pipeline.load_all_outputs(RunDir(planned.run_dir), planned)
    return results, logits, planned.plan.keep, planned.pool.y.numpy()


def _write_lira_layout(root, logits, keep, labels):
    root.mkdir()
    np.save(root / "y_train.npy", labels)
    for model, (row, outputs) in enumerate(zip(keep, logits)):
        folder = root / f"experiment-{model}_4"
        (folder / "logits").mkdir(parents=True)
        np.save(folder / "keep.npy", row)
        np.save(folder / "logits" / "0000000008.npy", outputs[:, None])  # (N, 1, Q, C)


def test_score_on_a_lira_layout_equals_the_audit(tmp_path):
    results, logits, keep, labels = _audit_and_outputs(tmp_path)
    _write_lira_layout(tmp_path / "exp", logits, keep, labels)
    out = tmp_path / "scored"
    result = CliRunner().invoke(app, ["score", str(tmp_path / "exp"), "--attacks",
                                      ";".join(ATTACKS), "--out", str(out)])
    assert result.exit_code == 0, result.output
    scored = json.loads((out / "results.json").read_text())
    for label in ATTACKS:
        assert scored["attacks"][label]["pooled"] == results.attacks[label].pooled
    assert scored["target_models"]["test_accuracy"] == \
        results.summary.target_models.test_accuracy
    report = CliRunner().invoke(app, ["report", str(out)])
    assert report.exit_code == 0 and "lira" in report.output


def test_score_from_stacked_arrays_and_clear_errors(tmp_path):
    _, logits, keep, labels = _audit_and_outputs(tmp_path)
    np.save(tmp_path / "keep.npy", keep)
    np.save(tmp_path / "logits.npy", logits)
    np.save(tmp_path / "labels.npy", labels)
    runner = CliRunner()
    args = ["score", "--keep", str(tmp_path / "keep.npy"), "--logits",
            str(tmp_path / "logits.npy"), "--labels", str(tmp_path / "labels.npy"),
            "--attacks", "loss;lira", "--out", str(tmp_path / "s")]
    assert runner.invoke(app, args).exit_code == 0
    bad = logits.copy()
    bad[1, 3, 0, 0] = np.nan
    np.save(tmp_path / "logits.npy", bad)
    result = runner.invoke(app, args[:-1] + [str(tmp_path / "s2")])
    assert result.exit_code == 2 and "NaN" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["score", "--attacks", "rmia", "--keep", str(tmp_path /
                                 "keep.npy"), "--logits", str(tmp_path / "keep.npy"),
                                 "--labels", str(tmp_path / "labels.npy")])
    assert result.exit_code == 2
