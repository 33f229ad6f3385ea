"""What a user meets at the command line (issue 76): --version, `miaudit attacks NAME`,
close-match suggestions, the ';' hint, one line on Ctrl-C, the report named at the end,
``results.summary`` as a mapping."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from typer.testing import CliRunner

from conftest import REPO, sigint_as_a_terminal_sends_it, tiny_audit
from miaudit.cli import app
from miaudit.version import __version__


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def test_version():
    result = run("--version")
    assert result.exit_code == 0 and result.output.strip() == f"miaudit {__version__}"


def test_attacks_name_describes_options_paper_and_needs():
    result = run("attacks", "lira")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Carlini et al. 2022" in out  # the paper
    assert "offline: bool = False" in out and "center: str = 'median'" in out
    assert "reference models: at least 2" in out
    rmia = run("attacks", "rmia").output
    assert "population data (data.population_size): yes" in rmia
    label = run("attacks", "label_augmentation").output
    assert "every 'label' query (label-only)" in label


def test_misspelled_attack_and_config_key_get_a_suggestion(tmp_path):
    out = str(tmp_path / "runs")
    result = run("attacks", "lirra")
    assert result.exit_code == 2 and "did you mean 'lira'?" in result.output
    result = run("audit", "--attacks", "lira,rmia", "--output-dir", out)
    assert result.exit_code == 2 and "separated by ';', not ','" in result.output
    assert "'lira;rmia'" in result.output
    result = run("audit", "--set", "train.epoch=3", "--output-dir", out)
    assert result.exit_code == 2 and "train.epoch" in result.output
    assert "did you mean 'epochs'?" in result.output
    assert not Path(out).exists()


def test_ctrl_c_prints_one_line_and_exits_130(tmp_path):
    config = tiny_audit(tmp_path, train={"epochs": 100000, "batch_size": 32, "lr": 0.01})
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    process = subprocess.Popen([sys.executable, "-m", "miaudit.cli", "audit", "--config",
                                str(path), "--quiet"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=sigint_as_a_terminal_sends_it)
    runs = tmp_path / "runs"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(runs.glob("*/manifest.json")):
        time.sleep(0.5)  # training has begun once the run directory exists
    time.sleep(1.0)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    # 130, or ended by the SIGINT itself (Python re-raises it at exit when the interrupt went
    # through C code): a shell reports both as $? = 130
    assert process.returncode in (130, -signal.SIGINT), (process.returncode, err)
    assert err.strip().splitlines()[-1] == "interrupted: rerun the same command to resume"
    assert "Traceback" not in err


def test_summary_reads_as_a_mapping_and_the_audit_names_its_report(tmp_path):
    config = tiny_audit(tmp_path, attacks=["loss"])
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run("audit", "--config", str(path), "--quiet")
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.strip().startswith("HTML report:") and last.strip().endswith("report.html")
    from miaudit.results import load_summary

    run_dir = Path(last.split("HTML report:")[1].strip()).parent
    summary = load_summary(run_dir)
    assert "attacks" in summary.keys() and "attacks" in summary
    assert summary["attacks"] is summary.attacks and summary.get("nope", 1) == 1
    assert dict(summary.items())["name"] == summary.name


def test_compare_prints_full_attack_labels_and_auc_in_percent(tmp_path):
    from miaudit.auditor.stages import audit
    from miaudit.config import validate_config

    attacks = ["lira:fixed_variance=true", "loss"]
    runs = [audit(validate_config(tiny_audit(tmp_path, attacks=attacks, **extra)),
                  show_progress=False).run_dir
            for extra in ({}, {"train": {"epochs": 2, "batch_size": 32, "lr": 0.1}})]
    result = CliRunner().invoke(app, ["compare", *map(str, runs)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "…" not in result.output  # labels folded onto more lines, never cut
    squeezed = "".join(result.output.replace("│", "").replace("┃", "").split())
    assert "lira:fixed_variance=true" in squeezed
    from miaudit.reporting.compare import comparison, load_views

    table = comparison(load_views(runs))
    auc = table.rows[0][table.header.index("loss AUC")]
    assert 20 < float(auc) <= 100  # percent, not a fraction


def test_warnings_are_one_line_and_library_internals_are_filtered(capsys, monkeypatch):
    from miaudit.cli.usage import PACKAGE, one_line_warning

    monkeypatch.delenv("MIAUDIT_WARNINGS", raising=False)
    one_line_warning(UserWarning("weights file\n  damaged: retraining"), UserWarning,
                     f"{PACKAGE}/training/checkpoint.py", 10)
    one_line_warning(UserWarning("Secure RNG turned off"), UserWarning,
                     "/usr/lib/python3/site-packages/opacus/privacy_engine.py", 98)
    assert capsys.readouterr().err == "warning: weights file damaged: retraining\n"
    monkeypatch.setenv("MIAUDIT_WARNINGS", "all")
    one_line_warning(UserWarning("Secure RNG turned off"), UserWarning,
                     "/usr/lib/python3/site-packages/opacus/privacy_engine.py", 98)
    assert capsys.readouterr().err == "warning: Secure RNG turned off (privacy_engine.py:98)\n"


def test_executor_flag_takes_its_options_with_set():
    """`--executor processes --set executor.workers=2`, as the flag's help writes it."""
    from miaudit.cli import commands
    from miaudit.config import load_config

    overrides = commands._overrides({"executor": "processes"}, ["executor.workers=2"], None,
                                    None)
    cfg = load_config(overrides=overrides)
    assert cfg.executor.name == "processes" and cfg.executor.workers == 2
