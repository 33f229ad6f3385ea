"""Label-only queries, QMIA and the reference planner through a real audit (tiny synthetic
models): what label-only MemGuard releases, what the attacks read, and `miaudit plan`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import tiny_audit
from miaudit.analysis.reference_planner import enough_references, nested_order, reference_counts
from miaudit.auditor.stages import audit
from miaudit.cli import app
from miaudit.config import validate_config

LABEL_ATTACKS = ["loss", "lira", "label_augmentation", "label_augmentation:calibrate=true",
                 "boundary_distance", "qmia"]


def label_config(tmp_path, **overrides):
    config = tiny_audit(tmp_path, queries=["identity", "label", "boundary:budget=100"],
                        attacks=LABEL_ATTACKS, num_models=8,
                        train={"epochs": 40, "batch_size": 16, "lr": 0.2, "weight_decay": 0.0})
    config["data"]["options"]["separation"] = 0.2  # hard task: models memorize
    config.update(overrides)
    return config


@pytest.fixture(scope="module")
def label_runs(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("label")
    plain = audit(validate_config(label_config(tmp_path)), show_progress=False)
    guarded = audit(validate_config(label_config(
        tmp_path, name="guarded", output_defense="memguard_label_only")), show_progress=False)
    return plain, guarded


def test_label_only_memguard_stops_score_attacks_not_label_attacks(label_runs):
    """Label-only MemGuard releases the label only: LOSS falls to chance-level ranking by
    correctness, while the label attacks, which read only labels and boundary distances,
    score exactly as on the undefended model (the defense keeps every label)."""
    plain, guarded = label_runs
    for name in ("label_augmentation", "boundary_distance", "label_augmentation:calibrate=true"):
        assert guarded.metric(name, "auc") == pytest.approx(plain.metric(name, "auc"))
    assert plain.metric("boundary_distance", "auc") > 0.6
    assert plain.metric("qmia", "auc") > 0.6
    assert guarded.metric("loss", "auc") < plain.metric("loss", "auc")


def test_plan_command_reports_the_curve(label_runs):
    plain, _ = label_runs
    result = CliRunner().invoke(app, ["plan", str(plain.run_dir)])
    assert result.exit_code == 0, result.output
    assert "lira: enough references" in result.output
    assert "reference-free (not planned): loss" in result.output
    summary = json.loads((plain.run_dir / "results.json").read_text())
    planner = summary["reference_planner"]
    assert planner["attacks"]["lira"]["references"] == [2, 4, 7]
    assert set(planner["attacks"]) == {"lira", "label_augmentation:calibrate=true"}
    assert len(planner["attacks"]["lira"]["tpr@0.1%_ci"]) == 3
    report = CliRunner().invoke(app, ["report", str(plain.run_dir), "--html"])
    assert report.exit_code == 0, report.output
    html = (plain.run_dir / "report.html").read_text()
    assert "How many reference models" in html and html.count("<svg") >= 2


def test_planner_pieces():
    assert reference_counts(63, 2) == [2, 4, 8, 16, 32, 63]
    assert reference_counts(64, 1) == [2, 4, 8, 16, 32, 64]
    # target 0 of 8: its partner 1 goes last; pairs (2,3), (4,5), (6,7) first
    np.testing.assert_array_equal(nested_order(np.arange(1, 8), lambda m: m // 2),
                                  [2, 3, 4, 5, 6, 7, 1])
    # steps 0.08, 0.04, 0.02 from counts 2, 4, 8 (halving per doubling), half-width 0.006: the
    # fit log d = log 0.16 - log2(k) log 2 falls below 0.006 once log2(k) > log2(0.16 / 0.006)
    # = 4.74, so from k = 2^5 = 32 (its doubling to 64 changes TPR by about 0.005)
    verdict = enough_references([2, 4, 8, 16], [0.10, 0.18, 0.22, 0.24], 0.006)
    assert verdict["how"] == "extrapolated" and verdict["references"] == 32
    # steps 0.08, 0.002, 0.002: from 4 on every measured doubling is below the half-width
    observed = enough_references([2, 4, 8, 16], [0.10, 0.18, 0.182, 0.184], 0.006)
    assert observed == {"references": 4, "how": "observed"}
    # a step below the half-width followed by a larger one is no evidence of saturation
    assert enough_references([2, 4, 8, 16], [0.10, 0.18, 0.182, 0.24], 0.006)["how"] != \
        "observed"
    assert enough_references([2, 4, 8], [0.1, 0.2, 0.4], 0.01)["references"] is None


def test_output_defenses_leave_boundary_distances_alone():
    """Label-only MemGuard keeps every label: it leaves the stored distances as they are and
    defends the score column; a defense that may change labels is refused with boundary
    queries (the distances would describe a model nobody queries)."""
    from miaudit.auditor.stages.score import apply_output_defense
    from miaudit.errors import ConfigError

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 6, 2, 3)).astype(np.float32)
    logits[:, :, 1] = np.eye(3, dtype=np.float32)[logits[:, :, 0].argmax(-1)] * 1.7
    keep = np.array([[True] * 3 + [False] * 3, [False] * 3 + [True] * 3])
    names = ["identity", "boundary:budget=10"]
    before = logits.copy()
    apply_output_defense(logits, "memguard_label_only", np.zeros(6, dtype=np.int64), keep,
                         np.zeros(0, dtype=np.int64), names)
    np.testing.assert_array_equal(logits[:, :, 1], before[:, :, 1])
    assert not np.allclose(logits[:, :, 0], before[:, :, 0])
    with pytest.raises(ConfigError, match="boundary queries"):
        apply_output_defense(before, "memguard", np.zeros(6, dtype=np.int64), keep,
                             np.zeros(0, dtype=np.int64), names)
