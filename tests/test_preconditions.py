"""Everything knowable before training is checked before training (issue 76): an attack's
query kinds, the queries it names, list-valued options written in the spec string; errors name
the attack by its label."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from conftest import tiny_audit
from miaudit.cli import app
from miaudit.config import build_attack, validate_config
from miaudit.errors import ConfigError
from miaudit.registry import parse_spec


def test_list_options_parse_from_the_spec_string():
    assert parse_spec("qmia:queries=[identity]") == ("qmia", {"queries": ["identity"]})
    assert parse_spec("qmia:queries=[identity,shift:dx=1],alpha=0.01") == (
        "qmia", {"queries": ["identity", "shift:dx=1"], "alpha": 0.01})
    assert parse_spec("lira:offline=true,fixed_variance=true") == (
        "lira", {"offline": True, "fixed_variance": True})
    assert parse_spec("x:v=[1, 2]") == ("x", {"v": [1, 2]})
    assert build_attack("qmia:queries=[identity]").queries == ["identity"]


@pytest.mark.parametrize(("attacks", "expected"), [
    (["qmia", "label_augmentation", "lira"],
     "attack 'label_augmentation': label_augmentation needs 'label' queries"),
    (["boundary_distance"], "add e.g. boundary:budget=1000 to queries"),
    (["lira:queries=[identity,shift:dx=2]"], "reads queries ['shift:dx=2']"),
])
def test_missing_queries_stop_the_config_naming_the_attack(tmp_path, attacks, expected):
    config = tiny_audit(tmp_path, attacks=attacks, num_models=4)
    with pytest.raises((ConfigError, ValueError)) as error:
        validate_config(config)
    assert expected in str(error.value)
    assert "attacks[" not in str(error.value)


def test_named_queries_that_exist_pass(tmp_path):
    config = tiny_audit(tmp_path, attacks=["qmia:queries=[identity]", "lira"])
    assert validate_config(config).attacks[0] == "qmia:queries=[identity]"


def test_cli_exits_2_before_training(tmp_path):
    """The issue's case: label_augmentation without label queries used to train every model
    and then fail at the score stage with a traceback."""
    result = CliRunner().invoke(app, ["audit", "--attacks", "qmia;label_augmentation;lira",
                                      "--output-dir", str(tmp_path / "runs")])
    assert result.exit_code == 2, result.output
    assert "label_augmentation" in result.output and "labels18" in result.output
    assert not (tmp_path / "runs").exists()  # nothing trained, nothing written
