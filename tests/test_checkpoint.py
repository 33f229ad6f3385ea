"""Epoch checkpoints: a training killed mid-way resumes from its last checkpoint and ends with
exactly the weights of a training that was never interrupted (CPU: bit-identity is a CPU
property, see test_parents)."""

from __future__ import annotations

import io
import struct
import warnings

import numpy as np
import pytest
import torch

from miaudit._runtime.io import read_digested_bytes, write_digested_bytes
from miaudit.auditor.modeljob import train_model
from miaudit.auditor.stages import audit, plan_audit
from miaudit.config import build_recipe, validate_config
from miaudit.recipes.standard import Standard
from miaudit.registry import RECIPES
from miaudit.training.checkpoint import Checkpoint, Checkpointing

BASE = {"data": {"name": "digits", "pool_size": 160}, "num_models": 2, "seed": 3,
        "device": "cpu", "attacks": ["loss"], "queries": ["identity"]}
SMALL = {"name": "small_cnn", "width": 0.25}
HELD_OUT = {**BASE["data"], "holdout_size": 0.2}  # validation data of the recipes that need it
CONFIGS = {
    # batch order, crop-and-flip augmentation, momentum and the cosine schedule
    "standard": {"model": SMALL, "train": {"epochs": 3, "batch_size": 32, "crop_padding": 2,
                                           "flip": True}},
    # bfloat16 autocast and channels_last weights (float32 master weights)
    "bf16": {"model": SMALL, "train": {"epochs": 3, "batch_size": 32, "precision": "bf16"}},
    # torch's global random state: the SDE block's noise
    "sdenet": {"model": {"name": "sdenet", "width": 0.25, "options": {"steps": 2}},
               "train": {"epochs": 3, "batch_size": 32}},
    # the recipe's own generator (PGD random starts)
    "pgd_at": {"model": SMALL, "train": {"recipe": "pgd_at", "epochs": 3, "batch_size": 32,
                                         "recipe_options": {"steps": 2}}},
    "trades": {"model": SMALL, "train": {"recipe": "trades", "epochs": 3, "batch_size": 32,
                                         "recipe_options": {"steps": 2}}},
    # the recipe's best-epoch copy and patience counter
    "early_stopping": {"model": SMALL, "data": HELD_OUT,
                       "train": {"recipe": "early_stopping", "epochs": 3, "batch_size": 32,
                                 "recipe_options": {"patience": 2}}},
    # numpy and torch generators of the recipe, MMD phases between epochs
    "mixup_mmd": {"model": SMALL, "data": HELD_OUT,
                  "train": {"recipe": "mixup_mmd", "epochs": 3, "batch_size": 32,
                            "recipe_options": {"gap_threshold": 0.0}}},
    # several fit calls with conversion between them: ANN (1 epoch), T = 1 (2), T = 2 (1)
    "ann2snn": {"model": {"name": "snn_cnn", "width": 0.25, "options": {"T": 2}},
                "train": {"recipe": "ann2snn", "epochs": 1, "batch_size": 32,
                          "recipe_options": {"calib_epochs": 2, "latency_epochs": 1,
                                             "activation_samples": 64}}},
    "snn_direct": {"model": {"name": "snn_cnn", "width": 0.25,
                             "options": {"T": 2, "neuron": "lif"}},
                   "train": {"recipe": "snn_direct", "epochs": 3, "batch_size": 32,
                             "optimizer": "adam", "lr": 0.01}},
    # pre-training, then a fresh SDE block (seeded) and fine-tuning: 1 + 2 epochs
    "replace_finetune": {"model": {"name": "resnet14", "width": 0.125},
                         "train": {"recipe": "replace_finetune", "epochs": 2,
                                   "batch_size": 32,
                                   "recipe_options": {"pretrain_epochs": 1, "steps": 2,
                                                      "stepper": "euler_maruyama",
                                                      "sigma": 0.5}}},
}


class Killed(Exception):
    """Stands for the process dying."""


def killed_at(report: int):
    """A progress callback that 'kills' training at its ``report``-th epoch report (before
    that epoch's checkpoint is written: the checkpoint holds one epoch less)."""
    count = [0]

    def progress(epoch: int, total: int, stats: dict) -> None:
        count[0] += 1
        if count[0] == report:
            raise Killed

    return progress


