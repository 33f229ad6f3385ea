"""The ``tabular`` loader: CSV / .npy / .npz files written here, checked value by value, one
test per malformed input; Location-30 read through it must equal the location30 loader."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from miaudit.data import DataError, tablefiles
from miaudit.data import tabular as tabular_module
from miaudit.data.location import load_location30


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MIAUDIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def load(**options):
    # the function itself, not DATASETS.build: that would import every plugin (seconds);
    # test_data.py checks the registration
    return tabular_module.load_tabular(**options)


def all_rows(splits):
    """Train and test rows together, in a canonical order (by features), for split-free
    comparisons."""
    x = torch.cat([splits.x_train, splits.x_test])
    y = torch.cat([splits.y_train, splits.y_test])
    order = np.lexsort(x.numpy().T[::-1])
    return x[order], y[order]


CSV = """id_label,f1,f2,f3
cat,0,0.5,1
dog,1,0,0
cat,0.25,1,0
bird,1,1,1
dog,0,0,0.75
"""


def test_csv_with_header_and_named_labels(tmp_path):
    (tmp_path / "d.csv").write_text(CSV)
    splits = load(path=tmp_path / "d.csv", test_fraction=0.4, seed=1)
    assert splits.class_names == ["bird", "cat", "dog"] and splits.num_classes == 3
    assert len(splits.y_train) == 3 and len(splits.y_test) == 2
    x, y = all_rows(splits)
    expected = torch.tensor([[0, 0, 0.75], [0, 0.5, 1], [0.25, 1, 0], [1, 0, 0], [1, 1, 1]])
    assert torch.equal(x, expected) and y.tolist() == [2, 1, 1, 2, 0]
    again = load(path=tmp_path / "d.csv", test_fraction=0.4, seed=1)
    other = load(path=tmp_path / "d.csv", test_fraction=0.4, seed=2)
    assert torch.equal(again.x_test, splits.x_test)  # seeded
    assert not torch.equal(other.x_test, splits.x_test)


def test_csv_label_by_name_index_and_no_header(tmp_path):
    (tmp_path / "d.csv").write_text("a,b,target\n0.5,1,3\n0,0,1\n1,1,3\n")
    by_name = load(path=tmp_path / "d.csv", label_column="target", test_fraction=0.34)
    by_index = load(path=tmp_path / "d.csv", label_column=-1, test_fraction=0.34)
    assert by_name.class_names == ["1", "3"] == by_index.class_names  # numeric sort
    assert torch.equal(all_rows(by_name)[0], torch.tensor([[0, 0], [0.5, 1], [1, 1]]))
    assert torch.equal(all_rows(by_name)[1], torch.tensor([0, 1, 1]))
    # no header, semicolons, quoted labels, label 10 sorted after 9 (numbers, not text)
    (tmp_path / "e.txt").write_text('"9";0;1\n"10";1;0\n"9";1;1\n')
    splits = load(path=tmp_path / "e.txt", delimiter=";", test_fraction=0.34)
    assert splits.class_names == ["9", "10"]
    assert torch.equal(all_rows(splits)[1], torch.tensor([0, 1, 0]))


def test_explicit_test_file_shares_the_class_indices(tmp_path):
    (tmp_path / "train.csv").write_text("2,0,1\n5,1,0\n")
    (tmp_path / "test.csv").write_text("7,1,1\n2,0,0\n")
    splits = load(data_dir=tmp_path, path="train.csv", test_path="test.csv")
    assert splits.class_names == ["2", "5", "7"]
    assert splits.y_train.tolist() == [0, 1] and splits.y_test.tolist() == [2, 0]
    assert torch.equal(splits.x_test, torch.tensor([[1.0, 1.0], [0.0, 0.0]]))


def test_scaling_auto_minmax_none(tmp_path):
    (tmp_path / "train.csv").write_text("0,10,5\n1,20,5\n0,30,5\n")
    (tmp_path / "test.csv").write_text("1,40,4\n0,15,5\n")
    common = dict(data_dir=tmp_path, path="train.csv", test_path="test.csv")
    scaled = load(**common)  # values outside [0, 1]: min-max on the train part
    assert torch.allclose(scaled.x_train, torch.tensor([[0, 0], [0.5, 0], [1, 0]]))
    # 40 is above the train range (clipped); the constant feature maps 5 -> 0, 4 -> 0 (clip)
    assert torch.allclose(scaled.x_test, torch.tensor([[1, 0], [0.25, 0]]))
    raw = load(**common, scale="none")
    assert raw.x_test.tolist() == [[40, 4], [15, 5]]
    (tmp_path / "unit.csv").write_text("0,0.2,0.9\n1,0.4,0.1\n1,0.6,0.3\n")
    kept = load(path=tmp_path / "unit.csv", test_fraction=0.34)  # already in [0, 1]: kept
    assert torch.allclose(all_rows(kept)[0], torch.tensor([[0.2, 0.9], [0.4, 0.1], [0.6, 0.3]]))
    forced = load(path=tmp_path / "unit.csv", test_fraction=0.34, scale="minmax")
    assert forced.x_train.min() == 0 and forced.x_train.max() == 1


def test_npy_with_labels_file_or_label_column(tmp_path):
    x = np.random.default_rng(0).random((10, 4)).astype(np.float32)
    y = np.array([3, 1, 3, 1, 1, 3, 3, 1, 1, 3])
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    (tmp_path / "y.txt").write_text("\n".join(str(v) for v in y) + "\n")
    from_npy = load(path=tmp_path / "x.npy", labels_path=tmp_path / "y.npy", test_fraction=0.3)
    from_txt = load(path=tmp_path / "x.npy", labels_path=tmp_path / "y.txt", test_fraction=0.3)
    train, test = tabular_module.seeded_split(10, 0.3, 0)
    for splits in (from_npy, from_txt):
        assert torch.equal(splits.x_train, torch.from_numpy(x[train]))
        assert splits.y_test.tolist() == [int(v == 3) for v in y[test]]
    np.save(tmp_path / "xy.npy", np.column_stack([x, y]))
    from_column = load(path=tmp_path / "xy.npy", label_column=4, test_fraction=0.3)
    assert torch.equal(from_column.x_train, torch.from_numpy(x[train]))
    assert torch.equal(from_column.y_train, from_npy.y_train)


def test_csv_features_with_a_separate_labels_file(tmp_path):
    """Texas-100's layout: a ``feats`` CSV of features only and a ``labels`` file."""
    (tmp_path / "feats").write_text("0,1,1\n1,0,0\n1,1,0\n0,0,0\n")
    (tmp_path / "labels").write_text("4\n2\n4\n3\n")
    splits = load(data_dir=tmp_path, path="feats", labels_path="labels", test_fraction=0.25)
    assert splits.class_names == ["2", "3", "4"] and splits.x_train.shape == (3, 3)
    x, y = all_rows(splits)
    assert x.tolist() == [[0, 0, 0], [0, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert y.tolist() == [1, 2, 0, 2]
    (tmp_path / "short").write_text("4\n2\n")
    with pytest.raises(DataError, match=r"4 feature rows but labels of shape \(2,\)"):
        load(data_dir=tmp_path, path="feats", labels_path="short")


def test_npz_keys_and_image_shaped_arrays(tmp_path):
    x = np.random.default_rng(1).integers(0, 256, (6, 1, 2, 2)).astype(np.uint8)
    y = np.array(["b", "a", "b", "a", "c", "c"])
    np.savez(tmp_path / "d.npz", x=x, y=y)
    np.savez(tmp_path / "e.npz", images=x, classes=y)
    plain = load(path=tmp_path / "d.npz", test_fraction=0.5)
    keyed = load(path=tmp_path / "e.npz", x_key="images", y_key="classes", test_fraction=0.5)
    assert plain.x_train.shape == (3, 1, 2, 2) and plain.class_names == ["a", "b", "c"]
    assert torch.equal(plain.x_train, keyed.x_train)
    # uint8 values outside [0, 1]: scaled per pixel on the train part
    assert plain.x_train.min() >= 0 and plain.x_train.max() <= 1


def test_gzip_and_tarball_member(tmp_path):
    text = "1,0,1\n2,1,0\n1,1,1\n2,0,0\n"
    (tmp_path / "d.csv.gz").write_bytes(gzip.compress(text.encode()))
    with tarfile.open(tmp_path / "d.tgz", "w:gz") as tar:
        for name in ("data/records", "README"):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text.encode()))
    zipped = load(path=tmp_path / "d.csv.gz")
    member = load(path=tmp_path / "d.tgz", member="records")
    assert torch.equal(zipped.x_train, member.x_train) and zipped.class_names == ["1", "2"]
    with pytest.raises(DataError, match="holds 2 files.*member"):
        load(path=tmp_path / "d.tgz")


