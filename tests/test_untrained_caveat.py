"""A model that learned nothing is flagged (issue 76: a CIFAR-10 audit at 3 epochs, 11.4%
train / 11.1% test accuracy, printed its leakage table as if meaningful)."""

from __future__ import annotations

import json

import pytest

from conftest import tiny_audit
from miaudit.auditor.stages import audit
from miaudit.config import validate_config
from miaudit.reporting.html import write_html_report
from miaudit.reporting.terminal import print_summary
from miaudit.results.target_models import untrained_caveat


@pytest.mark.parametrize(("train", "test", "classes", "flagged"), [
    (0.114, 0.111, 10, True),   # the CIFAR-10 run
    (0.30, 0.26, 4, True),      # 4 classes: chance 25%, within 5 points
    (0.98, 0.11, 10, False),    # memorized the training set: it learned something
    (0.40, 0.31, 4, False),
    (0.55, 0.52, 2, True),
])
def test_untrained_caveat_thresholds(train, test, classes, flagged):
    caveat = untrained_caveat({"train_accuracy": train, "test_accuracy": test}, classes)
    assert (caveat is not None) == flagged
    if flagged:
        assert f"chance {100 / classes:.1f}%" in caveat and "untrained model" in caveat


def test_an_audit_of_models_that_learned_nothing_says_so(tmp_path, capsys):
    config = tiny_audit(tmp_path, train={"epochs": 1, "batch_size": 32, "lr": 1e-7},
                        attacks=["loss"])
    results = audit(validate_config(config), show_progress=False)
    summary = json.loads((results.run_dir / "results.json").read_text())
    assert len(summary["caveats"]) == 1 and "learned (almost) nothing" in summary["caveats"][0]
    from rich.console import Console

    console = Console(width=200, record=True)
    print_summary(results.summary, console)
    assert "caveat: the target models learned (almost) nothing" in console.export_text()
    html = write_html_report(results.run_dir).read_text()
    assert 'class="caveat"' in html and "untrained model" in html


def test_a_trained_audit_has_no_caveat(tmp_path):
    results = audit(validate_config(tiny_audit(tmp_path, attacks=["loss"])),
                    show_progress=False)
    assert results.summary.caveats == []