def job_of(name: str):
    """The planned audit and its model 1 (derived recipes train their parents inside
    train_model when not given their weights: every fit call of the recipe runs)."""
    planned = plan_audit(validate_config({**BASE, **CONFIGS[name]}))
    return planned, planned.jobs[1]


@pytest.mark.parametrize("name,report,resumed", [
    ("standard", 3, {"fit": 0, "after_epoch": 1}),
    ("bf16", 3, {"fit": 0, "after_epoch": 1}),
    ("sdenet", 2, {"fit": 0, "after_epoch": 0}),
    ("pgd_at", 3, {"fit": 0, "after_epoch": 1}),
    ("trades", 3, {"fit": 0, "after_epoch": 1}),
    ("early_stopping", 3, {"fit": 0, "after_epoch": 1}),
    ("mixup_mmd", 3, {"fit": 0, "after_epoch": 1}),
    ("ann2snn", 3, {"fit": 1, "after_epoch": 0}),  # ANN replayed, T = 1 resumed mid-way
    ("ann2snn", 4, {"fit": 1, "after_epoch": 1}),  # ... T = 1 complete, T = 2 from scratch
    ("snn_direct", 3, {"fit": 0, "after_epoch": 1}),
    ("replace_finetune", 3, {"fit": 1, "after_epoch": 0}),
])
def test_a_killed_training_resumes_bit_identical(tmp_path, name, report, resumed):
    planned, job = job_of(name)
    assert build_recipe(job.train).resumable
    args = (planned.pool, planned.plan, planned.device)
    whole, whole_meta = train_model(job, *args)
    checkpoints = Checkpointing(str(tmp_path), every_seconds=0)
    with pytest.raises(Killed):
        train_model(job, *args, progress=killed_at(report), checkpoints=checkpoints)
    assert checkpoints.path(job.identity).is_file()
    state, meta = train_model(job, *args, checkpoints=checkpoints)
    assert meta["resumed"] == [resumed]
    assert whole.keys() == state.keys()
    for key, value in whole.items():
        assert torch.equal(value, state[key]), key
    for key, values in whole_meta["log"].items():
        if not key.endswith("seconds"):  # the resumed log is the uninterrupted one
            np.testing.assert_equal(meta["log"][key], values, err_msg=key)  # nan == nan


def test_resume_depends_on_the_checkpoint(tmp_path):
    """A checkpoint really is read: one whose weights are altered ends elsewhere."""
    planned, job = job_of("standard")
    args = (planned.pool, planned.plan, planned.device)
    whole, _ = train_model(job, *args)
    checkpoints = Checkpointing(str(tmp_path), every_seconds=0)
    with pytest.raises(Killed):
        train_model(job, *args, progress=killed_at(3), checkpoints=checkpoints)
    path = checkpoints.path(job.identity)
    saved = torch.load(io.BytesIO(read_digested_bytes(path)[0]), weights_only=True)
    for value in saved["partial"]["model"].values():
        value.zero_()
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    write_digested_bytes(path, buffer.getvalue())  # altered, with a matching digest
    state, meta = train_model(job, *args, checkpoints=checkpoints)
    assert meta["resumed"]
    assert any(not torch.equal(value, state[key]) for key, value in whole.items())


