"""Run directory and I/O: atomic writes, verified records, scores generations, locking."""

import json

import numpy as np
import pytest
import torch

from miaudit._runtime.io import (
    atomic_write,
    read_array,
    read_json,
    read_tensors,
    sweep_temporaries,
    write_array,
)
from miaudit.auditor.model_cache import ModelCache
from miaudit.auditor.rundir import RunDir, scores_name
from miaudit.auditor.runfiles import LAYOUT
from miaudit.errors import RunDirError, RunLockedError


def test_failed_write_leaves_neither_file_nor_temporary(tmp_path):
    target = tmp_path / "a.bin"

    def broken(path):
        path.write_bytes(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, broken)
    assert list(tmp_path.iterdir()) == []


def test_failed_rewrite_keeps_the_old_complete_file(tmp_path):
    target = tmp_path / "keep.npy"
    write_array(target, np.arange(3))
    with pytest.raises(RuntimeError):
        atomic_write(target, lambda p: (p.write_bytes(b"x"), (_ for _ in ()).throw(RuntimeError())))
    assert read_array(target).tolist() == [0, 1, 2]


def test_claim_refuses_another_audit_and_an_older_layout(tmp_path):
    run = RunDir(tmp_path / "run")
    run.claim("aaa", {})
    run.claim("aaa", {})
    with pytest.raises(RunDirError, match="another audit"):
        run.claim("bbb", {})
    (tmp_path / "run" / "manifest.json").write_text(json.dumps({"training_hash": "x"}))
    with pytest.raises(RunDirError, match=f"layout 1, this one reads {LAYOUT}"):
        run.claim("aaa", {})


def test_model_is_complete_only_with_a_matching_record_and_intact_weights(tmp_path):
    run = RunDir(tmp_path)
    assert run.model_record(0, "id") is None
    linear = torch.nn.Linear(2, 2)
    run.save_model(0, "id", linear.state_dict(), {"index": 0})
    assert run.model_record(0, "id")["index"] == 0
    assert run.model_record(0, "other") is None  # stale: made for another identity
    assert torch.equal(run.load_weights(0)["weight"], linear.weight.detach())
    weights = run.model_dir(0) / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # one flipped bit inside the tensor bytes
    weights.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match="damaged"):
        assert run.model_record(0, "id") is None


def test_cache_copies_never_link_and_refuses_damaged_entries(tmp_path):
    run = RunDir(tmp_path / "run")
    run.save_model(0, "key", torch.nn.Linear(2, 2).state_dict(), {})
    cache = ModelCache(tmp_path / "cache")
    cache.store("key", "model.json", "weights.safetensors", run.model_dir(0))
    copy = tmp_path / "other"
    assert cache.fetch("key", "key", "model.json", "weights.safetensors", copy)
    assert (copy / "weights.safetensors").stat().st_ino != \
        (cache.entry("key") / "weights.safetensors").stat().st_ino
    assert not cache.fetch("key", "another-identity", "model.json", "weights.safetensors",
                           tmp_path / "x")
    (cache.entry("key") / "weights.safetensors").write_bytes(b"damaged")
    with pytest.warns(RuntimeWarning):
        assert not cache.fetch("key", "key", "model.json", "weights.safetensors", tmp_path / "y")
    assert not (tmp_path / "y").exists()


def test_scores_generation_is_swapped_in_whole(tmp_path):
    run = RunDir(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        with run.new_scores() as folder:
            write_array(folder / "a.npy", np.zeros(2))
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []  # a killed scoring leaves nothing half-written
    with run.new_scores() as folder:
        write_array(folder / "a.npy", np.zeros(2))
    (final,) = tmp_path.glob("scores-*")
    assert read_array(final / "a.npy").shape == (2,)


def test_second_process_gets_a_clear_lock_error(tmp_path):
    run = RunDir(tmp_path)
    with run.lock():
        with pytest.raises(RunLockedError, match="--wait"):
            with run.lock():
                pass
    with run.lock():  # released
        pass


def test_temporaries_of_a_killed_run_are_swept(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / ".weights.safetensors.abc.tmp").write_bytes(b"x")
    (tmp_path / ".scores-xyz.tmp").mkdir()
    (tmp_path / "keep.npy").write_bytes(b"kept")
    assert sweep_temporaries(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.npy", "models"]


@pytest.mark.parametrize("content", ["", "{", "[]", "{}"])
def test_truncated_or_wrongly_shaped_json_names_the_file(tmp_path, content):
    path = tmp_path / "results.json"
    path.write_text(content)
    if content == "{}":
        assert read_json(path) == {}
    else:
        with pytest.raises(RunDirError, match="results.json"):
            read_json(path)


def test_corrupt_artefacts_raise_run_dir_errors(tmp_path):
    (tmp_path / "w.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(RunDirError, match="w.safetensors"):
        read_tensors(tmp_path / "w.safetensors")
    (tmp_path / "k.npy").write_bytes(b"nope")
    with pytest.raises(RunDirError, match="k.npy"):
        read_array(tmp_path / "k.npy")


def test_scores_name_is_file_safe():
    assert scores_name("lira:offline=true, x/y") == "lira_offline=true_x_y.npy"
