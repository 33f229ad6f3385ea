"""The target models' statistics (miaudit.results.target_models): hand-worked calibration
error, the classifier statistics against a brute-force loop, and one declaration per
statistic reaching results.json, the Results API and the HTML report."""

import math

import numpy as np
import pytest

from miaudit.results.target_models import (
    CALIBRATION_BINS,
    TargetModels,
    calibration_error,
    classifier_stats,
    shown_rows,
)

LN3, LN9 = math.log(3), math.log(9)


def test_calibration_error_by_hand():
    # confidences 0.75, 0.75 (one right, one wrong) -> bin 12 of 15: |0.5 - 0.75| x 2/4;
    # 0.9, 0.9 (one right, one wrong) -> bin 14: |0.5 - 0.9| x 2/4; ECE = 0.125 + 0.2
    logits = np.array([[LN3, 0], [LN3, 0], [LN9, 0], [0, LN9]])
    labels = np.array([0, 1, 0, 0])
    assert calibration_error(logits, labels) == pytest.approx(0.325)
    # calibrated: confidence 0.75 and three of four right
    assert calibration_error(np.array([[LN3, 0]] * 4), np.array([0, 0, 0, 1])) == \
        pytest.approx(0.0)
    assert math.isnan(calibration_error(np.zeros((0, 2)), np.zeros(0, int)))


def _brute_force_ece(logits, labels, bins=CALIBRATION_BINS):
    total = 0.0
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    confidence, predicted = probabilities.max(-1), probabilities.argmax(-1)
    for b in range(bins):
        inside = [i for i, c in enumerate(confidence) if b / bins < c <= (b + 1) / bins]
        if inside:
            accuracy = np.mean([predicted[i] == labels[i] for i in inside])
            total += len(inside) / len(labels) * abs(accuracy - confidence[inside].mean())
    return total


def test_classifier_statistics_equal_a_brute_force_loop():
    rng = np.random.default_rng(0)
    models, samples, classes = 3, 200, 4
    logits = rng.normal(size=(models, samples, 1, classes)) * 2
    labels = rng.integers(0, classes, samples)
    keep = rng.random((models, samples)) < 0.5
    audited = np.arange(samples)[samples // 4:]  # a quarter of the pool is population
    stats = classifier_stats(logits, labels, keep, audited, [0, 2], column=0)
    in_audit = np.isin(np.arange(samples), audited)
    tests, eces = [], []
    for target in (0, 2):
        held_out = ~keep[target] & in_audit
        predicted = logits[target, :, 0].argmax(-1)
        tests.append(np.mean(predicted[held_out] == labels[held_out]))
        eces.append(_brute_force_ece(logits[target, held_out, 0], labels[held_out]))
    assert stats.test_accuracy == pytest.approx(np.mean(tests))
    assert stats.per_target_test == pytest.approx(tests)
    assert stats.test_calibration_error == pytest.approx(np.mean(eces))


def test_a_statistic_is_shown_under_its_title_only_when_the_run_has_it():
    base = dict(train_accuracy=0.9, test_accuracy=0.7, generalization_gap=0.2,
                train_accuracy_std=0.0, test_accuracy_std=0.0)
    assert shown_rows(TargetModels(**base)) == {}
    stats = TargetModels(**base).with_facts(train_seconds_mean=12.34,
                                            test_calibration_error=0.0512)
    assert shown_rows(stats) == {
        "expected calibration error (test, 15 bins)": "5.12%",
        "training time per target": "12.3 s"}
    assert "test_calibration_error" in stats and "train_natural_acc" not in stats


def test_an_audit_states_the_statistic_in_results_json_and_the_html_report(tmp_path):
    # one declaration (TargetModels' field) reaches results.json, Results and the report
    import json

    import yaml

    from conftest import tiny_audit
    from miaudit import Results, audit, load_config

    config = tmp_path / "audit.yaml"
    config.write_text(yaml.safe_dump(tiny_audit(tmp_path)))
    results = audit(load_config(config), show_progress=False)
    written = json.loads((results.run_dir / "results.json").read_text())["target_models"]
    loaded = Results.load(results.run_dir).summary.target_models
    assert 0 <= written["test_calibration_error"] <= 1
    assert loaded.test_calibration_error == written["test_calibration_error"]
    html = (results.run_dir / "report.html").read_text()
    assert "expected calibration error (test, 15 bins)" in html
    assert f"{100 * loaded.test_calibration_error:.2f}%" in html
