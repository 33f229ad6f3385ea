"""Leakage over training (train.snapshots): config, identities, training, storage, resume and
scoring per snapshot epoch, at toy scale on digits."""

import shutil

import numpy as np
import pytest

from miaudit._runtime.io import read_json, read_tensors
from miaudit.auditor import identity as ids
from miaudit.auditor import modeljob
from miaudit.auditor.stages import audit
from miaudit.auditor.stages import query as stage_query
from miaudit.auditor.stages.plan import plan_audit
from miaudit.config import validate_config
from miaudit.errors import ConfigError

#: identities computed on main's code before train.snapshots existed (a88b1f0d..., the default
#: audit; the toy below): an audit without snapshots keeps its run and model identities
DEFAULT_RUN = "a88b1f0d82a5701c8a052d040de590bc10a73d743199769e356d57fbc2ce0e58"
TOY_RUN = "a27da2a9866dde2be49c245e5114ad54b420005b981bc8781cf9674bafba84b5"
TOY_MODELS = ["949ee4fee52c40fe170df9223ce510c4", "fdfdf0b34160ff7c13226e6bfe047c52"]


def toy(tmp_path, **train):
    return {"name": "snap", "seed": 0, "num_models": 4, "threads": 1, "device": "cpu",
            "model": {"name": "mlp", "options": {"hidden": [32]}},
            "train": {"epochs": 3, "batch_size": 64, "lr": 0.05, "schedule": "constant",
                      **train},
            "queries": ["identity"], "attacks": ["loss", "lira"],
            "output_dir": str(tmp_path / "runs")}


def test_audits_without_snapshots_keep_their_identities():
    assert plan_audit(validate_config({})).run_identity == DEFAULT_RUN
    for snapshots in ({}, {"snapshots": []}):
        planned = plan_audit(validate_config({"num_models": 4, "threads": 1, "device": "cpu",
                                              "train": {"epochs": 3, **snapshots},
                                              "model": {"width": 0.25}}))
        assert planned.run_identity == TOY_RUN
        assert [job.identity for job in planned.jobs[:2]] == TOY_MODELS


def test_snapshots_enter_identities_when_given(tmp_path):
    plain = plan_audit(validate_config(toy(tmp_path)))
    kept = plan_audit(validate_config(toy(tmp_path, snapshots=[1])))
    assert plain.run_identity != kept.run_identity
    assert plain.jobs[0].identity != kept.jobs[0].identity


