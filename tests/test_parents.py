"""Derived models reuse their parent: trained once per (data, membership row, seed, settings)."""

from __future__ import annotations

import pytest
import torch

from miaudit.auditor import modeljob
from miaudit.auditor.modeljob import train_model
from miaudit.auditor.stages import audit, plan_audit
from miaudit.config import validate_config

# device cpu: bit-identity is a CPU property (cuDNN's convolution gradients are not
# deterministic, so on CUDA even two trainings in one go differ in the last bits)
SNN = {
    "data": {"name": "digits", "pool_size": 160}, "num_models": 4, "seed": 3, "device": "cpu",
    "model": {"name": "snn_cnn", "width": 0.25, "options": {"T": 2}},
    "train": {"recipe": "ann2snn", "epochs": 1, "batch_size": 32,
              "recipe_options": {"calib_epochs": 1, "latency_epochs": 1,
                                 "activation_samples": 64}},
    "attacks": ["loss"], "queries": ["identity"],
}
FINETUNE = {
    "data": {"name": "digits", "pool_size": 160}, "num_models": 4, "seed": 3, "device": "cpu",
    "model": {"name": "resnet14", "width": 0.125},
    "train": {"recipe": "replace_finetune", "epochs": 1, "batch_size": 32,
              "recipe_options": {"steps": 2, "stepper": "euler_maruyama", "sigma": 0.5}},
    "attacks": ["loss"], "queries": ["identity"],
}


def _with(config: dict, **changes: object) -> dict:
    out = {**config, **{k: v for k, v in changes.items() if k not in ("T", "train")}}
    if "T" in changes:
        out["model"] = {**config["model"], "options": {"T": changes["T"]}}
    if "train" in changes:
        out["train"] = {**config["train"], **changes["train"]}
    return out


@pytest.mark.parametrize("config", [SNN, FINETUNE], ids=["ann2snn", "replace_finetune"])
def test_training_from_the_stored_parent_is_bit_identical_to_training_in_one_go(config):
    planned = plan_audit(validate_config(config))
    job = planned.jobs[1]
    assert job.parent is not None
    whole, _ = train_model(job, planned.pool, planned.plan, planned.device)
    parent, _ = train_model(job.parent, planned.pool, planned.plan, planned.device)
    derived, meta = train_model(job, planned.pool, planned.plan, planned.device,
                                parent_state=parent)
    assert meta["parent"] == job.parent.identity
    assert whole.keys() == derived.keys()
    for name, value in whole.items():
        assert torch.equal(value, derived[name]), name


def _chain(job):
    return [job] + ([] if job.parent is None else _chain(job.parent))


@pytest.mark.parametrize("learn_thresholds", [False, True])
def test_chained_latencies_are_bit_identical_to_training_in_one_go(learn_thresholds):
    """T = 3 from the stored T = 2 model, T = 2 from T = 1, T = 1 from the ANN: each level
    runs only its own stage, yet equals ``train`` running every stage (seeds, thresholds,
    batch-norm statistics and threshold learning carried by the stored weights)."""
    options = {**SNN["train"]["recipe_options"], "learn_thresholds": learn_thresholds}
    planned = plan_audit(validate_config(_with(SNN, T=3, train={"recipe_options": options})))
    levels = _chain(planned.jobs[1])
    assert [(job.model.name, job.model.options.get("T")) for job in levels] == [
        ("snn_cnn", 3), ("snn_cnn", 2), ("snn_cnn", 1), ("ann_cnn", None)]
    state = None
    for job in reversed(levels):
        state, meta = train_model(job, planned.pool, planned.plan, planned.device,
                                  parent_state=state)
        if job.model.options.get("T", 1) > 1:
            assert meta["log"]["stage"] == [f"T{job.model.options['T']}"]  # one stage only
            whole, _ = train_model(job, planned.pool, planned.plan, planned.device)
            assert whole.keys() == state.keys()
            assert any(name.endswith("theta_out") for name in state)  # thresholds are stored
            for name, value in whole.items():
                assert torch.equal(value, state[name]), (job.model.options, name)


def test_each_latency_stage_of_a_family_is_trained_once(tmp_path, monkeypatch, capsys):
    """The family T = 1, 2, 4 with one model cache: the T = 2 audit fetches the T = 1
    audit's models as parents and trains only T = 2; the T = 4 audit fetches those and trains
    T = 3 and T = 4. Before chaining it retrained T1 (and T2, T3) inside every SNN."""
    trained: list[tuple[str, int | None, tuple[str, ...]]] = []
    real = modeljob.train_model

    def counting(job, *args, **kwargs):
        state, meta = real(job, *args, **kwargs)
        trained.append((job.model.name, job.model.options.get("T"),
                        tuple(dict.fromkeys(meta["log"].get("stage", ["ann"])))))
        return state, meta

    monkeypatch.setattr(modeljob, "train_model", counting)
    configs = {T: _with(SNN, T=T, output_dir=str(tmp_path)) for T in (1, 2, 4)}
    per_audit = {}
    for T, config in configs.items():
        trained.clear()
        audit(config, show_progress=False)
        per_audit[T] = sorted(trained)
    assert per_audit[1] == [("ann_cnn", None, ("ann",))] * 4 + [("snn_cnn", 1, ("T1",))] * 4
    assert per_audit[2] == [("snn_cnn", 2, ("T2",))] * 4
    assert per_audit[4] == [("snn_cnn", 3, ("T3",))] * 4 + [("snn_cnn", 4, ("T4",))] * 4
    captured = capsys.readouterr()
    out = captured.err + captured.out
    assert "depth 2 of 2 (snn_cnn T=2, ann2snn): 4 reused, 0 to train" in out
    assert "depth 1 of 2 (snn_cnn T=3, ann2snn): 0 reused, 4 to train" in out
    # each level is the model an audit at that latency trains: same identities
    jobs = {T: plan_audit(validate_config(config)).jobs for T, config in configs.items()}
    assert [job.parent.identity for job in jobs[2]] == [job.identity for job in jobs[1]]
    assert [job.parent.parent.identity for job in jobs[4]] == [job.identity for job in jobs[2]]
    anns = {T: [_chain(job)[-1].identity for job in jobs[T]] for T in jobs}
    assert anns[1] == anns[2] == anns[4] and len(set(anns[1])) == 4


