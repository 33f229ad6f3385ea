import pytest

from miaudit.config import ConfigError, load_config, validate_config


def test_the_embedded_default_is_valid():
    cfg = load_config()
    assert cfg.data.name == "digits" and cfg.num_models == 16


def test_overrides_reach_nested_fields():
    cfg = load_config(overrides={"train.epochs": 3, "model.width": 0.5})
    assert cfg.train.epochs == 3 and cfg.model.width == 0.5


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"trian": {}}, "trian"),
        ({"train": {"epochs": 0}}, "train.epochs"),
        ({"train": {"optimizer": "rmsprop"}}, "train.optimizer"),
        ({"model": {"name": "no_such_model"}}, "model.name"),
        ({"data": {"name": "mnist9"}}, "data.name"),
        ({"attacks": ["not_an_attack"]}, "attack .not_an_attack."),
        ({"num_models": 5}, "even"),
        ({"queries": ["spin:deg=3"]}, "queries"),
        ({"device": "tpu"}, "device"),
        ({"reference_model": {"name": "mlp"}}, "fixed_target"),
    ],
)
def test_bad_configs_fail_naming_the_field(raw, field):
    with pytest.raises(ConfigError, match=field):
        validate_config(raw)


def test_unknown_model_error_lists_valid_names():
    with pytest.raises(ConfigError, match="small_cnn"):
        validate_config({"model": {"name": "resnet9000"}})


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"attacks": ["lira:ofline=true"]}, "valid options: .*offline"),
        ({"attacks": ["rmia:gamma=-1"]}, "gamma"),
        ({"train": {"penalties": ["l1:weight=abc"]}}, "penalties"),
        ({"queries": ["shift:dx=abc"]}, "dx"),
        ({"model": {"name": "mlp", "options": {"hiden": [8]}}}, "hidden"),
        ({"train": {"recipe": "dpsgd", "recipe_options": {"epsilon": 8}}}, "target_epsilon"),
        ({"train": {"recipe": "early_stopping"}}, "holdout_size"),
        ({"protocol": "fixed_target", "num_targets": 1}, "rotation only"),
        ({"seed": -1}, "seed"),
        ({"train": {"lr": float("inf")}}, "train.lr"),
        ({"model": {"width": float("inf")}}, "model.width"),
        ({"device": "cuda:abc"}, "device"),
    ],
)
def test_component_options_fail_before_training(raw, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(raw)


def test_defaults_are_one_definition():
    from miaudit.training import TrainParams

    assert validate_config({}) == load_config()
    assert validate_config({}).train.params() == TrainParams()


def test_run_name_is_derived_from_what_changed():
    assert validate_config({}).run_name() == "digits-small_cnn"
    assert validate_config({"data": {"name": "synthetic"}, "model": {"name": "mlp"}}) \
        .run_name() == "synthetic-mlp"
    assert validate_config({"name": "mine"}).run_name() == "mine"


def test_query_presets_expand():
    cfg = validate_config({"queries": ["augs18"]})
    assert len(cfg.queries) == 18 and "shift:dx=-1,dy=1,flip=True" in cfg.queries


def test_a_dumped_config_loads_back_unchanged():
    cfg = validate_config({"train": {"penalties": ["l1:weight=1e-5"]}})
    assert validate_config(cfg.model_dump(mode="json")) == cfg


def test_fields_added_with_a_neutral_default_do_not_change_identities():
    train = validate_config({}).train
    assert "ensemble" not in train.identity_dump() and "precision" not in train.identity_dump()
    assert validate_config({"train": {"ensemble": 4}}).train.identity_dump()["ensemble"] == 4


def test_registry_create_is_the_one_value_error_translation():
    from miaudit.registry import Registry

    registry = Registry("widget", {})

    @registry.register("picky")
    def picky(size: int = 1):
        if size < 0:
            raise ValueError(f"size must be >= 0, got {size}")
        if size > 10:
            raise TypeError("too big")
        return size

    assert registry.create("picky", {"size": 3}, where="w") == 3
    with pytest.raises(ConfigError, match=r"^widgets\[0\]: size must be >= 0, got -1$"):
        registry.create("picky", {"size": -1}, where="widgets[0]")
    with pytest.raises(TypeError):  # not an option-value error unless the caller says so
        registry.create("picky", {"size": 11}, where="w")
    with pytest.raises(ConfigError, match="too big"):
        registry.create("picky", {"size": 11}, where="w", errors=(ValueError, TypeError))


def test_an_output_defense_must_derive_from_the_base_class(monkeypatch):
    from miaudit.auditor.components import build_output_defense
    from miaudit.registry import OUTPUT_DEFENSES

    monkeypatch.setitem(OUTPUT_DEFENSES._entries, "duck", lambda: object())
    with pytest.raises(ConfigError, match="must derive from"):
        build_output_defense("duck")
    assert build_output_defense("memguard").needs_holdout is True
    assert build_output_defense("memguard_label_only").needs_holdout is False


def test_the_config_command_refuses_what_the_audit_would(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from miaudit.cli import app

    monkeypatch.chdir(tmp_path)
    bad = ["config", "--set", "model.options.dropout=2"]
    refused = CliRunner().invoke(app, bad)
    assert refused.exit_code == 2
    assert "dropout probability has to be between 0 and 1" in refused.output
    assert CliRunner().invoke(app, [*bad, "--no-check"]).exit_code == 0
    assert list(tmp_path.iterdir()) == []  # the check writes nothing
