"""Derived models reuse their parent: trained once per (data, membership row, seed, settings)."""

from __future__ import annotations

import pytest
import torch

from miaudit import modeljob
from miaudit.config import validate_config
from miaudit.modeljob import train_model
from miaudit.pipeline import audit, plan_audit

SNN = {
    "data": {"name": "digits", "pool_size": 160}, "num_models": 4, "seed": 3,
    "model": {"name": "snn_cnn", "width": 0.25, "options": {"T": 2}},
    "train": {"recipe": "ann2snn", "epochs": 1, "batch_size": 32,
              "recipe_options": {"calib_epochs": 1, "latency_epochs": 1,
                                 "activation_samples": 64}},
    "attacks": ["loss"], "queries": ["identity"],
}
FINETUNE = {
    "data": {"name": "digits", "pool_size": 160}, "num_models": 4, "seed": 3,
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


def test_conversions_at_three_latencies_train_each_ann_once(tmp_path, monkeypatch):
    trained: list[str] = []
    real = modeljob.train_model

    def counting(job, *args, **kwargs):
        trained.append(job.model.name)
        return real(job, *args, **kwargs)

    monkeypatch.setattr(modeljob, "train_model", counting)
    for T in (1, 2, 4):
        audit(_with(SNN, T=T, output_dir=str(tmp_path)), show_progress=False)
    # a 4-model family: 4 ANNs (not 12), each converted and calibrated at T = 1, 2, 4
    assert trained.count("ann_cnn") == 4
    assert trained.count("snn_cnn") == 12
    # the ANNs are the parents named in every SNN's identity, one per membership row
    parents = {T: [job.parent.identity for job in plan_audit(validate_config(
        _with(SNN, T=T, output_dir=str(tmp_path)))).jobs] for T in (1, 2, 4)}
    assert parents[1] == parents[2] == parents[4] and len(set(parents[1])) == 4


def test_identities_name_the_parent_and_its_settings():
    base = plan_audit(validate_config(SNN)).jobs[0]
    for changed in (_with(SNN, train={"lr": 0.01}), _with(SNN, seed=4),
                    _with(SNN, train={"recipe_options": {**SNN["train"]["recipe_options"],
                                                         "ann_epochs": 2}})):
        job = plan_audit(validate_config(changed)).jobs[0]
        assert job.parent.identity != base.parent.identity and job.identity != base.identity
    # calibration settings change the SNN, not its ANN
    calib = plan_audit(validate_config(_with(SNN, train={"recipe_options": {
        **SNN["train"]["recipe_options"], "calib_epochs": 2}}))).jobs[0]
    assert calib.parent.identity == base.parent.identity and calib.identity != base.identity
    # no parent, no change: ann_epochs 0 trains no ANN; given weights need no pre-training
    no_ann = plan_audit(validate_config(_with(SNN, train={"recipe_options": {
        **SNN["train"]["recipe_options"], "ann_epochs": 0}}))).jobs[0]
    assert no_ann.parent is None


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
    train.precision existed (a changed value would retrain every cached model)."""
    for train in ({}, {"amp": False}, {"precision": "fp32"}):
        jobs = plan_audit(validate_config({"attacks": ["loss"], "num_models": 4,
                                           "train": train})).jobs
        assert jobs[0].parent is None
        assert [jobs[0].identity, jobs[3].identity] == [
            "f5d23725a1abbc4b843a4a4d0c205a44", "1b6db49e8165b7f89859bc48263ba44e"]