def test_the_ann_parents_are_the_models_of_an_ann_audit():
    """As in the rotation experiments: a standard audit of the ReLU twin (same data, seed,
    memberships, training) trains the ANNs every latency's chain ends in."""
    ann = plan_audit(validate_config(_with(SNN, model={"name": "ann_cnn", "width": 0.25},
                                           train={"recipe": "standard",
                                                  "recipe_options": {}}))).jobs
    for T in (1, 2):
        snn = plan_audit(validate_config(_with(SNN, T=T))).jobs
        assert [_chain(job)[-1].identity for job in snn] == [job.identity for job in ann]


def test_identities_name_the_parent_and_its_settings():
    base = plan_audit(validate_config(SNN)).jobs[0]
    for changed in (_with(SNN, train={"lr": 0.01}), _with(SNN, seed=4),
                    _with(SNN, train={"recipe_options": {**SNN["train"]["recipe_options"],
                                                         "ann_epochs": 2}})):
        job = plan_audit(validate_config(changed)).jobs[0]
        assert job.parent.identity != base.parent.identity and job.identity != base.identity
    # calibration settings change the SNNs at every latency, not their ANN
    calib = plan_audit(validate_config(_with(SNN, train={"recipe_options": {
        **SNN["train"]["recipe_options"], "calib_epochs": 2}}))).jobs[0]
    assert calib.parent.identity != base.parent.identity and calib.identity != base.identity
    assert _chain(calib)[-1].identity == _chain(base)[-1].identity
    # no ANN to train with ann_epochs 0: the chain ends at T = 1, which trains everything
    no_ann = plan_audit(validate_config(_with(SNN, train={"recipe_options": {
        **SNN["train"]["recipe_options"], "ann_epochs": 0}}))).jobs[0]
    assert no_ann.parent.model.options == {"T": 1} and no_ann.parent.parent is None


def test_replace_finetune_reuses_the_standard_family_model():
    """The backbone of replace-then-finetune is the model a standard audit of the same family
    trains (same identity), so the model cache supplies it."""
    standard = plan_audit(validate_config(_with(FINETUNE, train={
        "recipe": "standard", "recipe_options": {}}))).jobs
    derived = plan_audit(validate_config(FINETUNE)).jobs
    assert [job.parent.identity for job in derived] == [job.identity for job in standard]
    # and pre-training epochs of their own make another parent
    other = plan_audit(validate_config(_with(FINETUNE, train={"recipe_options": {
        **FINETUNE["train"]["recipe_options"], "pretrain_epochs": 2}}))).jobs
    assert other[0].parent.identity != standard[0].identity


def test_models_without_a_parent_keep_their_identities():
    """Pinned: the default family's model identities as computed before parents and
    train.precision existed (a changed value would retrain every cached model). On CPU: the
    device kind is part of an identity (a CUDA-trained model is another model)."""
    for train in ({}, {"amp": False}, {"precision": "fp32"}):
        jobs = plan_audit(validate_config({"attacks": ["loss"], "num_models": 4,
                                           "train": train, "device": "cpu"})).jobs
        assert jobs[0].parent is None
        assert [jobs[0].identity, jobs[3].identity] == [
            "f5d23725a1abbc4b843a4a4d0c205a44", "1b6db49e8165b7f89859bc48263ba44e"]


def test_derived_models_start_from_their_parents_under_the_ensemble_trainer(tmp_path,
                                                                           monkeypatch):
    """``train.ensemble`` > 1 trains derived models one by one: from their parents too."""
    stages: list[tuple[int, tuple[str, ...], bool]] = []
    real = modeljob.train_model

    def recording(job, *args, **kwargs):
        state, meta = real(job, *args, **kwargs)
        if job.model.name == "snn_cnn":
            stages.append((job.model.options["T"], tuple(meta["log"]["stage"]),
                           "parent" in meta))
        return state, meta

    monkeypatch.setattr(modeljob, "train_model", recording)
    audit(_with(SNN, output_dir=str(tmp_path), train={"ensemble": 2}), show_progress=False)
    assert sorted(stages) == [(1, ("T1",), True)] * 4 + [(2, ("T2",), True)] * 4