@pytest.mark.parametrize("train, message", [
    ({"snapshots": [3]}, "each in 1..2"), ({"snapshots": [0]}, "each in 1..2"),
    ({"snapshots": [2, 1]}, "increasing"), ({"snapshots": [1, 1]}, "increasing"),
    ({"snapshots": [1], "ensemble": 2}, "ensemble 1"),
    ({"snapshots": [1], "recipe": "early_stopping"}, "outside the shared epoch loop"),
])
def test_bad_snapshots_are_refused_before_training(tmp_path, train, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(toy(tmp_path, **train))


@pytest.fixture(scope="module")
def snapshot_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("snapshots")
    config = toy(tmp_path, snapshots=[1, 2])
    return config, audit(validate_config(config), show_progress=False)


def test_each_snapshot_is_stored_with_its_identity_and_digest(snapshot_run):
    config, results = snapshot_run
    planned = plan_audit(validate_config(config))
    for job in planned.jobs:
        for epoch in (1, 2):
            folder = results.run_dir / "models" / f"{job.index:04d}" / "snapshots" / \
                f"epoch-{epoch:04d}"
            record = read_json(folder / "model.json")
            assert record["identity"] == ids.snapshot_identity(job.identity, epoch)
            assert record["model_identity"] == job.identity and record["epoch"] == epoch
            assert "snapshot_states" not in read_json(folder.parents[1] / "model.json")
    first = read_tensors(results.run_dir / "models/0000/snapshots/epoch-0001/weights.safetensors")
    final = read_tensors(results.run_dir / "models/0000/weights.safetensors")
    assert any(not np.array_equal(first[k].numpy(), final[k].numpy()) for k in final)


def test_the_final_epoch_entry_equals_the_main_table(snapshot_run):
    _, results = snapshot_run
    snapshots = results.summary.snapshots
    assert list(snapshots) == ["1", "2", "3"]
    for label, attack in results.attacks.items():
        assert snapshots["3"]["attacks"][label]["pooled"] == attack.pooled
        for epoch in ("1", "2"):
            assert "auc_ci" in snapshots[epoch]["attacks"][label]["pooled"]
    main = results.summary.target_models
    assert snapshots["3"]["target_models"]["train_accuracy"] == main.train_accuracy
    assert snapshots["3"]["target_models"]["test_accuracy"] == main.test_accuracy
    # training goes on between epochs: the models fit their members better at the end
    assert snapshots["1"]["target_models"]["train_accuracy"] < main.train_accuracy


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """The toy trained for one epoch, without snapshots."""
    config = toy(tmp_path_factory.mktemp("short"), epochs=1)
    return audit(validate_config(config), show_progress=False)


def test_a_snapshot_equals_a_separate_run_trained_for_that_many_epochs(snapshot_run, short_run):
    # a constant learning rate: epoch k of a 3-epoch run is a 1-epoch run (a cosine or step
    # schedule spans the total epochs, so there a snapshot is not a shorter run's model)
    _, results = snapshot_run
    short = short_run
    for index in range(4):
        kept = read_tensors(results.run_dir / f"models/{index:04d}/snapshots/epoch-0001/"
                            "weights.safetensors")
        separate = read_tensors(short.run_dir / f"models/{index:04d}/weights.safetensors")
        assert kept.keys() == separate.keys()
        for name in kept:
            assert np.array_equal(kept[name].numpy(), separate[name].numpy()), name


def test_a_deleted_snapshot_retrains_only_its_model(snapshot_run, monkeypatch):
    config, results = snapshot_run
    root = results.run_dir
    deleted = root / "models/0001/snapshots/epoch-0001"
    before = read_tensors(deleted / "weights.safetensors")
    untouched = (root / "models/0002/snapshots/epoch-0001/weights.safetensors").stat()
    real_train, trained = modeljob.train_model, []
    real_query, queried = stage_query.query_outputs, []
    monkeypatch.setattr(modeljob, "train_model",
                        lambda job, *a, **k: trained.append(job.index) or real_train(job, *a, **k))
    monkeypatch.setattr(stage_query, "query_outputs",
                        lambda *a, **k: queried.append(1) or real_query(*a, **k))
    shutil.rmtree(deleted)
    again = audit(validate_config(config), show_progress=False)
    assert trained == [1] and queried == []  # its outputs are keyed by the snapshot identity
    after = read_tensors(deleted / "weights.safetensors")
    assert all(np.array_equal(before[k].numpy(), after[k].numpy()) for k in before)
    assert (root / "models/0002/snapshots/epoch-0001/weights.safetensors").stat().st_mtime_ns \
        == untouched.st_mtime_ns
    assert again.summary.snapshots == results.summary.snapshots


def test_the_report_draws_leakage_and_accuracy_against_the_epoch(snapshot_run):
    from miaudit.reporting.leakage_over_training import FIGURE_FILE, leakage_figure

    _, results = snapshot_run
    assert (results.run_dir / FIGURE_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (results.run_dir / "report.html").read_text()
    assert '<section id="snapshots">' in html and "Leakage over training" in html
    figure = leakage_figure(results.summary.snapshots, "t")
    for axis in figure.axes:
        assert [tick.get_text() for tick in axis.get_xticklabels()] == ["1", "2", "3"]
    auc_line = figure.axes[2].lines[0]  # first attack's AUC, in epoch order
    assert list(auc_line.get_ydata()) == [results.summary.snapshots[e]["attacks"]["loss"]
                                          ["pooled"]["auc"] for e in ("1", "2", "3")]


def test_series_reads_values_and_intervals_and_blanks_unmeasurable_levels():
    from miaudit.reporting.leakage_over_training import series

    def entry(value, ci, measurable=True):
        return {"attacks": {"a": {"pooled": {"tpr@0.1%": value, "tpr@0.1%_ci": ci,
                                             "tpr@0.1%_measurable": measurable}}}}

    snapshots = {"10": entry(0.3, [0.2, 0.4]), "2": entry(0.1, None),
                 "5": entry(0.0, [0.0, 0.1], measurable=False)}
    epochs, value, low, high = series(snapshots, "a", "tpr@0.1%")
    assert epochs.tolist() == [2, 5, 10]
    assert value[0] == 0.1 and np.isnan(value[1]) and value[2] == 0.3
    assert np.isnan(low[0]) and low[2] == 0.2 and high[2] == 0.4


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_training_resumed_from_an_epoch_checkpoint_keeps_earlier_snapshots(tmp_path,
                                                                             precision):
    # killed at the third epoch's report: the checkpoint after epoch 2 must carry the snapshots
    # of epochs 1 and 2, which the resumed training no longer passes through (cosine schedule,
    # crop-and-flip augmentation; bf16: channels_last weights saved in the default layout)
    from miaudit.auditor.modeljob import SNAPSHOT_STATES, train_model
    from miaudit.training.checkpoint import Checkpointing
    from test_checkpoint import Killed, killed_at

    planned = plan_audit(validate_config({
        "data": {"name": "digits", "pool_size": 160}, "num_models": 2, "seed": 3,
        "device": "cpu", "attacks": ["loss"], "queries": ["identity"],
        "model": {"name": "small_cnn", "width": 0.25},
        "train": {"epochs": 3, "batch_size": 32, "crop_padding": 2, "flip": True,
                  "precision": precision, "snapshots": [1, 2]}}))
    job, args = planned.jobs[1], (planned.pool, planned.plan, planned.device)
    _, whole = train_model(job, *args)
    checkpoints = Checkpointing(str(tmp_path), every_seconds=0)
    with pytest.raises(Killed):
        train_model(job, *args, progress=killed_at(3), checkpoints=checkpoints)
    _, resumed = train_model(job, *args, checkpoints=checkpoints)
    assert resumed["resumed"] == [{"fit": 0, "after_epoch": 1}]
    kept, again = whole[SNAPSHOT_STATES], resumed[SNAPSHOT_STATES]
    assert sorted(kept) == sorted(again) == [1, 2]
    for epoch in (1, 2):
        for name, tensor in kept[epoch].items():
            assert tensor.is_contiguous() and np.array_equal(tensor.float().numpy(),
                                                             again[epoch][name].float().numpy())
    assert any(not np.array_equal(kept[1][n].numpy(), kept[2][n].numpy()) for n in kept[1])


def test_the_terminal_line_gives_test_accuracy_and_the_largest_auc_per_epoch():
    from miaudit.reporting.leakage_over_training import over_training_line

    def entry(test, aucs):
        return {"target_models": {"test_accuracy": test},
                "attacks": {f"a{i}": {"pooled": {"auc": auc}} for i, auc in enumerate(aucs)}}

    line = over_training_line({"10": entry(0.9, [0.55, 0.61]), "2": entry(0.5, [0.52, 0.5])})
    assert line.endswith("2: test 50.0% AUC 52.0, 10: test 90.0% AUC 61.0")


def test_compare_draws_leakage_over_training_for_the_runs_that_kept_snapshots(
        snapshot_run, short_run, tmp_path):
    from miaudit.reporting.compare import comparison, load_views, render_compare_html

    _, results = snapshot_run
    table = comparison(load_views([short_run.run_dir, results.run_dir]), ["lira"])
    html = render_compare_html(table)
    assert html.count("<h2>Leakage over training</h2>") == 1
    assert html.count("<svg") == 2  # the privacy-utility plot and run 2's figure only
    without = render_compare_html(comparison(load_views([short_run.run_dir]), ["lira"]))
    assert "Leakage over training" not in without and without.count("<svg") == 1
