"""`miaudit plan` on an audit whose suite includes an attack that cannot score every count
(Shokri with folds: too few references leave no member/non-member contrast): exit 0, the
count listed as not scored, and the row at the audit's own number of references equal to the
audit's own table (issue 76: a traceback on the default suite; 0.510 against 0.5716)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import tiny_audit
from miaudit.auditor.stages import audit
from miaudit.cli import app
from miaudit.config import validate_config

ATTACKS = ["loss", "shokri:folds=2", "rmia", "lira", "lira:fixed_variance=true",
           "lira:offline=true"]


@pytest.fixture(scope="module")
def planned_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("plan")
    config = tiny_audit(tmp_path, num_models=8, attacks=ATTACKS,
                        train={"epochs": 20, "batch_size": 16, "lr": 0.2})
    config["data"]["options"]["separation"] = 0.2  # hard task: the models memorize
    results = audit(validate_config(config), show_progress=False)
    result = CliRunner().invoke(app, ["plan", str(results.run_dir)])
    return results, result


def test_plan_exits_zero_and_lists_what_it_could_not_score(planned_run):
    _, result = planned_run
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert "shokri:folds=2: enough references" in result.output
    assert "not scored (shokri: the references have no member/non-member" in result.output
    assert "enough references = None" not in result.output
    assert "reference-free (not planned): loss" in result.output


def test_row_at_the_audits_own_count_reproduces_its_table(planned_run):
    results, _ = planned_run
    summary = json.loads((results.run_dir / "results.json").read_text())
    planner = summary["reference_planner"]["attacks"]
    assert set(planner) == set(ATTACKS) - {"loss"}
    for label, rows in planner.items():
        pooled = summary["attacks"][label]["pooled"]
        assert rows["references_passed"][-1] == 7  # every model but the target
        assert rows["auc"][-1] == pooled["auc"], label
        for key in ("tpr@0.1%", "tpr@1%"):
            assert rows[key][-1] == pooled[key], (label, key)
            assert rows[f"{key}_ci"][-1] == pytest.approx(pooled[f"{key}_ci"]), (label, key)
    # Shokri's labels are the counts it trained on: with folds=2 the references outside the
    # target's fold (fold_training_models), not the 7 passed
    shokri = planner["shokri:folds=2"]
    assert shokri["references"][-1] < 7
    assert shokri["references"] == sorted(shokri["references"])
    assert all(isinstance(r["enough_references"], int) or r["how"] for r in planner.values())
