"""Data-set loaders (cifar10, cifar100, imagefolder, location30) and the decoded-data cache,
checked on small files in the official formats written here; the shared copies are optional."""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from miaudit.data import DataError, cifar, imagefolder
from miaudit.data import cache as cache_module
from miaudit.registry import DATASETS

OFFICIAL = list(cifar.CIFAR10_CLASSES)
REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MIAUDIT_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Every test gets its own cache directory and user cache; nothing touches ~/.cache."""
    monkeypatch.setenv("MIAUDIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("MIAUDIT_DATA_DIR", raising=False)
    return tmp_path / "cache"


def entries(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.safetensors")) if directory.exists() else []


# --- writers of the official formats ---------------------------------------------------------

class Py2Pickler(pickle._Pickler):
    """Writes bytes as Python 2 ``str`` opcodes (as cPickle did for the official files), so the
    fixtures exercise the ``latin1`` path the real archives need."""

    dispatch = pickle._Pickler.dispatch.copy()

    def save_py2_str(self, obj: bytes) -> None:
        size = len(obj)
        head = (pickle.SHORT_BINSTRING + bytes([size]) if size < 256
                else pickle.BINSTRING + struct.pack("<i", size))
        self.write(head + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str


def py2_pickle(obj, path: Path) -> None:
    stream = io.BytesIO()
    Py2Pickler(stream, protocol=2).dump(obj)
    # the official files name numpy 1's module; GLOBAL opcodes are newline-terminated text
    path.write_bytes(stream.getvalue().replace(b"numpy._core.multiarray\n",
                                               b"numpy.core.multiarray\n"))


def pixels(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 3072), dtype=np.uint8)


def write_cifar10(root: Path, per_batch: int = 4, n_test: int = 5) -> dict[str, np.ndarray]:
    """A fake cifar-10-batches-py; returns the expected train/test pixels and labels."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    truth = {"x_train": [], "y_train": []}
    for i in range(1, 6):
        data, labels = pixels(per_batch, i), [(i * 3 + j) % 10 for j in range(per_batch)]
        py2_pickle({b"batch_label": b"training batch %d of 5" % i, b"data": data,
                    b"labels": labels, b"filenames": [b"f.png"] * per_batch},
                   folder / f"data_batch_{i}")
        truth["x_train"].append(data)
        truth["y_train"] += labels
    test, test_labels = pixels(n_test, 99), [9 - j for j in range(n_test)]
    py2_pickle({b"data": test, b"labels": test_labels}, folder / "test_batch")
    py2_pickle({b"label_names": [n.encode() for n in OFFICIAL], b"num_vis": 3072},
               folder / "batches.meta")
    return {"x_train": np.concatenate(truth["x_train"]).reshape(-1, 3, 32, 32),
            "y_train": np.array(truth["y_train"]), "x_test": test.reshape(-1, 3, 32, 32),
            "y_test": np.array(test_labels)}


def tar_folder(folder: Path, tarball: Path) -> None:
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)