@pytest.mark.parametrize("damage", ["garbage", "other_model", "flipped_bit", "no_digest"])
def test_an_unusable_checkpoint_is_set_aside_and_training_starts_over(tmp_path, damage):
    planned, job = job_of("standard")
    args = (planned.pool, planned.plan, planned.device)
    whole, _ = train_model(job, *args)
    checkpoints = Checkpointing(str(tmp_path), every_seconds=0)
    path = checkpoints.path(job.identity)
    expected = "not used"
    if damage == "garbage":
        path.write_bytes(b"not a checkpoint")
    elif damage == "other_model":
        other = Checkpoint(path, "another-model")
        other.write()
    else:  # a real checkpoint of this model, one exponent bit of a weight flipped
        with pytest.raises(Killed):
            train_model(job, *args, progress=killed_at(3), checkpoints=checkpoints)
        payload, _ = read_digested_bytes(path)
        weight = next(iter(torch.load(io.BytesIO(payload), weights_only=True)["partial"]
                           ["model"].values())).flatten()[0]
        raw = bytearray(path.read_bytes())
        at = bytes(raw).find(struct.pack("<f", weight.item()))
        assert at > 0  # the weight's bytes are in the file as stored
        raw[at + 3] ^= 0x01  # the lowest exponent bit: a plausible value, no load error
        if damage == "no_digest":  # a checkpoint of before digests, or a header cut off
            raw = raw[bytes(raw).index(b"\n") + 1:]
        path.write_bytes(bytes(raw))
        expected = "damaged" if damage == "flipped_bit" else "no digest"
    with pytest.warns(UserWarning, match=expected):
        state, meta = train_model(job, *args, checkpoints=checkpoints)
    assert "resumed" not in meta
    for key, value in whole.items():
        assert torch.equal(value, state[key]), key


def test_writes_wait_for_the_interval(tmp_path):
    planned, job = job_of("standard")
    checkpoints = Checkpointing(str(tmp_path), every_seconds=3600)
    with pytest.raises(Killed):
        train_model(job, planned.pool, planned.plan, planned.device, progress=killed_at(3),
                    checkpoints=checkpoints)
    assert not checkpoints.path(job.identity).exists()


