"""Reading outputs of models trained elsewhere: every layout round-trips exactly, and each
malformed input fails with its own message naming the file."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from miaudit.results.external import (
    ExternalOutputsError,
    read_any,
    read_bundle,
    read_lira_experiment,
    read_outputs,
)

M, N, Q, C = 12, 10, 2, 3


def synthetic(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """keep balanced as the LiRA code plans it (each sample IN for half the models)."""
    rng = np.random.default_rng(seed)
    keep = np.argsort(rng.uniform(size=(M, N)), axis=0) < M // 2
    logits = rng.normal(size=(M, N, Q, C)).astype(np.float32)
    labels = rng.integers(0, C, N)
    return keep, logits, labels


def write_lira(root: Path, keep, logits, labels, pytorch_port: bool = False) -> None:
    """The folder train.py + inference.py write: y_train.npy (the whole training set, longer
    than the N samples queried), experiment-<id>_<M>/keep.npy, logits/<epoch %010d>.npy of
    shape (N, 1, Q, C), here with an older epoch beside the latest."""
    root.mkdir()
    np.save(root / "y_train.npy", np.concatenate([labels, [0, 1]]))
    for m in range(len(keep)):
        folder = root / f"experiment-{m}_{len(keep)}"
        folder.mkdir()
        np.save(folder / "keep.npy", keep[m])
        (folder / "hparams.json").write_text("{}")
        if pytorch_port:
            np.save(folder / "logits.npy", logits[m])
            continue
        (folder / "logits").mkdir()
        np.save(folder / "logits" / f"{10:010d}.npy", logits[m][:, None])
        np.save(folder / "logits" / f"{5:010d}.npy", -logits[m][:, None])


def test_lira_experiment_round_trip(tmp_path):
    keep, logits, labels = synthetic()
    write_lira(tmp_path / "exp", keep, logits, labels)
    got = read_lira_experiment(tmp_path / "exp")
    # natural order: experiment-2_12 before experiment-10_12, so rows follow the model ids
    assert got.model_names == [f"experiment-{m}_{M}" for m in range(M)]
    assert got.keep.dtype == np.bool_ and np.array_equal(got.keep, keep)
    assert got.logits.dtype == np.float32 and np.array_equal(got.logits, logits)
    assert got.labels.dtype == np.int64 and np.array_equal(got.labels, labels)
    assert got.query_names == ["query0", "query1"]
    older = read_lira_experiment(tmp_path / "exp", epoch=5)
    assert np.array_equal(older.logits, -logits)
    assert read_any(tmp_path / "exp").model_names == got.model_names


def test_lira_pytorch_port_layout(tmp_path):
    keep, logits, labels = synthetic(1)
    write_lira(tmp_path / "exp", keep, logits, labels, pytorch_port=True)
    np.save(tmp_path / "labels.npy", labels)
    got = read_lira_experiment(tmp_path / "exp", labels=tmp_path / "labels.npy",
                               query_names=["identity", "mirror"])
    assert np.array_equal(got.logits, logits) and got.query_names == ["identity", "mirror"]


def test_stacked_and_per_model_files(tmp_path):
    keep, logits, labels = synthetic(2)
    np.save(tmp_path / "keep.npy", keep.astype(np.uint8))  # 0/1 integers are accepted
    np.save(tmp_path / "logits.npy", logits[:, :, 0])  # (M, N, C): one query
    np.save(tmp_path / "labels.npy", labels)
    stacked = read_outputs(tmp_path / "keep.npy", tmp_path / "logits.npy",
                           tmp_path / "labels.npy")
    assert stacked.logits.shape == (M, N, 1, C) and stacked.query_names == ["identity"]
    assert np.array_equal(stacked.logits[:, :, 0], logits[:, :, 0])
    assert np.array_equal(stacked.keep, keep)
    keeps, outs = [], []
    for m in range(M):
        keeps.append(tmp_path / f"keep_{m}.npy")
        outs.append(tmp_path / f"model_{m}.npy")
        np.save(keeps[-1], keep[m])
        np.save(outs[-1], logits[m])
    per_model = read_outputs(keeps, outs, tmp_path / "labels.npy")
    assert np.array_equal(per_model.logits, logits) and np.array_equal(per_model.keep, keep)
    assert per_model.model_names[:2] == ["model_0", "model_1"]


def test_bundles_and_attack_input(tmp_path):
    keep, logits, labels = synthetic(3)
    save_file({"keep": keep, "logits": logits.astype(np.float16), "labels": labels},
              str(tmp_path / "out.safetensors"),
              metadata={"query_names": json.dumps(["identity", "hflip"])})
    np.savez(tmp_path / "out.npz", keep=keep, logits=logits, labels=labels)
    from_safetensors = read_bundle(tmp_path / "out.safetensors")
    from_npz = read_any(tmp_path / "out.npz")
    assert from_safetensors.query_names == ["identity", "hflip"]
    assert np.array_equal(from_safetensors.logits, logits.astype(np.float16).astype(np.float32))
    assert np.array_equal(from_npz.logits, logits) and np.array_equal(from_npz.keep, keep)
    data = from_npz.attack_input(population=np.array([], dtype=np.int64))
    assert data.num_models == M and data.query_names == ["query0", "query1"]
    # the attacks' signals see these very outputs: cross-entropy of model 0, sample 0, query 1
    row = logits[0, 0, 1].astype(np.float64)
    expected = np.log(np.exp(row).sum()) - row[labels[0]]
    assert data.signal("loss")[0, 0, 1] == pytest.approx(expected, rel=1e-5)


def _files(tmp_path: Path, keep, logits, labels) -> dict[str, Path]:
    paths = {}
    for name, array in (("keep", keep), ("logits", logits), ("labels", labels)):
        paths[name] = tmp_path / f"{name}.npy"
        np.save(paths[name], array, allow_pickle=True)
    return paths


def _case(change: str):
    keep, logits, labels = synthetic(4)
    if change == "logits_samples":
        logits = logits[:, :-1]
    elif change == "labels_length":
        labels = labels[:-1]
    elif change == "keep_values":
        keep = keep.astype(np.int64)
        keep[3, 7] = 2
    elif change == "nan":
        logits[1, 2, 0, 1] = np.nan
        logits[5, 0, 1, 0] = np.inf
    elif change == "overflow":
        logits = logits.astype(np.float64)
        logits[0, 4, 1, 2] = 1e300  # finite in float64, infinite in float32
    elif change == "label_range":
        labels[6] = C
    elif change == "label_negative":
        labels[2] = -1
    elif change == "one_model":
        keep, logits = keep[:1], logits[:1]
    elif change == "pickled":
        labels = np.array([1, "a", None], dtype=object)
    elif change == "one_class":
        logits = logits[..., :1]
        labels = np.zeros_like(labels)
    return keep, logits, labels


@pytest.mark.parametrize("change, culprit, message", [
    ("logits_samples", "logits", r"shape \(12, 9, 2, 3\) do not match keep .* shape \(12, 10\)"),
    ("labels_length", "labels", r"shape \(9,\) do not match the 10 samples"),
    ("keep_values", "keep", r"1 entries are not, the first 2 at index \(3, 7\)"),
    ("nan", "logits", r"2 logits are NaN or infinite .* first at .* \(1, 2, 0, 1\)"),
    ("overflow", "logits", r"1 logits are NaN or infinite .* \(0, 4, 1, 2\)"),
    ("label_range", "labels", r"class indices 0..2 .* the first 3 at sample 6"),
    ("label_negative", "labels", r"the first -1 at sample 2"),
    ("one_model", "keep", r"1 model; an audit needs at least 2"),
    ("pickled", "labels", r"pickled array.*np.save"),
    ("one_class", "logits", r"1 class\(es\)"),
])
def test_each_malformed_input_has_its_own_message(tmp_path, change, culprit, message):
    paths = _files(tmp_path, *_case(change))
    with pytest.raises(ExternalOutputsError, match=message) as error:
        read_outputs(paths["keep"], paths["logits"], paths["labels"])
    assert str(paths[culprit]) in str(error.value)


def test_keep_balance_policies(tmp_path, caplog):
    keep, logits, labels = synthetic(5)
    keep[:, 4] = True  # IN for every model
    keep[:, 8] = False  # IN for none
    paths = _files(tmp_path, keep, logits, labels)
    args = (paths["keep"], paths["logits"], paths["labels"])
    with pytest.raises(ExternalOutputsError, match=r"1 samples are IN for every model and 1 "
                                                   r"are IN for none \(the first: sample 4\)"):
        read_outputs(*args, balance="error")
    with caplog.at_level(logging.WARNING, logger="miaudit.results.external"):
        read_outputs(*args)  # the default warns and goes on
    assert "IN for every model" in caplog.text
    caplog.clear()
    keep[:, 4] = np.arange(M) % 2 == 0
    np.save(paths["keep"], keep)
    # sample 8 is a population sample: never trained on by design, so nothing to report
    read_outputs(*args, balance="error", population=np.array([8]))
    with pytest.raises(ValueError, match="balance must be one of"):
        read_outputs(*args, balance="maybe")


def test_files_and_folders_that_are_not_there_or_not_arrays(tmp_path):
    keep, logits, labels = synthetic(6)
    paths = _files(tmp_path, keep, logits, labels)
    with pytest.raises(ExternalOutputsError, match=r"absent.npy does not exist"):
        read_outputs(tmp_path / "absent.npy", paths["logits"], paths["labels"])
    (tmp_path / "keep.csv").write_text("1,0\n")
    with pytest.raises(ExternalOutputsError, match=r"keep.csv: unsupported file type '.csv'"):
        read_outputs(tmp_path / "keep.csv", paths["logits"], paths["labels"])
    (tmp_path / "broken.npy").write_bytes(b"not an array")
    with pytest.raises(ExternalOutputsError, match=r"broken.npy is not a .npy file \(no NumPy"):
        read_outputs(tmp_path / "broken.npy", paths["logits"], paths["labels"])
    np.save(tmp_path / "odd.npy", logits[0, :, 0])  # (N, C) beside (N, Q, C) files
    models = [tmp_path / f"m{m}.npy" for m in range(M)]
    for m, path in enumerate(models):
        np.save(path, logits[m])
    with pytest.raises(ExternalOutputsError, match=r"odd.npy: logits of shape \(10, 1, 3\), "
                                                   r"but .*m0.npy has \(10, 2, 3\)"):
        read_outputs(paths["keep"], [*models[:-1], tmp_path / "odd.npy"], paths["labels"])
    with pytest.raises(ExternalOutputsError, match=r"2 queries in the logits but 1 query"):
        read_outputs(paths["keep"], paths["logits"], paths["labels"], query_names=["a"])
    with pytest.raises(ExternalOutputsError, match="no array 'labels'"):
        np.savez(tmp_path / "partial.npz", keep=keep, logits=logits)
        read_bundle(tmp_path / "partial.npz")


def test_lira_folder_problems(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ExternalOutputsError, match="has no model folders"):
        read_lira_experiment(tmp_path / "empty")
    keep, logits, labels = synthetic(7)
    write_lira(tmp_path / "exp", keep, logits, labels)
    with pytest.raises(ExternalOutputsError, match=r"0000000007.npy does not exist \(epochs "):
        read_lira_experiment(tmp_path / "exp", epoch=7)
    (tmp_path / "exp" / "y_train.npy").unlink()
    with pytest.raises(ExternalOutputsError, match="y_train.npy does not exist; pass labels="):
        read_lira_experiment(tmp_path / "exp")
    np.save(tmp_path / "exp" / "y_train.npy", labels)
    for path in (tmp_path / "exp" / f"experiment-3_{M}" / "logits").iterdir():
        path.unlink()
    with pytest.raises(ExternalOutputsError, match=r"experiment-3_12 has no logits"):
        read_lira_experiment(tmp_path / "exp")
