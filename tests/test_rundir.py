import numpy as np
import pytest
import torch

from miaudit.rundir import (
    RunDir,
    RunDirError,
    atomic_write,
    read_array,
    read_tensors,
    scores_path,
    write_array,
)


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


def test_claim_refuses_another_configs_directory(tmp_path):
    run = RunDir(tmp_path / "run")
    run.claim("aaa", {})
    run.claim("aaa", {})
    with pytest.raises(RunDirError, match="another config"):
        run.claim("bbb", {})


def test_model_is_complete_only_once_meta_is_written(tmp_path):
    run = RunDir(tmp_path)
    assert not run.is_complete(0)
    linear = torch.nn.Linear(2, 2)
    run.save_model(0, linear.state_dict(), torch.zeros(5, 1, 2), {"index": 0})
    assert run.is_complete(0) and run.load_logits(0).shape == (5, 1, 2)
    assert torch.equal(run.load_weights(0)["weight"], linear.weight.detach())


def test_corrupt_artefacts_raise_run_dir_errors(tmp_path):
    (tmp_path / "w.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(RunDirError, match="w.safetensors"):
        read_tensors(tmp_path / "w.safetensors")
    (tmp_path / "k.npy").write_bytes(b"nope")
    with pytest.raises(RunDirError, match="k.npy"):
        read_array(tmp_path / "k.npy")


def test_scores_path_is_file_safe(tmp_path):
    assert scores_path(tmp_path, "lira:offline=true, x/y").name == "lira_offline=true_x_y.npy"