def test_recipes_opt_in_class_by_class(tmp_path):
    """A subclass may carry state its parent's checkpoint does not hold: it is not resumable
    until it says so; DP-SGD (Opacus's accountant and sampler) writes no checkpoint."""

    class MyRecipe(Standard):
        pass

    class MyResumable(Standard):
        resumable = True

    assert Standard.resumable and not MyRecipe.resumable and MyResumable.resumable
    assert not RECIPES.build("dpsgd", noise_multiplier=1.0).resumable
    planned = plan_audit(validate_config({
        **BASE, "model": {"name": "mlp", "width": 0.25},
        "train": {"recipe": "dpsgd", "epochs": 2, "batch_size": 32,
                  "recipe_options": {"noise_multiplier": 1.0}}}))
    checkpoints = Checkpointing(str(tmp_path), every_seconds=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus's own warnings
        train_model(planned.jobs[0], planned.pool, planned.plan, planned.device,
                    checkpoints=checkpoints)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("recipe", ["lm", "lora"])
def test_language_models_resume_bit_identical(tmp_path, recipe):
    """LoRA's adapters go in at prepare(), before the checkpoint is restored into them."""
    pytest.importorskip("peft")
    from miaudit.data import make_pool
    from miaudit.data.text import load_text
    from miaudit.models.causal_lm import causal_lm
    from miaudit.recipes.language_model import LanguageModel, LoRA
    from miaudit.training.engine import TrainEnv, TrainParams

    corpus = tmp_path / "corpus.txt"
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()
    rng = np.random.default_rng(0)
    corpus.write_text("\n".join(f"{i} " + " ".join(rng.choice(words, 5)) for i in range(48)))
    pool = make_pool(load_text(data_dir=corpus, max_tokens=24), "all", None, 0)
    params = TrainParams(epochs=3, batch_size=16, optimizer="adam", lr=1e-3, weight_decay=0)

    def train(checkpoint=None, progress=None):
        torch.manual_seed(0)
        model = causal_lm(input_shape=pool.input_shape, num_classes=pool.num_classes, dim=32,
                          heads=2, layers=1)
        env = TrainEnv(checkpoint=checkpoint, progress=progress)
        chosen = LoRA(r=4, dropout=0.1) if recipe == "lora" else LanguageModel()
        return chosen.train(model, pool.x, pool.y, params, env)[0]

    whole = train().state_dict()
    path = tmp_path / "lora.pt"
    with pytest.raises(Killed):
        train(Checkpoint(path, "lora", every_seconds=0), killed_at(3))
    checkpoint = Checkpoint.open(path, "lora", every_seconds=0)
    assert checkpoint.resumed == [{"fit": 0, "after_epoch": 1}]
    state = train(checkpoint).state_dict()
    for key, value in whole.items():
        assert torch.equal(value, state[key]), key


def test_an_audit_drops_each_checkpoint_once_its_model_is_saved(tmp_path):
    config = validate_config({**BASE, "model": SMALL, "output_dir": str(tmp_path),
                              "train": {"epochs": 2, "batch_size": 32},
                              "executor": {"checkpoint_minutes": 1e-9}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        audit(config, show_progress=False)
    folders = list(tmp_path.glob("*/checkpoints"))
    assert folders and not any(folders[0].iterdir())


# One torch thread in every attempt: a float sum over another thread count is another sum.
# With a kill count, the process dies (os._exit: no clean-up runs) right after that many
# checkpoint writes.
AUDIT_SCRIPT = """
import os, sys, warnings
import torch
from miaudit.auditor.stages import audit
from miaudit.training.checkpoint import Checkpoint
torch.set_num_threads(1)
warnings.simplefilter("ignore")
kill_after, writes, write = int(sys.argv[2]), [0], Checkpoint.write
def write_then_die(self):
    write(self)
    writes[0] += 1
    if writes[0] == kill_after:
        os._exit(9)
Checkpoint.write = write_then_die
audit({**%r, "output_dir": sys.argv[1]}, show_progress=False)
"""


def test_an_audit_killed_mid_training_resumes_where_it_was(tmp_path):
    """A real death of the audit's process after model 0's third checkpoint: the rerun
    resumes that model after its epoch 2 and ends with an uninterrupted audit's weights."""
    import subprocess
    import sys

    from miaudit._runtime.io import read_json, read_tensors
    from miaudit.auditor.runfiles import MODEL_RECORD

    config = {**BASE, "model": SMALL, "share_models": False,
              "train": {"epochs": 6, "batch_size": 16},
              "executor": {"checkpoint_minutes": 1e-9}}
    script = AUDIT_SCRIPT % config
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    died = subprocess.run([sys.executable, "-c", script, str(killed), "3"])
    assert died.returncode == 9
    assert len(list(killed.glob("*/checkpoints/*.pt"))) == 1
    assert not any(killed.glob("*/models/*/" + MODEL_RECORD))
    reruns = [subprocess.run([sys.executable, "-c", script, str(output_dir), "0"], check=True,
                             capture_output=True, text=True) for output_dir in (killed, whole)]
    said = reruns[0].stdout + reruns[0].stderr
    assert "1 model(s) resume from training checkpoints: 0" in said, said
    (resumed_run,), (whole_run,) = killed.glob("*/models"), whole.glob("*/models")
    assert read_json(resumed_run / "0000" / MODEL_RECORD)["resumed"] == [
        {"fit": 0, "after_epoch": 2}]
    assert "resumed" not in read_json(resumed_run / "0001" / MODEL_RECORD)
    for index in ("0000", "0001"):
        resumed_weights = read_tensors(resumed_run / index / "weights.safetensors")
        whole_weights = read_tensors(whole_run / index / "weights.safetensors")
        for key, value in whole_weights.items():
            assert torch.equal(value, resumed_weights[key]), (index, key)
    assert not any(killed.glob("*/checkpoints/*"))


def test_a_first_run_stopped_after_a_checkpoint_keeps_its_run_directory(tmp_path,
                                                                        monkeypatch):
    """Ctrl-C before the first model is saved: the run directory (otherwise removed as empty)
    is kept for its checkpoint, and the rerun resumes from it."""
    from miaudit._runtime.io import read_json
    from miaudit.auditor.runfiles import MODEL_RECORD

    config = {**BASE, "model": SMALL, "share_models": False, "output_dir": str(tmp_path),
              "train": {"epochs": 4, "batch_size": 32},
              "executor": {"checkpoint_minutes": 1e-9}}
    write = Checkpoint.write

    def write_then_stop(self):
        write(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(Checkpoint, "write", write_then_stop)
    with pytest.raises(KeyboardInterrupt), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        audit(config, show_progress=False)
    assert len(list(tmp_path.glob("*/checkpoints/*.pt"))) == 1
    monkeypatch.setattr(Checkpoint, "write", write)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        audit(config, show_progress=False)
    (record,) = tmp_path.glob("*/models/0000/" + MODEL_RECORD)
    assert read_json(record)["resumed"] == [{"fit": 0, "after_epoch": 0}]