def write_cifar100(root: Path) -> None:
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    for split, n, seed in (("train", 6, 1), ("test", 3, 2)):
        fine = [(7 * j + seed) % 100 for j in range(n)]
        py2_pickle({b"data": pixels(n, seed), b"fine_labels": fine,
                    b"coarse_labels": [f // 5 for f in fine]}, folder / split)
    py2_pickle({b"fine_label_names": [b"fine%02d" % i for i in range(100)],
                b"coarse_label_names": [b"coarse%02d" % i for i in range(20)]}, folder / "meta")


def save_png(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)


def write_image_folder(root: Path, classes=("zebra", "ant", "moth"), per_class=(3, 2),
                       size=(6, 5)) -> dict[tuple[str, str, int], np.ndarray]:
    """PNG images (lossless, so pixels can be compared exactly), keyed by split/class/index."""
    rng = np.random.default_rng(0)
    images = {}
    for split, count in zip(("train", "test"), per_class, strict=True):
        for name in classes:
            for i in range(count):
                array = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
                save_png(root / split / name / f"{i:03d}.png", array)
                images[(split, name, i)] = array
    return images


def write_location(path: Path, rows: list[tuple[int, list[int]]]) -> None:
    text = "\n".join(f'"{label}",' + ",".join(map(str, features)) for label, features in rows)
    data = (text + "\n").encode()
    info = tarfile.TarInfo("bangkok")
    info.size = len(data)
    with tarfile.open(path, "w:gz") as tar:
        tar.addfile(info, io.BytesIO(data))


def location_rows(n: int = 12) -> list[tuple[int, list[int]]]:
    rng = np.random.default_rng(3)
    return [(1 + (7 * i) % 30, rng.integers(0, 2, 446).tolist()) for i in range(n)]


# --- CIFAR ---------------------------------------------------------------------------------

def test_loaders_are_registered():
    for name in ("cifar10", "cifar100", "imagefolder", "location30", "tabular"):
        assert name in DATASETS


def test_cifar10_pickle_folder_pixels_labels_and_order(tmp_path):
    truth = write_cifar10(tmp_path)
    splits = DATASETS.build("cifar10", data_dir=str(tmp_path))  # str accepted
    assert splits.class_names == OFFICIAL and splits.num_classes == 10
    assert splits.x_train.shape == (20, 3, 32, 32) and splits.x_test.shape == (5, 3, 32, 32)
    assert splits.x_train.dtype == torch.float32 and splits.y_train.dtype == torch.int64
    # batches 1..5 in order, pixels exactly k/255, rows reshaped channel-first
    assert torch.equal(splits.x_train, torch.from_numpy(truth["x_train"]).float() / 255)
    assert torch.equal(splits.x_test, torch.from_numpy(truth["x_test"]).float() / 255)
    assert splits.y_train.tolist() == truth["y_train"].tolist()
    assert splits.y_test.tolist() == [9, 8, 7, 6, 5]
    assert 0.0 <= splits.x_train.min() and splits.x_train.max() <= 1.0


def test_cifar10_tarball_and_folder_itself(tmp_path):
    truth = write_cifar10(tmp_path / "src")
    tar_folder(tmp_path / "src" / "cifar-10-batches-py", tmp_path / "cifar-10-python.tar.gz")
    from_tar = DATASETS.build("cifar10", data_dir=tmp_path)
    assert torch.equal(from_tar.x_train, torch.from_numpy(truth["x_train"]).float() / 255)
    # data_dir may also be the extracted folder itself
    direct = DATASETS.build("cifar10", data_dir=tmp_path / "src" / "cifar-10-batches-py")
    assert torch.equal(direct.x_test, from_tar.x_test)


def test_cifar10_limit_per_class_takes_first_of_each_class(tmp_path):
    truth = write_cifar10(tmp_path)
    splits = DATASETS.build("cifar10", data_dir=tmp_path, limit_per_class=1)
    y = truth["y_train"]
    first = sorted(int(np.flatnonzero(y == c)[0]) for c in np.unique(y))
    assert splits.y_train.tolist() == y[first].tolist()
    assert torch.equal(splits.x_train, torch.from_numpy(truth["x_train"][first]).float() / 255)


def test_cifar100_fine_and_coarse(tmp_path):
    write_cifar100(tmp_path)
    tar_folder(tmp_path / "cifar-100-python", tmp_path / "cifar-100-python.tar.gz")
    fine = DATASETS.build("cifar100", data_dir=tmp_path)
    assert fine.num_classes == 100 and fine.class_names[7] == "fine07"
    assert fine.y_train.tolist() == [1, 8, 15, 22, 29, 36]
    assert fine.x_train.shape == (6, 3, 32, 32) and fine.x_test.shape == (3, 3, 32, 32)
    coarse = DATASETS.build("cifar100", data_dir=tmp_path, labels="coarse")
    assert coarse.num_classes == 20 and coarse.y_train.tolist() == [0, 1, 3, 4, 5, 7]
    assert torch.equal(coarse.x_train, fine.x_train)
    (tmp_path / "cifar-100-python" / "train").unlink()  # now only the tarball is complete
    from_tar = DATASETS.build("cifar100", data_dir=tmp_path, cache=False)
    assert torch.equal(from_tar.x_test, fine.x_test)
    (tmp_path / "cifar-100-python.tar.gz").unlink()
    with pytest.raises(DataError, match=r"cifar100 not found .*cifar-100-python\.tar\.gz"):
        DATASETS.build("cifar100", data_dir=tmp_path)


def test_cifar10_image_folder_uses_official_label_order(tmp_path):
    rng = np.random.default_rng(1)
    for split in ("train", "test"):
        for name in reversed(OFFICIAL):
            save_png(tmp_path / "cifar10-jpeg" / split / name / "0000.png",
                     rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))
    splits = DATASETS.build("cifar10", data_dir=tmp_path)
    assert splits.class_names == OFFICIAL
    assert splits.y_train.tolist() == list(range(10))
    truck = np.array(Image.open(tmp_path / "cifar10-jpeg/test/truck/0000.png"))
    assert torch.equal(splits.x_test[9], torch.from_numpy(truck).permute(2, 0, 1).float() / 255)
    (tmp_path / "cifar10-jpeg" / "train" / "frog" / "0000.png").unlink()
    with pytest.raises(DataError, match="frog holds no PNG or JPEG"):
        DATASETS.build("cifar10", data_dir=tmp_path)


def test_cifar_missing_and_corrupt_data_name_the_path(tmp_path):
    with pytest.raises(DataError, match=r"cifar-10-batches-py.*download=True"):
        DATASETS.build("cifar10", data_dir=tmp_path)
    write_cifar10(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    batch.write_bytes(batch.read_bytes()[:500])  # truncated pickle
    with pytest.raises(DataError, match="data_batch_2 is not a valid CIFAR pickle"):
        DATASETS.build("cifar10", data_dir=tmp_path)
    batch.unlink()
    with pytest.raises(DataError, match="expected the file .*data_batch_2"):
        DATASETS.build("cifar10", data_dir=tmp_path)


def test_cifar_bad_tarball_names_the_path(tmp_path):
    tarball = tmp_path / "cifar-10-python.tar.gz"
    tarball.write_bytes(b"\x1f\x8b\x08 not really gzip" * 10)
    with pytest.raises(DataError, match="cifar-10-python.tar.gz is not a readable cifar10"):
        DATASETS.build("cifar10", data_dir=tmp_path)
    write_cifar10(tmp_path / "src")
    (tmp_path / "src" / "cifar-10-batches-py" / "test_batch").unlink()
    tar_folder(tmp_path / "src" / "cifar-10-batches-py", tarball)
    with pytest.raises(DataError, match="lacks the file cifar-10-batches-py/test_batch"):
        DATASETS.build("cifar10", data_dir=tmp_path)


def test_cifar_batch_with_wrong_shape_is_an_error(tmp_path):
    write_cifar10(tmp_path)
    py2_pickle({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]},
               tmp_path / "cifar-10-batches-py" / "data_batch_1")
    with pytest.raises(DataError, match="data_batch_1: 'data' should be an N x 3072"):
        DATASETS.build("cifar10", data_dir=tmp_path)


class _Evil:
    def __init__(self, target: Path):
        self.target = target

    def __reduce__(self):
        return os.mkdir, (str(self.target),)


@pytest.mark.parametrize("protocol", [2, 5])
def test_restricted_unpickler_refuses_code(tmp_path, protocol):
    target = tmp_path / "pwned"
    payload = pickle.dumps({"data": _Evil(target)}, protocol=protocol)
    with pytest.raises(DataError, match="refusing to load global posix.mkdir"):
        cifar.load_pickle(io.BytesIO(payload), "evil.pkl")
    assert not target.exists()
    system = b"cos\nsystem\n(S'echo pwned'\ntR."  # the classic os.system pickle
    with pytest.raises(DataError, match="refusing to load global os.system"):
        cifar.load_pickle(io.BytesIO(system), "evil.pkl")
    codec = b"c_codecs\nencode\n(S'x'\nS'zlib'\ntR."  # only latin1 bytes are allowed
    with pytest.raises(DataError, match="refusing encoding 'zlib'"):
        cifar.load_pickle(io.BytesIO(codec), "codec.pkl")
    objects = pickle.dumps({"data": np.array([1, "a"], dtype=object)}, protocol=protocol)
    with pytest.raises(DataError, match="refusing object dtype"):
        cifar.load_pickle(io.BytesIO(objects), "objects.pkl")


def test_restricted_unpickler_refuses_arrays_declared_by_shape_alone():
    """Before: a 127-byte pickle calling numpy.ndarray((500000000,)) allocated 500 MB."""
    by_shape = b"cnumpy\nndarray\n((I500000000\ntS'u1'\ntR."
    reconstruct = (b"cnumpy.core.multiarray\n_reconstruct\n(cnumpy\nndarray\n(I500000000\nt"
                   b"S'b'\ntR.")
    for payload in (by_shape, reconstruct):
        assert len(payload) < 128
        with pytest.raises(DataError, match="refusing an array of shape"):
            cifar.load_pickle(io.BytesIO(payload), "bomb.pkl")
    small = cifar.load_pickle(io.BytesIO(b"(dS'x'\ncnumpy\nndarray\n((I3\ntS'u1'\ntRs."), "p")
    assert small["x"].shape == (3,) and type(small["x"]) is np.ndarray


def test_restricted_unpickler_reads_plain_arrays_from_python3_pickles():
    array = np.arange(12, dtype=np.uint8).reshape(3, 4)
    for protocol in (2, 3, 4, 5):
        loaded = cifar.load_pickle(io.BytesIO(pickle.dumps({"data": array, "labels": [1]},
                                                           protocol=protocol)), "p")
        assert np.array_equal(loaded["data"], array) and loaded["labels"] == [1]
        assert type(loaded["data"]) is np.ndarray


def test_md5_verification_on_a_local_file(tmp_path):
    path = tmp_path / "abc.bin"
    path.write_bytes(b"abc")
    cifar.verify_md5(path, "900150983cd24fb0d6963f7d28e17f72")  # RFC 1321 test vector
    with pytest.raises(DataError, match=r"checksum mismatch for .*abc\.bin"):
        cifar.verify_md5(path, "0" * 32)


def test_download_is_verified_and_atomic(tmp_path, monkeypatch):
    """The download path on a file:// URL (no network): a wrong checksum leaves nothing."""
    write_cifar10(tmp_path / "src")
    source = tmp_path / "official.tar.gz"
    tar_folder(tmp_path / "src" / "cifar-10-batches-py", source)
    target = tmp_path / "data"
    bad = dataclasses.replace(cifar.CIFAR10, url=source.as_uri(), md5="0" * 32)
    monkeypatch.setattr(cifar, "CIFAR10", bad)
    with pytest.raises(DataError, match="checksum mismatch"):
        DATASETS.build("cifar10", data_dir=target, download=True)
    assert not target.exists() or not any(target.iterdir())
    good = dataclasses.replace(bad, md5=cifar.md5sum(source))
    monkeypatch.setattr(cifar, "CIFAR10", good)
    splits = DATASETS.build("cifar10", data_dir=target, download=True)
    assert (target / "cifar-10-python.tar.gz").is_file() and splits.x_train.shape[0] == 20


# --- the decoded-data cache ------------------------------------------------------------------

def test_second_load_comes_from_the_cache(tmp_path, monkeypatch, private_cache):
    write_cifar10(tmp_path)
    first = DATASETS.build("cifar10", data_dir=tmp_path)
    assert len(entries(private_cache)) == 1

    def fail(*args, **kwargs):
        raise AssertionError("decoded again despite a valid cache entry")

    monkeypatch.setattr(cifar, "_decode", fail)
    second = DATASETS.build("cifar10", data_dir=tmp_path)
    assert torch.equal(first.x_train, second.x_train)
    assert torch.equal(first.y_test, second.y_test) and second.class_names == OFFICIAL
    with pytest.raises(AssertionError, match="decoded again"):
        DATASETS.build("cifar10", data_dir=tmp_path, cache=False)


def test_changed_source_invalidates_the_cache(tmp_path, private_cache):
    images = write_image_folder(tmp_path)
    before = DATASETS.build("imagefolder", data_dir=tmp_path)
    changed = 255 - images[("train", "ant", 0)]
    path = tmp_path / "train" / "ant" / "000.png"
    save_png(path, changed)
    os.utime(path, ns=(10**18, 10**18))  # a different mtime even on coarse-clock filesystems
    after = DATASETS.build("imagefolder", data_dir=tmp_path)
    assert torch.equal(after.x_train[0], torch.from_numpy(changed).permute(2, 0, 1) / 255.0)
    assert not torch.equal(after.x_train[0], before.x_train[0])
    assert len(entries(private_cache)) == 1  # the stale entry was replaced, not kept


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupt_cache_entry_is_rebuilt(tmp_path, private_cache, caplog, damage):
    truth = write_cifar10(tmp_path)
    DATASETS.build("cifar10", data_dir=tmp_path)
    (entry,) = entries(private_cache)
    raw = bytearray(entry.read_bytes())
    if damage == "truncate":
        raw = raw[: len(raw) // 2]
    else:
        raw[-10] ^= 0xFF  # same size, one pixel byte changed: only the digest sees it
    entry.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, logger="miaudit.data.cache"):
        splits = DATASETS.build("cifar10", data_dir=tmp_path)
    assert "rebuilding" in caplog.text
    assert torch.equal(splits.x_test, torch.from_numpy(truth["x_test"]).float() / 255)
    assert cache_module._read(entry) is not None  # rewritten whole


def test_cache_directory_choice(tmp_path, monkeypatch):
    monkeypatch.delenv("MIAUDIT_CACHE_DIR")
    assert cache_module.cache_dir() == tmp_path / "xdg" / "miaudit"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # invalid per the XDG spec: ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(cache_module.sys, "platform", "linux")
    assert cache_module._fallback_cache_root() == tmp_path / "home" / ".cache" / "miaudit"
    monkeypatch.setenv("MIAUDIT_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert cache_module.cache_dir() == tmp_path / "elsewhere"


def test_loading_never_writes_into_the_data_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("MIAUDIT_CACHE_DIR")
    data = tmp_path / "data"
    write_cifar10(data)
    before = sorted(p.relative_to(data) for p in data.rglob("*"))
    DATASETS.build("cifar10", data_dir=data)
    assert sorted(p.relative_to(data) for p in data.rglob("*")) == before
    assert len(entries(tmp_path / "xdg" / "miaudit")) == 1


def test_pool_digest_sees_inputs_labels_and_shapes():
    from miaudit.auditor.identity import pool_digest

    x, y = torch.zeros(4, 3), torch.tensor([0, 1, 0, 1])
    base = pool_digest(x, y)
    assert base == pool_digest(x.clone(), y.clone())  # deterministic
    changed = [
        (torch.zeros(4, 3).index_fill_(1, torch.tensor([2]), 1e-7), y),
        (x, torch.tensor([0, 1, 1, 1])),
        (torch.zeros(4, 3, 1), y),  # same bytes, another shape
        (x.double(), y),  # same values, another dtype
    ]
    digests = {pool_digest(cx, cy) for cx, cy in changed}
    assert base not in digests and len(digests) == len(changed)
    strided = torch.arange(12.0).reshape(3, 4).t()  # a non-contiguous view hashes as its values
    assert pool_digest(strided, y[:4]) == pool_digest(strided.contiguous(), y[:4])


def test_cache_write_is_atomic_and_leaves_no_temporaries(tmp_path, private_cache):
    arrays = {"x": np.arange(6, dtype=np.uint8), "y": np.arange(3, dtype=np.int64)}
    source = tmp_path / "src.bin"
    source.write_bytes(b"1")
    got, meta = cache_module.cached("demo", root=tmp_path, files=[source], options={"a": 1},
                                    build=lambda: (arrays, {"k": "v"}))
    assert [p.name for p in private_cache.iterdir()] == [entries(private_cache)[0].name]
    again, meta2 = cache_module.cached("demo", root=tmp_path, files=[source], options={"a": 1},
                                       build=lambda: 1 / 0)
    assert meta2 == {"k": "v"} and np.array_equal(again["y"], arrays["y"])
    assert again["x"].dtype == np.uint8  # stored small, converted to float only on use
    # a killed writer's old temporary goes at the next write; a fresh (live) one stays
    (entry,) = entries(private_cache)
    prefix = entry.name.rsplit("-", 1)[0] + "-"
    dead, live = private_cache / f".{prefix}dead.tmp", private_cache / f".{prefix}live.tmp"
    dead.write_bytes(b"partial")
    live.write_bytes(b"partial")
    os.utime(dead, (0, 0))
    source.write_bytes(b"22")  # the source changed: rebuilt, the stale entry replaced
    cache_module.cached("demo", root=tmp_path, files=[source], options={"a": 1},
                        build=lambda: (arrays, {}))
    (new,) = entries(private_cache)
    assert new != entry and not dead.exists() and live.exists()


# --- image folder ----------------------------------------------------------------------------

def test_image_folder_sorted_classes_pixels_and_shapes(tmp_path):
    images = write_image_folder(tmp_path)
    splits = DATASETS.build("imagefolder", data_dir=tmp_path)
    assert splits.class_names == ["ant", "moth", "zebra"]
    assert splits.y_train.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert splits.x_train.shape == (9, 3, 6, 5) and splits.x_test.shape == (6, 3, 6, 5)
    expected = torch.from_numpy(images[("test", "zebra", 1)]).permute(2, 0, 1) / 255.0
    assert torch.equal(splits.x_test[-1], expected)


def test_image_folder_given_classes_grey_and_resize(tmp_path):
    write_image_folder(tmp_path)
    splits = DATASETS.build("imagefolder", data_dir=tmp_path, classes=["zebra", "ant"],
                            color="grey", size=4, limit_per_class=2)
    assert splits.class_names == ["zebra", "ant"] and splits.num_classes == 2
    assert splits.y_train.tolist() == [0, 0, 1, 1] and splits.x_train.shape == (4, 1, 4, 4)
    grey = Image.open(tmp_path / "train" / "zebra" / "000.png").convert("L")
    expected = np.array(grey.resize((4, 4), Image.Resampling.BILINEAR))
    assert torch.equal(splits.x_train[0, 0], torch.from_numpy(expected) / 255.0)
    wide = DATASETS.build("imagefolder", data_dir=tmp_path, size=[3, 7])
    assert wide.x_test.shape == (6, 3, 3, 7)


def test_image_folder_decoding_is_the_same_with_any_worker_count(tmp_path, monkeypatch):
    write_image_folder(tmp_path, per_class=(5, 1))
    monkeypatch.setattr(imagefolder, "_BATCH", 2)  # many small batches racing in threads
    one = DATASETS.build("imagefolder", data_dir=tmp_path, workers=1, cache=False)
    three = DATASETS.build("imagefolder", data_dir=tmp_path, workers=3, cache=False)
    assert torch.equal(one.x_train, three.x_train)


def test_image_folder_errors(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        DATASETS.build("imagefolder", data_dir=tmp_path / "nowhere")
    write_image_folder(tmp_path)
    save_png(tmp_path / "train" / "ant" / "009.png", np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(DataError, match=r"009\.png is 8x8 .* set the option size"):
        DATASETS.build("imagefolder", data_dir=tmp_path)
    (tmp_path / "train" / "ant" / "009.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    with pytest.raises(DataError, match=r"cannot decode image .*009\.png"):
        DATASETS.build("imagefolder", data_dir=tmp_path, size=4)
    (tmp_path / "test" / "beetle").mkdir()
    with pytest.raises(DataError, match=r"\['beetle'\] that are not among"):
        DATASETS.build("imagefolder", data_dir=tmp_path)
    with pytest.raises(DataError, match="expected the class folder .*train/wasp"):
        DATASETS.build("imagefolder", data_dir=tmp_path, classes=["ant", "wasp"])
    empty = tmp_path / "empty"
    (empty / "train").mkdir(parents=True)
    with pytest.raises(DataError, match="found none"):
        DATASETS.build("imagefolder", data_dir=empty)


@pytest.mark.parametrize("options, field", [
    ({"size": 0}, "size"), ({"size": (2, 3, 4)}, "size"), ({"color": "cmyk"}, "color"),
    ({"classes": "ant"}, "classes"), ({"classes": ["a", "a"]}, "classes"),
    ({"limit_per_class": 0}, "limit_per_class"), ({"workers": 0}, "workers"),
    ({"data_dir": 3}, "data_dir"),
])
def test_image_folder_bad_options_name_the_option(tmp_path, options, field):
    write_image_folder(tmp_path)
    with pytest.raises(ValueError, match=field):
        DATASETS.build("imagefolder", **{"data_dir": tmp_path, **options})


def test_cifar_bad_options_name_the_option(tmp_path):
    with pytest.raises(ValueError, match="labels"):
        DATASETS.build("cifar100", data_dir=tmp_path, labels="medium")
    with pytest.raises(ValueError, match="limit_per_class"):
        DATASETS.build("cifar10", data_dir=tmp_path, limit_per_class=-1)


# --- Location-30 -----------------------------------------------------------------------------

def test_location30_from_tgz(tmp_path):
    rows = location_rows(12)
    write_location(tmp_path / "dataset_location.tgz", rows)
    splits = DATASETS.build("location30", data_dir=str(tmp_path), test_fraction=0.25, seed=1)
    assert splits.num_classes == 30 and splits.x_train.shape == (9, 446)
    assert splits.x_test.shape == (3, 446) and splits.x_train.dtype == torch.float32
    x = torch.cat([splits.x_train, splits.x_test])
    y = torch.cat([splits.y_train, splits.y_test])
    truth = {tuple(f): label - 1 for label, f in rows}  # each row's features -> 0-based label
    assert {tuple(int(v) for v in row): int(c) for row, c in zip(x, y, strict=True)} == truth
    again = DATASETS.build("location30", data_dir=tmp_path, test_fraction=0.25, seed=1)
    other = DATASETS.build("location30", data_dir=tmp_path, test_fraction=0.25, seed=2)
    assert torch.equal(again.y_test, splits.y_test)
    assert not torch.equal(other.x_test, splits.x_test)


def test_location30_tarball_read_is_capped(tmp_path, monkeypatch):
    # a member larger than the cap is refused from its header, before anything is read
    import miaudit.data.location as location

    write_location(tmp_path / "dataset_location.tgz", location_rows(12))
    monkeypatch.setattr(location, "MAX_DECOMPRESSED_BYTES", 1000)  # the 12 rows take ~10 kB
    with pytest.raises(DataError, match="decompression bomb"):
        DATASETS.build("location30", data_dir=tmp_path, cache=False)


def test_location30_errors(tmp_path):
    with pytest.raises(DataError, match="expected dataset_location.tgz"):
        DATASETS.build("location30", data_dir=tmp_path)
    tgz = tmp_path / "dataset_location.tgz"
    tgz.write_bytes(b"garbage" * 50)
    with pytest.raises(DataError, match="dataset_location.tgz is not a readable"):
        DATASETS.build("location30", data_dir=tmp_path)
    write_location(tgz, [(31, [0] * 446)])
    with pytest.raises(DataError, match=r"labels should be 1\.\.30"):
        DATASETS.build("location30", data_dir=tmp_path)
    write_location(tgz, [(3, [0] * 445)])
    with pytest.raises(DataError, match="446 features"):
        DATASETS.build("location30", data_dir=tmp_path)
    write_location(tgz, [(3, [0] * 445 + [2])])
    with pytest.raises(DataError, match="binary"):
        DATASETS.build("location30", data_dir=tmp_path)
    with pytest.raises(ValueError, match="test_fraction"):
        DATASETS.build("location30", data_dir=tmp_path, test_fraction=1.5)


# --- the shared development copies (optional) ------------------------------------------------

needs_cifar = pytest.mark.skipif(not (SHARED / "cifar10-jpeg" / "train").is_dir(),
                                 reason=f"shared CIFAR-10 copy not found at {SHARED} "
                                        "(set MIAUDIT_SHARED_DATA)")
needs_location = pytest.mark.skipif(not (SHARED / "location30").is_dir(),
                                    reason=f"shared Location-30 not found at {SHARED} "
                                           "(set MIAUDIT_SHARED_DATA)")


@needs_cifar
def test_shared_cifar10_subset():
    splits = DATASETS.build("cifar10", data_dir=SHARED, limit_per_class=2)
    assert splits.class_names == OFFICIAL
    assert splits.x_train.shape == (20, 3, 32, 32) and splits.x_test.shape == (20, 3, 32, 32)
    assert splits.y_train.tolist() == [c for c in range(10) for _ in range(2)]
    cat = np.array(Image.open(SHARED / "cifar10-jpeg" / "train" / "cat" / "0000.jpg"))
    assert torch.equal(splits.x_train[6], torch.from_numpy(cat).permute(2, 0, 1) / 255.0)


@needs_location
def test_shared_location30():
    splits = DATASETS.build("location30", data_dir=SHARED)
    y = torch.cat([splits.y_train, splits.y_test])
    assert len(y) == 5010 and splits.x_train.shape[1] == 446
    assert set(y.tolist()) == set(range(30))
    assert set(torch.unique(splits.x_train).tolist()) == {0.0, 1.0}
    assert len(splits.y_test) == 1002