def test_a_decompression_bomb_is_refused_before_it_fills_memory(tmp_path, monkeypatch):
    """Before: 2.6 MB of gzip expanding to 1 GiB ended in a MemoryError at 7.3 GB. The cap
    is lowered here so the bomb stays small."""
    monkeypatch.setattr(tablefiles, "MAX_DECOMPRESSED_BYTES", 2**20)
    bomb = b"1,0\n2,1\n" * (2**20 // 8 + 1)  # just past the cap
    (tmp_path / "bomb.csv.gz").write_bytes(gzip.compress(bomb))
    with tarfile.open(tmp_path / "bomb.tgz", "w:gz") as tar:
        info = tarfile.TarInfo("records")
        info.size = len(bomb)
        tar.addfile(info, io.BytesIO(bomb))
    for name in ("bomb.csv.gz", "bomb.tgz"):
        with pytest.raises(DataError, match=f"{name} expands to more than 1 MiB"):
            load(path=tmp_path / name)
    (tmp_path / "ok.csv.gz").write_bytes(gzip.compress(bomb[: 2**20 - 8]))
    assert len(load(path=tmp_path / "ok.csv.gz").y_train) > 0  # at the cap: read


def test_parsed_csv_comes_from_the_cache_and_not_the_data_folder(tmp_path, monkeypatch,
                                                                   private_cache):
    data = tmp_path / "data"
    data.mkdir()
    (data / "d.csv").write_text(CSV)
    first = load(path=data / "d.csv")
    assert [p.name for p in data.iterdir()] == ["d.csv"]
    assert len(list(private_cache.glob("tabular-*.safetensors"))) == 1

    def fail(*args, **kwargs):
        raise AssertionError("parsed again despite a valid cache entry")

    monkeypatch.setattr(tabular_module, "parse_csv", fail)
    second = load(path=data / "d.csv")
    assert torch.equal(first.x_train, second.x_train)
    assert second.class_names == first.class_names
    with pytest.raises(AssertionError, match="parsed again"):
        load(path=data / "d.csv", label_column="id_label")  # other options: another entry


def _write(tmp_path: Path, name: str, content) -> Path:
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content)
    else:
        np.save(path, content, allow_pickle=True)
    return path


