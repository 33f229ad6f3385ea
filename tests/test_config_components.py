"""Components parsed once at validation: typed specs, declared option-value checks, and the
config command refusing, without loading data, what the audit would refuse."""

import re

import pytest
import yaml

from miaudit.config import Component, ConfigError, validate_config

# (config, the option its one error line names): values each constructor refuses, which the
# config used to accept and the audit refused only after loading the data
BAD_OPTION_VALUES = [
    ({"model": {"name": "resnet14", "options": {"norm": "layer"}}}, "option 'norm'"),
    ({"model": {"name": "odenet", "options": {"solver": "midpoint"}}}, "option 'solver'"),
    ({"model": {"name": "anode", "options": {"augment_channels": 0}}}, "augment_channels"),
    ({"model": {"name": "sdenet", "options": {"k": 0.5, "sigma": 2.0}}}, "option 'sigma'"),
    ({"model": {"name": "snn_cnn", "options": {"T": 0}}}, "T \\(latency"),
    ({"model": {"name": "mlp", "options": {"hidden": [0]}}}, "option 'hidden'"),
    ({"data": {"name": "text", "data_dir": "corpus.txt", "options": {"format": "xml"}}},
     "format must be"),
    ({"data": {"name": "cifar100", "options": {"labels": "medium"}}}, "labels must be"),
    ({"data": {"name": "tabular", "options": {"path": "x.csv", "scale": "z"}}}, "scale must"),
    ({"data": {"name": "synthetic", "options": {"n_train": -1}}}, "n_train must"),
    ({"data": {"name": "imagefolder", "data_dir": ".", "options": {"color": "cmyk"}}},
     "color must"),
]


