"""Bring your own: components by import path, entry-point plugins, a pre-trained target."""

import sys

import numpy as np
import pytest
import torch
import yaml

from conftest import REPO, tiny_audit
from miaudit import registry
from miaudit.auditor import modeljob
from miaudit.auditor import stages as pipeline
from miaudit.config import ConfigError, load_config, validate_config
from miaudit.registry import MODELS, parse_spec

EXAMPLE = REPO / "examples" / "byo"


def test_import_path_specs_parse_without_options():
    assert parse_spec("my_project:make_net") == ("my_project:make_net", {})
    assert parse_spec("lira:offline=true") == ("lira", {"offline": True})


def test_the_example_project_audits_by_import_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    raw = yaml.safe_load((EXAMPLE / "config.yaml").read_text())
    raw.update(num_models=4, output_dir=str(tmp_path), device="cpu", attacks=["loss", "lira"])
    raw["data"]["options"] = {"n": 200}
    raw["train"]["recipe_options"]["options"] = {"epochs": 5, "lr": 0.03}
    results = pipeline.audit(validate_config(raw), show_progress=False)
    assert results.summary.target_models.train_accuracy > 0.6
    assert 0 <= results.metric("lira", "auc") <= 1


def test_a_wrong_import_path_fails_naming_the_step(tmp_path):
    with pytest.raises(ConfigError, match="no_such_module"):
        validate_config({"model": {"name": "no_such_module:net"}})
    with pytest.raises(ConfigError, match="missing_function"):
        validate_config({"model": {"name": "miaudit.models.simple:missing_function"}})


def test_entry_point_plugins_register_entries(tmp_path, monkeypatch, request):
    (tmp_path / "my_plugin.py").write_text(
        "from torch import nn\nfrom miaudit.registry import MODELS\n\n"
        "@MODELS.register('plugin_net')\n"
        "def plugin_net(*, input_shape, num_classes, width=1.0):\n"
        "    '''A plugin model.'''\n"
        "    return nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes))\n")
    info = tmp_path / "my_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[miaudit.plugins]\nmy_plugin = my_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    # the plugin's registration is undone after the test: later tests see the built-ins only
    monkeypatch.setattr(MODELS, "_entries", dict(MODELS._entries))
    request.addfinalizer(lambda: sys.modules.pop("my_plugin", None))
    assert "plugin_net" in MODELS.names()
    assert load_config(overrides={"model.name": "plugin_net"}).model.name == "plugin_net"


def test_a_pretrained_target_is_audited_and_only_references_train(tmp_path, monkeypatch):
    base = tiny_audit(tmp_path, protocol="fixed_target", num_models=4)
    base["data"]["options"]["separation"] = 0.2  # a hard task: the target memorizes
    planned = pipeline.plan_audit(validate_config(base))
    pool = planned.pool
    members = np.sort(np.random.default_rng(0).choice(len(pool), len(pool) // 2, replace=False))
    torch.manual_seed(0)
    model = modeljob.build_registry_model(planned.cfg.model, pool)
    x, y = pool.x[torch.from_numpy(members)], pool.y[torch.from_numpy(members)]
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(300):  # the user's own training, outside miaudit
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    torch.save(model.state_dict(), tmp_path / "target.pt")
    np.save(tmp_path / "members.npy", members)
    trained = []
    real = modeljob.train_model
    monkeypatch.setattr(modeljob, "train_model", lambda job, *a, **k: (
        trained.append(job.index), real(job, *a, **k))[1])
    config = {**base, "target": {"weights": str(tmp_path / "target.pt"),
                                 "members": str(tmp_path / "members.npy")}}
    results = pipeline.audit(validate_config(config), show_progress=False)
    keep = np.load(results.run_dir / "keep.npy")
    assert np.array_equal(np.flatnonzero(keep[0]), members)
    assert trained == [0, 1, 2, 3, 4]  # model 0 is loaded by train_model, not trained
    record = yaml.safe_load((results.run_dir / "models" / "0000" / "model.json").read_text())
    assert record["recipe"] == "pretrained" and record["train_seconds"] == 0.0
    assert results.summary.target_models.train_accuracy > 0.9
    assert results.metric("loss", "auc") > 0.6  # the overfit target leaks


def test_pretrained_weights_that_do_not_fit_fail_clearly(tmp_path):
    torch.save({"wrong": torch.zeros(2)}, tmp_path / "bad.pt")
    np.save(tmp_path / "members.npy", np.arange(50))
    config = tiny_audit(tmp_path, protocol="fixed_target", num_models=2, attacks=["loss"],
                        target={"weights": str(tmp_path / "bad.pt"),
                                "members": str(tmp_path / "members.npy")})
    with pytest.raises(Exception, match="do not load into model 'mlp'"):
        pipeline.audit(validate_config(config), show_progress=False)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))


def test_a_registry_builds_the_entry_a_spec_names_as_a_config_reads_it():
    from miaudit import ATTACKS

    for spec in ("lira:offline=true,fixed_variance=true",
                 {"name": "lira", "offline": True, "fixed_variance": True}):
        attack = ATTACKS.build_spec(spec)
        assert type(attack).__name__ == "LiRA" and attack.offline and attack.fixed_variance
