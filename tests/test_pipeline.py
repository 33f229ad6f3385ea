"""End-to-end audits on tiny synthetic configs: artefacts, resume, config identity, CLI."""

import json
import os

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from conftest import tiny_audit
from miaudit._runtime import allocator
from miaudit._runtime.machine import bf16_kernels, native_bf16
from miaudit.auditor import modeljob
from miaudit.auditor import stages as pipeline
from miaudit.auditor.stages import audit
from miaudit.auditor.stages import query as stage_query
from miaudit.cli import app
from miaudit.config import load_config, validate_config


def _quiet(config):
    return audit(validate_config(config), show_progress=False)


def _scores(results, label):
    return np.load(results.run_dir / results.summary.scores_dir / f"{label}.npy")


def test_audit_writes_a_complete_run_directory(tmp_path):
    results = _quiet(tiny_audit(tmp_path))
    root = results.run_dir
    for name in ("manifest.json", "keep.npy", "split.npz", "results.json", "roc.png"):
        assert (root / name).exists(), name
    assert sorted(p.name for p in (root / "models").iterdir()) == ["0000", "0001", "0002", "0003"]
    split = np.load(root / "split.npz")
    assert len(split["audited"]) == 180 and len(split["population"]) == 20
    assert _scores(results, "lira").shape == (4, 180)
    assert len(list(root.glob("scores-*"))) == 1
    summary = json.loads((root / "results.json").read_text())
    assert set(summary["attacks"]) == {"loss", "lira", "lira:offline=true"}
    for attack in summary["attacks"].values():
        assert 0.0 <= attack["pooled"]["auc"] <= 1.0 and len(attack["per_target"]) == 4
    # issue 23: the crossed bootstrap is tpr@X_ci (and auc_ci); Clopper-Pearson is kept as
    # tpr@X_ci_conditional; the strongest attack's band is simultaneous over all attacks
    pooled = summary["attacks"]["lira"]["pooled"]
    assert "two-way (crossed) bootstrap" in pooled["ci_method"]
    assert "conditional on these trained models" in pooled["ci_conditional_method"]
    for key in ("tpr@1%", "auc", "balanced_accuracy"):
        low, high = pooled[f"{key}_ci"]
        assert low <= pooled[key] <= high, key
    assert pooled["tpr@1%_ci_conditional"] != pooled["tpr@1%_ci"]
    for key in ("tpr@1%", "auc"):
        band, marginal = pooled[f"{key}_ci_simultaneous"], pooled[f"{key}_ci"]
        assert band[0] <= marginal[0] and band[1] >= marginal[1]
    # 360 pooled non-members: 0.001% and 0.1% are below 1/360, not measurable: None
    assert pooled["tpr@0.1%_measurable"] is False
    assert results.metric("lira", "tpr@0.1%") is None
    assert results.metric("lira", "tpr@1%") == pooled["tpr@1%"]
    stats = summary["target_models"]
    assert stats["generalization_gap"] == pytest.approx(
        stats["train_accuracy"] - stats["test_accuracy"])
    # the seconds say where they were measured: this machine's CPUs, instruction set, and
    # whether bf16 had kernels on the training device
    assert summary["timing"]["machine"] == {
        "cpus": os.cpu_count(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "bf16_kernels": native_bf16(torch.device("cpu")), "gpu": None,
        "freed_memory_kept": allocator.runs_on_glibc()}
    assert results.summary.timing.machine.text().startswith(f"{os.cpu_count()} CPUs ")
    # and each model's record says where its train_seconds were measured (models are reused
    # across runs and machines)
    record = json.loads((root / "models" / "0000" / "model.json").read_text())
    assert record["machine"] == summary["timing"]["machine"] and record["train_seconds"] > 0


def test_members_are_detected_on_an_overfit_model_family(tmp_path):
    config = tiny_audit(tmp_path, train={"epochs": 60, "batch_size": 16, "lr": 0.2,
                                         "weight_decay": 0.0})
    config["data"]["options"]["separation"] = 0.2  # hard task: models memorize
    results = _quiet(config)
    assert results.summary.target_models.generalization_gap > 0.2
    assert results.metric("loss", "auc") > 0.6
    assert results.metric("lira", "auc") > 0.6


def test_interrupted_run_resumes_without_retraining_and_gives_identical_results(
        tmp_path, monkeypatch):
    reference = _quiet(tiny_audit(tmp_path / "clean"))
    config = tiny_audit(tmp_path / "killed")
    trained = _count_training(monkeypatch, die_at=2)
    with pytest.raises(KeyboardInterrupt):
        _quiet(config)
    assert trained == [0, 1]
    root = pipeline.plan_audit(validate_config(config)).run_dir
    first_weights = (root / "models" / "0000" / "weights.safetensors").stat().st_mtime_ns

    trained.clear()
    monkeypatch.undo()
    trained = _count_training(monkeypatch)
    resumed = _quiet(config)
    assert trained == [2, 3]
    assert (root / "models" / "0000" / "weights.safetensors").stat().st_mtime_ns == first_weights
    for label in ("loss", "lira"):
        assert resumed.attacks[label].pooled == reference.attacks[label].pooled
    assert np.array_equal(_scores(resumed, "lira"), _scores(reference, "lira"))


def _count_training(monkeypatch, die_at=None):
    """Record which models train (and simulate a kill at model ``die_at``)."""
    real, trained = modeljob.train_model, []

    def counting(job, *args, **kwargs):
        if job.index == die_at:
            raise KeyboardInterrupt("simulated kill")
        trained.append(job.index)
        return real(job, *args, **kwargs)

    monkeypatch.setattr(modeljob, "train_model", counting)
    return trained


def _count_queries(monkeypatch, die_at=None):
    """Record which queries run (and simulate a kill at call number ``die_at``)."""
    real, queried = stage_query.query_outputs, []

    def counting(model, x, specs, *args, **kwargs):
        if len(queried) == die_at:
            raise KeyboardInterrupt("simulated kill")
        queried.append(tuple(specs))
        return real(model, x, specs, *args, **kwargs)

    monkeypatch.setattr(stage_query, "query_outputs", counting)
    return queried


def test_adding_a_query_trains_nothing_and_queries_every_model_once(tmp_path, monkeypatch):
    first = _quiet(tiny_audit(tmp_path, share_models=False))
    trained, queried = _count_training(monkeypatch), _count_queries(monkeypatch)
    config = tiny_audit(tmp_path, share_models=False,
                        queries=["identity", "dropout:p=0.1,n=2"])
    grown = _quiet(config)
    assert grown.run_dir == first.run_dir
    assert trained == [] and queried == [("dropout:p=0.1,n=2",)] * 4
    assert grown.summary.queries == ["identity", "dropout:p=0.1,n=2"]


def test_a_draw_stream_is_one_job_per_model_and_resumes_to_the_same_bytes(tmp_path,
                                                                          monkeypatch):
    """Dropout queries that differ only in n run as one job per model (the largest count's
    passes serve both), and a stage that lost one of them recomputes it byte for byte."""
    streams = ["identity", "dropout:p=0.1,n=2", "dropout:p=0.1,n=3"]
    queried = _count_queries(monkeypatch)
    both = _quiet(tiny_audit(tmp_path / "both", share_models=False, queries=streams))
    assert sorted(queried) == [("dropout:p=0.1,n=2", "dropout:p=0.1,n=3")] * 4 + \
        [("identity",)] * 4
    alone = _quiet(tiny_audit(tmp_path / "alone", share_models=False, queries=streams[:2]))
    outputs = sorted((both.run_dir / "models/0000/outputs").glob("*.safetensors"))
    assert len(outputs) == 3
    twins = {p.name: p.read_bytes() for p in (alone.run_dir / "models/0000/outputs").glob("*")}
    shared = [p for p in outputs if p.name in twins]
    assert len(shared) == 2 and all(p.read_bytes() == twins[p.name] for p in shared)
    lost = next(p for p in outputs if p.name not in twins)
    kept_bytes = lost.read_bytes()
    lost.unlink()
    lost.with_suffix(".json").unlink()  # killed before either file was written
    queried.clear()
    _quiet(tiny_audit(tmp_path / "both", share_models=False, queries=streams))
    assert queried == [("dropout:p=0.1,n=3",)] and lost.read_bytes() == kept_bytes


def test_a_killed_query_stage_resumes_per_model_and_spec(tmp_path, monkeypatch):
    """Each (model, spec) output is written as its job finishes: a kill in the query stage
    loses only the query in flight, and the resumed audit equals one never interrupted."""
    queries = ["identity", "dropout:p=0.1,n=2"]
    reference = _quiet(tiny_audit(tmp_path / "clean", share_models=False, queries=queries))
    config = tiny_audit(tmp_path / "killed", share_models=False, queries=queries)
    queried = _count_queries(monkeypatch, die_at=5)
    with pytest.raises(KeyboardInterrupt):
        _quiet(config)
    assert len(queried) == 5
    monkeypatch.undo()
    trained, queried = _count_training(monkeypatch), _count_queries(monkeypatch)
    resumed = _quiet(config)
    assert trained == [] and len(queried) == 3  # 4 models x 2 specs, 5 were written
    for label in ("loss", "lira"):
        assert resumed.attacks[label].pooled == reference.attacks[label].pooled


def test_raising_num_models_trains_only_the_new_models(tmp_path, monkeypatch):
    small = _quiet(tiny_audit(tmp_path, num_models=2, attacks=["loss"],
                              share_models=False))
    trained = _count_training(monkeypatch)
    large = _quiet(tiny_audit(tmp_path, num_models=4, share_models=False))
    assert large.run_dir == small.run_dir and trained == [2, 3]
    keep = np.load(large.run_dir / "keep.npy")
    split = np.load(large.run_dir / "split.npz")
    assert (keep[:, split["audited"]].sum(axis=0) == 2).all()


def test_a_bad_option_fails_before_anything_is_trained_or_written(tmp_path, monkeypatch):
    trained = _count_training(monkeypatch)
    for bad in ({"attacks": ["lira:ofline=true"]},
                {"reference_model": {"name": "mlp", "options": {"hidden": "x"}},
                 "protocol": "fixed_target"}):
        with pytest.raises(Exception, match="ofline|hidden|mlp"):
            _quiet(tiny_audit(tmp_path, **bad))
    assert trained == [] and not (tmp_path / "runs").exists()


def test_changed_data_content_never_reuses_models(tmp_path, monkeypatch):
    first = _quiet(tiny_audit(tmp_path))
    trained = _count_training(monkeypatch)
    config = tiny_audit(tmp_path)
    config["data"]["options"]["separation"] = 0.9  # same name and sizes, other content
    second = _quiet(config)
    assert second.run_dir != first.run_dir and trained == [0, 1, 2, 3]


def test_damaged_outputs_are_recomputed_not_used(tmp_path, monkeypatch):
    first = _quiet(tiny_audit(tmp_path, share_models=False))
    (damaged,) = (first.run_dir / "models" / "0001" / "outputs").glob("*.safetensors")
    data = bytearray(damaged.read_bytes())
    data[-3] ^= 0x55
    damaged.write_bytes(bytes(data))
    trained, queried = _count_training(monkeypatch), _count_queries(monkeypatch)
    with pytest.warns(RuntimeWarning, match="damaged"):
        again = _quiet(tiny_audit(tmp_path, share_models=False))
    assert trained == [] and queried == [("identity",)]
    assert again.attacks["lira"].pooled == first.attacks["lira"].pooled


def test_a_changed_config_never_reuses_artefacts(tmp_path):
    first = _quiet(tiny_audit(tmp_path))
    second = _quiet(tiny_audit(tmp_path, train={"epochs": 3, "batch_size": 32, "lr": 0.1}))
    assert first.run_dir != second.run_dir
    only_attacks = _quiet(tiny_audit(tmp_path, attacks=["loss"]))
    assert only_attacks.run_dir == first.run_dir and set(only_attacks.attacks) == {"loss"}
    assert len(list(first.run_dir.glob("scores-*"))) == 1  # older generations are dropped


def test_fixed_target_with_another_reference_architecture(tmp_path):
    config = tiny_audit(tmp_path, protocol="fixed_target", num_models=4,
                        reference_model={"name": "mlp", "options": {"hidden": [8, 8]}})
    results = _quiet(config)
    assert results.summary.targets == [0] and results.summary.num_models == 5
    meta = json.loads((results.run_dir / "models" / "0003" / "model.json").read_text())
    assert meta["model"]["options"]["hidden"] == [8, 8]


def test_default_audit_end_to_end_at_reduced_size(tmp_path):
    cfg = load_config(overrides={"train.epochs": 2, "num_models": 4, "data.pool_size": 300,
                                 "output_dir": str(tmp_path), "device": "cpu"})
    results = audit(cfg, show_progress=False)
    assert set(results.attacks) == set(cfg.attacks)
    assert results.summary.pool_size == 300 and results.summary.audited_size == 270


def test_cli_audit_report_and_listings(tmp_path):
    config_file = tmp_path / "tiny.yaml"
    import yaml

    config_file.write_text(yaml.safe_dump(tiny_audit(tmp_path)))
    runner = CliRunner()
    result = runner.invoke(app, ["audit", "--config", str(config_file), "--quiet",
                                 "--epochs", "2", "--attacks", "loss;lira:offline=true"])
    assert result.exit_code == 0, result.output
    assert "lira:offline=true" in result.output and "run directory" in result.output
    run_dir = next(p for p in (tmp_path / "runs").iterdir() if p.name.startswith("tiny-"))
    (run_dir / "roc.png").unlink()
    result = runner.invoke(app, ["report", str(run_dir)])
    assert result.exit_code == 0 and not (run_dir / "roc.png").exists()  # read-only
    result = runner.invoke(app, ["report", str(run_dir), "--plots"])
    assert result.exit_code == 0 and (run_dir / "roc.png").exists()
    for listing, expected in (("models", "small_cnn"), ("attacks", "lira"),
                              ("datasets", "digits"), ("recipes", "standard")):
        result = runner.invoke(app, [listing])
        assert result.exit_code == 0 and expected in result.output
    # the devices here, and whether bf16 pays off on each: the CPU's row says what torch does
    result = runner.invoke(app, ["devices"])
    kernels = {True: "yes", False: "no", None: "unknown"}[bf16_kernels(torch.device("cpu"))]
    cpu_row = next(line for line in result.output.splitlines() if "│ cpu " in line)
    assert result.exit_code == 0 and torch.backends.cpu.get_cpu_capability() in cpu_row
    assert f"│ {kernels} " in cpu_row
    assert ("fp32 (bf16 runs in fallback code" in cpu_row) == (kernels == "no")


def test_cli_reports_config_errors_naming_the_field(tmp_path):
    result = CliRunner().invoke(app, ["audit", "--epochs", "0", "--output-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "train.epochs" in result.output
    assert not any(tmp_path.iterdir())  # nothing was written before validation


def test_robust_evaluation_and_memorization_analysis_are_written(tmp_path):
    config = tiny_audit(tmp_path, robust_eval={"eps": 0.3, "step": 0.1, "steps": 3,
                                               "max_samples": 50},
                        memorization_attack="lira")
    results = _quiet(config)
    stats = results.summary.target_models
    assert 0 <= stats.test_robust_acc <= stats.test_natural_acc <= 1
    assert stats.train_robust_acc < stats.train_natural_acc
    per_target = stats.test_robust_acc_per_target  # one value per target, their mean above
    assert len(per_target) == len(results.summary.targets)
    assert np.mean(per_target) == pytest.approx(stats.test_robust_acc)
    table = json.loads((results.run_dir / "memorization.json").read_text())
    assert table["attack"] == "lira" and len(table["bins"]) == 22
    assert (results.run_dir / "memorization.png").exists()


def test_memorization_attack_must_be_an_audited_attack():
    with pytest.raises(Exception, match="memorization_attack"):
        validate_config({"attacks": ["loss"], "memorization_attack": "lira"})


def test_dpsgd_audit_reports_the_guarantee_and_empirical_lower_bounds(tmp_path):
    from miaudit.privacy import accounting

    config = tiny_audit(tmp_path, num_models=4)
    config["train"] = {**config["train"], "epochs": 2,
                       "recipe": "dpsgd",
                       "recipe_options": {"noise_multiplier": 1.0, "accountant": "rdp"}}
    results = _quiet(config)
    privacy = results.summary.privacy
    keep = np.load(results.run_dir / "keep.npy")
    expected = []
    for row in keep:  # each model: Poisson rate 1 / batches, one step per batch, 2 epochs
        batches = -(-int(row.sum()) // 32)
        expected.append(accounting.epsilon(1.0, 1 / batches, 1e-5, steps=2 * batches,
                                           accountant="rdp"))
    assert privacy.epsilon == pytest.approx(max(expected))  # the weakest target's guarantee
    assert len(privacy.epsilon_per_epoch) == 2
    for attack in results.attacks.values():
        bound = attack.empirical_epsilon
        # 4 tiny models x 200 samples cannot certify anything near the claimed epsilon.
        assert 0 <= bound.epsilon_lower < privacy.epsilon
        assert bound.verdict == "consistent"
    assert (results.run_dir / "roc_dp_bound.png").exists()


def test_identical_models_are_shared_between_run_directories(tmp_path):
    reference = {"name": "mlp", "options": {"hidden": [8]}}
    first = _quiet(tiny_audit(tmp_path, name="a", protocol="fixed_target", num_models=4,
                              reference_model=reference))
    # Another target, same attacker: the 4 reference models are reused, the target is not.
    second_config = tiny_audit(tmp_path, name="b", protocol="fixed_target", num_models=4,
                               reference_model=reference,
                               model={"name": "mlp", "options": {"hidden": [16]}})
    second = _quiet(second_config)
    assert second.run_dir != first.run_dir
    for index in range(1, 5):
        assert _weights(first, index) == _weights(second, index)
    assert _weights(first, 0) != _weights(second, 0)
    # share_models=False trains everything again (and a changed seed shares nothing).
    third = _quiet({**second_config, "name": "c", "seed": 4, "share_models": False})
    assert _weights(third, 1) != _weights(second, 1)


def _weights(results, index):
    return (results.run_dir / "models" / f"{index:04d}" / "weights.safetensors").read_bytes()


def test_sde_targets_record_paper_a_guarantee_and_the_bound_plot(tmp_path):
    config = tiny_audit(tmp_path, num_models=2, attacks=["loss"],
                        model={"name": "sdenet", "width": 0.125},
                        train={"epochs": 1, "batch_size": 32, "lr": 0.05})
    config["data"] = {"name": "synthetic", "options": {"n_train": 40, "n_test": 20,
                                                       "shape": [3, 8, 8], "num_classes": 4}}
    results = _quiet(config)
    nsde = results.summary.nsde
    assert nsde.theorem.startswith("paper A, Theorem 4.1") and nsde.form == "proof"
    assert nsde.lipschitz_source.startswith("assumed L = 1")
    assert nsde.in_range == (0 < nsde.epsilon_implied < 1)
    assert (results.run_dir / "roc_dp_bound.png").exists()


def test_ensemble_training_writes_every_model_and_matches_sequential(tmp_path):
    sequential = _quiet(tiny_audit(tmp_path / "a", share_models=False))
    ensemble = _quiet(tiny_audit(tmp_path / "b", share_models=False,
                                 train={**tiny_audit(tmp_path)["train"], "ensemble": 4}))
    assert ensemble.run_dir.name != sequential.run_dir.name  # its own identity
    for label in ("loss", "lira"):
        assert ensemble.metric(label, "auc") == pytest.approx(
            sequential.metric(label, "auc"), abs=0.02)
    assert ensemble.summary.target_models.train_accuracy == pytest.approx(
        sequential.summary.target_models.train_accuracy, abs=0.03)