@pytest.mark.parametrize("name, content, options, message", [
    ("d.csv", "1,0,1\n2,x,0\n1,1,1\n", {}, r"line 2, column 2: non-numeric value 'x'"),
    ("d.csv", "l,a,b\n1,0,1\n2,,0\n", {}, r"line 3, column 2 \('a'\): empty cell"),
    ("d.csv", "1,0,1\n2,nan,0\n1,1,1\n", {}, r"line 2, column 2: value 'nan' is not finite"),
    ("d.csv", "1,0,1\n2,1\n1,1,1\n", {}, r"line 2: 2 columns, but the first row has 3"),
    ("d.csv", "1,0,1\n2,1,0,1\n", {}, r"line 2: 4 columns, but the first row has 3"),
    ("d.csv", "a,b\n1,0\n", {"label_column": "target"}, r"no column named 'target'"),
    ("d.csv", "1,0\n2,1\n", {"label_column": 5}, r"label_column 5 is out of range"),
    ("d.csv", "1,0,1\n1,1,0\n1,1,1\n", {}, r"1 distinct value.*at least 2 classes"),
    ("d.csv", "1.5,0\n2,1\n", {}, r"labels must be integers.*row 0"),
    ("d.csv", "", {}, r"is empty"),
    ("d.csv", "a,b\n", {}, r"no data rows"),
    ("x.npy", np.array([{"a": 1}, None], dtype=object), {"labels_path": "x.npy"},
     r"pickled array"),
    ("x.npy", np.array([[0.0, np.nan], [1, np.inf]]), {}, r"2 features are NaN or infinite, "
     r"the first at index \(0, 0\)"),
    ("x.npy", np.array([[1, 0.5], [2, 0.25]]), {"label_column": "y"}, r"no column names"),
    ("x.npy", np.array(["a", "b"]), {"labels_path": "x.npy"}, r"features must be numbers"),
    ("x.npy", "1,2\n", {}, r"not an .npy/.npz file \(no NumPy header\)"),
])
def test_malformed_inputs_name_the_file_and_the_problem(tmp_path, name, content, options,
                                                        message):
    path = _write(tmp_path, name, content)
    options = {k: tmp_path / v if k.endswith("_path") else v for k, v in options.items()}
    with pytest.raises(DataError, match=message) as error:
        load(path=path, **options)
    assert str(path) in str(error.value)


def test_more_malformed_inputs(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load(path=tmp_path / "absent.csv")
    np.save(tmp_path / "x.npy", np.zeros((4, 2)))
    np.save(tmp_path / "y3.npy", np.array([0, 1, 0]))
    with pytest.raises(DataError, match=r"4 feature rows but labels of shape \(3,\)"):
        load(path=tmp_path / "x.npy", labels_path=tmp_path / "y3.npy")
    np.savez(tmp_path / "d.npz", features=np.zeros((4, 2)))
    with pytest.raises(DataError, match=r"no array 'x' \(arrays: \['features'\]\)"):
        load(path=tmp_path / "d.npz")
    with pytest.raises(ValueError, match="not both"):
        load(path=tmp_path / "x.npy", labels_path=tmp_path / "y3.npy", label_column=0)
    (tmp_path / "h.csv").write_text("a,b\n1,0\n")
    with pytest.raises(DataError, match="has_header is false"):
        load(path=tmp_path / "h.csv", label_column="a", has_header=False)
    with pytest.raises(ValueError, match="scale must be one of"):
        load(path=tmp_path / "h.csv", scale="zscore")


def test_location30_through_the_tabular_loader_equals_the_location30_loader(shared_data):
    tarball = shared_data / "location30" / "dataset_location.tgz"
    if not tarball.is_file():
        pytest.skip(f"{tarball} is absent")
    ours = load(path=tarball, member="bangkok", test_fraction=0.2, seed=3)
    theirs = load_location30(data_dir=shared_data, test_fraction=0.2, seed=3)
    assert ours.x_train.shape == (4008, 446) and ours.num_classes == 30
    assert ours.class_names == theirs.class_names
    for name in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(ours, name), getattr(theirs, name)), name
