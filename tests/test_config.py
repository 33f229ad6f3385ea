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
        ({"attacks": ["not_an_attack"]}, "attacks"),
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


def test_training_hash_ignores_attacks_but_not_training():
    base = validate_config({})
    assert base.training_hash() == validate_config({"attacks": ["loss"]}).training_hash()
    assert base.training_hash() != validate_config({"train": {"epochs": 2}}).training_hash()
    assert base.run_dir() != validate_config({"seed": 1}).run_dir()


def test_query_presets_expand():
    cfg = validate_config({"queries": ["augs18"]})
    assert len(cfg.queries) == 18 and "shift:dx=-1,dy=1,flip=True" in cfg.queries