@pytest.mark.parametrize(("raw", "option"), BAD_OPTION_VALUES)
def test_config_without_check_refuses_bad_option_values_in_one_line(raw, option, tmp_path,
                                                                      monkeypatch):
    from typer.testing import CliRunner

    from miaudit.cli import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["config", "-c", "bad.yaml", "--no-check"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: invalid audit config: ")
    section = next(iter(raw))
    assert f"{section}: " in lines[0]
    assert re.search(option, lines[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]  # nothing written


@pytest.mark.parametrize(("name", "options"), [
    ("resnet14", {"norm": "layer"}), ("odenet", {"blocks": 4}), ("odenet64", {"T": 0.0}),
    ("sdenet", {"convention": "ito"}), ("snn_cnn", {"readout": "sum"}),
    ("mlp", {"dropout": 1.5}),
])
def test_the_config_and_the_constructor_refuse_a_value_with_one_message(name, options):
    from miaudit.models import build_model

    shape = (8,) if name == "mlp" else (1, 8, 8)
    with pytest.raises(ValueError) as built:
        build_model(name, input_shape=shape, num_classes=4, **options)
    with pytest.raises(ConfigError) as validated:
        validate_config({"model": {"name": name, "options": options}})
    assert str(built.value) in str(validated.value)


def test_valid_option_values_pass_the_declared_checks():
    for model in ({"name": "sdenet", "options": {"sigma": 2.0, "n_sde_blocks": 1}},
                  {"name": "anode", "options": {"augment_channels": 64, "norm": "group"}},
                  {"name": "snn_resnet18", "options": {"T": 2, "neuron": "lif"}},
                  {"name": "small_cnn", "options": {"dropout": 2}}):  # torch's check: audit
        validate_config({"model": model})


def test_specs_are_components_that_dump_as_written():
    raw = {"attacks": ["loss", {"name": "lira", "offline": True, "label": "LiRA-offline"},
                       "rmia:offline=true"],
           "train": {"penalties": ["demem:weight=0.2", {"name": "l2", "weight": 1e-4}]},
           "output_defense": "memguard", "data": {"holdout_size": 0.1}}
    cfg = validate_config(raw)
    lira = cfg.attacks[1]
    assert isinstance(lira, Component)
    assert (lira.name, lira.options, lira.label) == ("lira", {"offline": True}, "LiRA-offline")
    assert [a.label for a in cfg.attacks] == ["loss", "LiRA-offline", "rmia:offline=true"]
    demem = cfg.train.penalties[0]
    assert (demem.name, demem.options) == ("demem", {"weight": 0.2})
    assert cfg.output_defense.name == "memguard"
    dump = cfg.model_dump(mode="json")
    assert dump["attacks"] == raw["attacks"] and dump["train"]["penalties"] == \
        raw["train"]["penalties"] and dump["output_defense"] == "memguard"
    again = validate_config(yaml.safe_load(cfg.to_yaml()))
    assert again == cfg and again.model_dump(mode="json") == dump


def test_default_attacks_are_parsed_too():
    cfg = validate_config({})
    assert all(isinstance(a, Component) for a in cfg.attacks)
    assert cfg.attacks[2].name == "song_mittal" and cfg.attacks[2].options == {
        "signal": "confidence"}


def test_components_and_specs_do_not_import_the_config():
    """The config imports both; neither imports it back (no cycle, not even for types)."""
    import ast
    import importlib

    for module in ("miaudit.auditor.components", "miaudit.auditor.specs"):
        tree = ast.parse(open(importlib.import_module(module).__file__).read())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                     for alias in node.names}
        assert "miaudit.config" not in imported and "miaudit.auditor.stages" not in imported, module


def test_a_declared_check_sees_every_option_with_its_default():
    from miaudit.registry import Registry

    seen = {}
    registry = Registry("widget", {})

    def check(*, size, colour):
        seen.update(size=size, colour=colour)
        if colour not in ("red", "blue"):
            raise ValueError(f"colour must be red or blue, got {colour!r}")

    @registry.register("w", check=check)
    def widget(*, shape, size=1, colour="red"):
        return shape, size, colour

    registry.check_options("w", {"size": 3}, provided=("shape",))
    assert seen == {"size": 3, "colour": "red"}
    with pytest.raises(ConfigError, match=r"^widget 'w': colour must be red or blue, got 'x'$"):
        registry.check_options("w", {"colour": "x"}, provided=("shape",))


def test_attacks_must_derive_from_the_attack_base(monkeypatch):
    from miaudit.auditor.components import build_attack
    from miaudit.registry import ATTACKS

    monkeypatch.setitem(ATTACKS._entries, "duck", lambda: object())
    with pytest.raises(ConfigError, match=r"attacks\[0\] 'duck' built a object; it must derive "
                                          "from miaudit.attacks._base.Attack"):
        build_attack("duck", "attacks[0]")


def test_messages_show_a_configured_spec_as_written():
    import numpy as np

    from miaudit.auditor.stages.score import apply_output_defense

    cfg = validate_config({"output_defense": {"name": "memguard"},
                           "data": {"holdout_size": 0.1}})
    logits = np.zeros((1, 4, 2, 3), dtype=np.float32)
    keep = np.array([[True, True, False, False]])
    with pytest.raises(ConfigError, match=r"output defense \{'name': 'memguard'\} may change"):
        apply_output_defense(logits, cfg.output_defense, np.zeros(4, dtype=np.int64), keep,
                             np.zeros(0, dtype=np.int64), ["identity", "boundary:budget=10"])


def test_a_component_stands_for_its_spec_as_written():
    cfg = validate_config({"attacks": ["loss", "lira:offline=true", {"name": "rmia"}]})
    loss, lira, rmia = cfg.attacks
    assert loss == "loss" and "lira:offline=true" in cfg.attacks and rmia == {"name": "rmia"}
    assert {loss, lira} == {"loss", "lira:offline=true"} and str(lira) == "lira:offline=true"
    assert loss != "lira" and lira != {"name": "lira", "offline": True}
    with pytest.raises(TypeError):  # unhashable, as the dict it was written as
        hash(rmia)
