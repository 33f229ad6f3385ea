"""The privacy gate (miaudit check, miaudit.testing.assert_leakage): hand-built results whose
numbers decide every bound, and every exit code."""

import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from miaudit.analysis.gate import BoundError, evaluate, junit_xml, parse_bound
from miaudit.cli import app
from miaudit.results import LAYOUT, Summary, write_results
from miaudit.testing import assert_leakage


def _attack(name, auc, auc_ci, tpr, tpr_ci, measurable=True):
    pooled = {"auc": auc, "auc_ci": auc_ci, "tpr@0.1%": tpr, "tpr@0.1%_ci": tpr_ci,
              "tpr@0.1%_measurable": measurable, "fpr@0.1%": 0.0, "n_members": 100}
    return {"attack": name, "options": {}, "pooled": pooled, "mean": {}, "std": {},
            "min": {}, "max": {}, "per_target": [], "per_class": {}}


RECORD = {
    "layout": LAYOUT, "name": "hand", "run_dir": ".", "protocol": "rotation", "targets": [0],
    "num_models": 4, "pool_size": 10, "audited_size": 10, "population_size": 0,
    "holdout_size": 0, "queries": ["identity"], "scores_dir": "scores",
    "target_models": {"train_accuracy": 1.0, "test_accuracy": 0.9, "generalization_gap": 0.1,
                      "train_accuracy_std": 0.0, "test_accuracy_std": 0.0},
    # lira: AUC 0.58 [0.55, 0.62], TPR@0.1% 0.4% [0.1%, 0.7%]; rmia below on both
    "attacks": {"lira:offline=true": _attack("lira", 0.58, [0.55, 0.62], 0.004, [0.001, 0.007]),
                "rmia": _attack("rmia", 0.52, [0.50, 0.54], 0.002, [0.0, 0.003])},
    "config": {},
}
SUMMARY = Summary.model_validate(RECORD)


@pytest.mark.parametrize("text,attack,metric,limit", [
    ("rmia:tpr@0.1%=0.5%", "rmia", "tpr@0.1%", 0.005),
    ("auc=0.60", None, "auc", 0.60),
    ("lira:offline=true:AUC=6e-1", "lira:offline=true", "auc", 0.6),
])
def test_parse_bound(text, attack, metric, limit):
    bound = parse_bound(text)
    assert (bound.attack, bound.metric) == (attack, metric)
    assert bound.limit == pytest.approx(limit)


@pytest.mark.parametrize("text", ["auc", "auc=", "auc=high", "auc=1.5", "auc=-0.1", ":auc=0.5",
                                  "=0.5", "tpr@0.1%=200%"])
def test_bad_expressions_are_refused(text):
    with pytest.raises(BoundError):
        parse_bound(text)


def test_upper_end_decides_by_default_and_point_on_request():
    # AUC 0.60: lira's estimate 0.58 is below, its upper end 0.62 above; rmia's 0.54 below
    upper = {c.attack: c.passed for c in evaluate(SUMMARY, ["auc=0.60"])}
    assert upper == {"lira:offline=true": False, "rmia": True}
    point = {c.attack: c.passed for c in evaluate(SUMMARY, ["auc=0.60"], use="point")}
    assert point == {"lira:offline=true": True, "rmia": True}
    (lira,) = evaluate(SUMMARY, ["lira:offline=true:tpr@0.1%=0.7%"])
    assert lira.passed and lira.compared == 0.007  # at the limit passes (<=)


def test_unknown_attack_metric_or_unmeasurable_level_is_a_bound_error():
    with pytest.raises(BoundError, match="no attack 'lira'"):
        evaluate(SUMMARY, ["lira:auc=0.6"])
    with pytest.raises(BoundError, match="no metric 'tpr@1%'"):
        evaluate(SUMMARY, ["tpr@1%=0.5"])
    record = {**RECORD, "attacks": {"rmia": _attack("rmia", 0.5, [0.4, 0.6], 0.0, [0.0, 0.0],
                                                    measurable=False)}}
    with pytest.raises(BoundError, match="cannot be measured"):
        evaluate(Summary.model_validate(record), ["tpr@0.1%=0.5"])


def test_junit_lists_one_case_per_check_and_fails_the_violated():
    root = ET.fromstring(junit_xml(evaluate(SUMMARY, ["auc=0.60", "rmia:tpr@0.1%=0.5%"]), "hand"))
    assert (root.get("tests"), root.get("failures")) == ("3", "1")
    failed = [case.get("name") for case in root if case.find("failure") is not None]
    assert failed == ["lira:offline=true auc <= 0.6"]


def test_assert_leakage():
    assert len(assert_leakage(SUMMARY, "auc=0.63", limits={"rmia:tpr@0.1%": 0.005})) == 3
    with pytest.raises(AssertionError, match=r"lira:offline=true auc = 0.58 \[95% CI 0.55"):
        assert_leakage(SUMMARY, "auc=0.60")
    with pytest.raises(BoundError):
        assert_leakage(SUMMARY, "auc=2")


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "scores").mkdir()
    write_results(tmp_path / "results.json", RECORD)
    return tmp_path


def test_check_exit_codes(run_dir, tmp_path):
    runner = CliRunner()
    passed = runner.invoke(app, ["check", str(run_dir), "--max", "auc=0.63"])
    assert passed.exit_code == 0, passed.output
    assert "privacy gate passed: 2" in passed.output
    report = tmp_path / "report.xml"
    failed = runner.invoke(app, ["check", str(run_dir), "--max", "auc=0.60", "--max",
                                 "rmia:tpr@0.1%=0.5%", "--junit", str(report)])
    assert failed.exit_code == 1
    assert "FAIL lira:offline=true auc = 0.58 [95% CI 0.55, 0.62]: upper end 0.62 > limit 0.6" \
        in failed.output
    assert ET.parse(report).getroot().get("failures") == "1"
    point = runner.invoke(app, ["check", str(run_dir / "results.json"), "--max", "auc=0.60",
                                "--use", "point"])
    assert point.exit_code == 0, point.output
    for bad in (["--max", "auc=x"], ["--max", "nope:auc=0.5"], ["--use", "mean", "--max",
                                                                "auc=0.5"], []):
        refused = runner.invoke(app, ["check", str(run_dir), *bad])
        assert refused.exit_code == 2, (bad, refused.output)
        assert refused.output.count("error:") == 1
    missing = runner.invoke(app, ["check", str(tmp_path / "absent"), "--max", "auc=0.5"])
    assert missing.exit_code == 2
