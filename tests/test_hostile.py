"""Hostile conditions (issue 13): changed data, damaged files, kills, concurrent runs, bad
input, markup in names, leftovers. Each test reproduces one way a user or the machine can
break an audit and checks the promised outcome: a retrain, a warning naming the file, the old
consistent table, one clear error line (exit 2) with nothing written."""

from __future__ import annotations

import io
import json
import os
import struct
import threading
import time
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from conftest import tiny_audit
from miaudit.auditor import modeljob
from miaudit.auditor import stages as pipeline
from miaudit.auditor.rundir import RunDir
from miaudit.cli import app
from miaudit.config import validate_config
from miaudit.errors import ConfigError
from miaudit.results import scoring


@pytest.fixture(autouse=True)
def _private_data_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MIAUDIT_CACHE_DIR", str(tmp_path / "decoded-cache"))


def _quiet(config):
    return pipeline.audit(validate_config(config), show_progress=False)


def _run_dir(config) -> Path:
    return pipeline.plan_audit(validate_config(config)).run_dir


def _count_training(monkeypatch):
    real, trained = modeljob.train_model, []

    def counting(job, *args, **kwargs):
        trained.append(job.index)
        return real(job, *args, **kwargs)

    monkeypatch.setattr(modeljob, "train_model", counting)
    return trained


def _config_file(tmp_path, **overrides) -> Path:
    path = tmp_path / "audit.yaml"
    path.write_text(yaml.safe_dump(tiny_audit(tmp_path, **overrides)))
    return path


def _cli(*args, env=None):
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def _png(path: Path, pixels: np.ndarray) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels.astype(np.uint8), mode="L").save(path)


def _image_folder(root: Path, per_class: int = 12) -> Path:
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for label, name in enumerate(("a", "b")):
            for i in range(per_class):
                pixels = rng.integers(0, 80, (4, 4)) + 150 * label
                _png(root / split / name / f"{i:03d}.png", pixels)
    return root


def _image_audit(tmp_path, root: Path) -> dict:
    return tiny_audit(tmp_path, data={"name": "imagefolder", "data_dir": str(root),
                                      "options": {"color": "grey"}})


# -- 1. data identity ------------------------------------------------------------------------
def test_changed_data_retrains_and_the_model_cache_serves_no_stale_model(tmp_path, monkeypatch):
    trained = _count_training(monkeypatch)
    config = tiny_audit(tmp_path)
    _quiet(config)
    assert trained == [0, 1, 2, 3]
    trained.clear()
    _quiet(config)
    assert trained == []  # the null check: unchanged data reuses every model
    config["data"]["options"]["separation"] = 0.5  # other synthetic data, same shapes
    _quiet(config)
    assert trained == [0, 1, 2, 3]

    root = _image_folder(tmp_path / "images")
    victim = root / "train" / "a" / "000.png"
    _png(victim, np.full((4, 4), 7))
    images = _image_audit(tmp_path, root)
    trained.clear()
    first = _quiet(images)
    assert trained == [0, 1, 2, 3]
    # other bytes under the same name, same size and (restored) modification time: the
    # decoded-data cache must not serve the old pixels, the model cache not the old models
    stat, size = victim.stat(), victim.stat().st_size
    _png(victim, np.full((4, 4), 9))
    assert victim.stat().st_size == size
    os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    trained.clear()
    second = _quiet(images)
    assert trained == [0, 1, 2, 3]
    assert second.run_dir != first.run_dir  # the data content is in the run identity too


# -- 2. integrity ----------------------------------------------------------------------------
def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # inside the tensor data: the file still parses
    path.write_bytes(bytes(data))


def test_damaged_weights_and_outputs_are_detected_and_recomputed(tmp_path, monkeypatch):
    config = tiny_audit(tmp_path)
    reference = _quiet(config)
    root = reference.run_dir
    cache = tmp_path / "runs" / "model_cache"
    for index in range(4):  # copies, never hard links, between the run and the cache
        run_file = root / "models" / f"{index:04d}" / "weights.safetensors"
        record = json.loads((run_file.parent / "model.json").read_text())
        cached = cache / record["identity"] / "weights.safetensors"
        assert cached.exists() and run_file.stat().st_ino != cached.stat().st_ino
        assert run_file.stat().st_nlink == 1

    weights = root / "models" / "0001" / "weights.safetensors"
    outputs = next((root / "models" / "0000" / "outputs").glob("*.safetensors"))
    intact = {path: path.read_bytes() for path in (weights, outputs)}
    for path in intact:
        _flip_byte(path)
    with pytest.warns(RuntimeWarning) as caught:
        again = _quiet(config)
    messages = " ".join(str(w.message) for w in caught)
    assert str(weights) in messages and str(outputs) in messages
    for path, data in intact.items():
        assert path.read_bytes() == data  # recomputed (or re-fetched) identically
    assert again.attacks["lira"].pooled == reference.attacks["lira"].pooled

    # damage in the cache never reaches a run: the damaged entry is refused, the model retrained
    record = json.loads((root / "models" / "0002" / "model.json").read_text())
    entry = cache / record["identity"] / "weights.safetensors"
    _flip_byte(entry)
    (root / "models" / "0002" / "model.json").unlink()
    trained = _count_training(monkeypatch)
    with pytest.warns(RuntimeWarning, match="damaged"):
        _quiet(config)
    assert trained == [2]
    run_weights = root / "models" / "0002" / "weights.safetensors"
    assert run_weights.read_bytes() != entry.read_bytes()
    assert pipeline.RunDir(root).model_record(2, record["identity"]) is not None


# -- 3. transactional scoring ----------------------------------------------------------------
def test_a_kill_while_rescoring_keeps_the_old_consistent_results(tmp_path, monkeypatch):
    config = tiny_audit(tmp_path)
    root = _quiet(config).run_dir
    before = _cli("report", root)
    assert before.exit_code == 0, before.output
    old = json.loads((root / "results.json").read_text())

    calls = []

    def killed(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # one attack scored and written, the next one killed
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    real = scoring.attack_summary
    monkeypatch.setattr(scoring, "attack_summary", killed)
    config["attacks"] = ["loss", "lira", "rmia"]
    with pytest.raises(KeyboardInterrupt):
        _quiet(config)
    assert len(calls) == 2

    after = _cli("report", root)
    assert after.exit_code == 0, after.output
    assert after.output == before.output
    summary = json.loads((root / "results.json").read_text())
    assert summary == old and (root / summary["scores_dir"]).is_dir()
    assert sorted(p.name for p in root.glob("scores-*")) == [summary["scores_dir"]]
    assert not list(root.glob(".scores-*"))


# -- 4. concurrent runs ----------------------------------------------------------------------
def test_a_second_process_is_refused_or_waits(tmp_path):
    config_file = _config_file(tmp_path)
    root = _run_dir(tiny_audit(tmp_path))
    with RunDir(root).lock():
        refused = _cli("audit", "-c", config_file, "--quiet")
    assert refused.exit_code == 2
    assert "--wait" in refused.output and len(refused.output.strip().splitlines()) == 1
    assert not (root / "manifest.json").exists()

    held, release = threading.Event(), threading.Event()

    def holder():
        with RunDir(root).lock():
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(10)
    threading.Timer(1.0, release.set).start()
    started = time.perf_counter()
    waited = _cli("audit", "-c", config_file, "--quiet", "--wait")
    thread.join()
    assert waited.exit_code == 0, waited.output
    assert time.perf_counter() - started >= 0.9
    assert (root / "results.json").exists()


# -- 5. bad input ----------------------------------------------------------------------------
def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` pixels (a decompression bomb: pillow
    reads the size before any pixel)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def _image_config(tmp_path, root: Path) -> list:
    path = tmp_path / "images.yaml"
    path.write_text(yaml.safe_dump(_image_audit(tmp_path, root)))
    return ["-c", path]


def _bomb_folder(tmp_path):
    root = _image_folder(tmp_path / "images", per_class=3)
    (root / "train" / "a" / "999.png").write_bytes(_png_header(20000, 20000))
    return _image_config(tmp_path, root)


def _undecodable_name(tmp_path):
    root = _image_folder(tmp_path / "images", per_class=3)
    name = os.path.join(os.fsencode(root / "train" / "a"), b"bad\xff.png")
    with open(name, "wb") as stream:
        stream.write(b"not a png")
    return _image_config(tmp_path, root)


def _alias_bomb(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    config = tiny_audit(tmp_path)
    config["model"]["options"] = {"hidden": [32]}
    text = "\n".join(lines) + "\n" + yaml.safe_dump(config)
    text = text.replace("hidden:\n    - 32", "hidden:\n    - 32\n    extra: *a8")
    assert "*a8" in text
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    return ["-c", path]


def _digits_with_data_dir(tmp_path):
    path = tmp_path / "digits.yaml"
    path.write_text(yaml.safe_dump({"data": {"name": "digits"},
                                    "output_dir": str(tmp_path / "runs")}))
    return ["-c", path, "--data-dir", tmp_path]


def _digits(tmp_path, *sets):
    path = tmp_path / "digits.yaml"
    path.write_text(yaml.safe_dump({"data": {"name": "digits"}, "num_models": 2,
                                    "attacks": ["loss"], "device": "cpu",
                                    "output_dir": str(tmp_path / "runs")}))
    return ["-c", path, *[arg for value in sets for arg in ("--set", value)]]


def _etc_passwd_target(tmp_path):
    np.save(tmp_path / "members.npy", np.arange(50))
    return ["--protocol", "fixed_target", "--num-models", "2", "--set", "attacks=[loss]",
            "--set", "target.weights=/etc/passwd", "--set",
            f"target.members={tmp_path / 'members.npy'}"]


def _text(tmp_path, corpus: bytes = b"", tokenizer: str = "bytes", checkpoint: str = "",
          **model):
    """A text audit's config: a small corpus (or ``corpus``), a tokenizer that is no JSON
    ("NOTJSON"), a checkpoint folder of pickled weights ("PICKLED")."""
    text = tmp_path / "corpus.txt"
    text.write_bytes(corpus or b"".join(b"line %d of the corpus\n" % i for i in range(12)))
    options: dict = dict(model)
    if tokenizer == "NOTJSON":
        tokenizer = str(tmp_path / "tokenizer.json")
        (tmp_path / "tokenizer.json").write_text("not json")
    if checkpoint == "PICKLED":
        folder = tmp_path / "ckpt"
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        (folder / "pytorch_model.bin").write_bytes(b"a pickle, never loaded")
        options["checkpoint"] = str(folder)
    path = tmp_path / "text.yaml"
    path.write_text(yaml.safe_dump({
        "data": {"name": "text", "data_dir": str(text), "options": {"tokenizer": tokenizer}},
        "model": {"name": "causal_lm", "options": options}, "queries": ["identity"],
        "train": {"recipe": "lm", "epochs": 1, "batch_size": 4}, "num_models": 2,
        "attacks": ["loss"], "device": "cpu", "output_dir": str(tmp_path / "runs")}))
    return ["-c", path]


def _set_alias_bomb(tmp_path):
    levels = ["l0: &l0 [" + ", ".join(["x"] * 10) + "]"]
    levels += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 6)]
    return ["--set", "model.options={" + ", ".join(levels) + "}"]  # 10**6 items expanded


def _file_under_file(tmp_path):
    (tmp_path / "somefile").write_text("")
    return ["--output-dir", tmp_path / "somefile" / "sub"]


BAD_INPUTS = {
    "output dir under a file": (_file_under_file, "Not a directory"),
    "-c a directory": (lambda t: ["-c", t], "is a directory"),
    "--lr inf": (lambda t: ["--lr", "inf"], "train.lr"),
    "--device cuda:abc": (lambda t: ["--device", "cuda:abc"], "cuda:abc"),
    "--device mps": (lambda t: ["--device", "mps"], "MPS is not available"),
    "--width inf": (lambda t: ["--width", "inf"], "model.width"),
    "--num-models beyond memory": (lambda t: ["--num-models", "100000", "--set",
                                              "data.options.n_train=200000"], "this machine has"),
    "l1:weight=abc": (lambda t: ["--set", "train.penalties=['l1:weight=abc']"], "weight"),
    "shift:dx=abc": (lambda t: ["--queries", "shift:dx=abc"], "dx"),
    "lira with 2 models": (lambda t: ["--num-models", "2"], "reference models"),
    "single-class data": (lambda t: ["--set", "data.options.num_classes=1"], "2"),
    "pool size 2": (lambda t: ["--pool-size", "2"], "pool_size"),
    "flip on tabular data": (lambda t: ["--queries", "flip"], "tabular"),
    "--seed -1": (lambda t: ["--seed", "-1"], "seed"),
    "num_targets under fixed_target": (lambda t: ["--protocol", "fixed_target", "--set",
                                                  "num_targets=1"], "num_targets"),
    "--data-dir for synthetic data": (lambda t: ["--data-dir", t], "data_dir"),
    "--data-dir for digits": (_digits_with_data_dir, "data_dir"),
    "decompression bomb": (_bomb_folder, "999.png"),
    "non-UTF-8 file name": (_undecodable_name, "bad\\xff.png"),
    "YAML alias bomb": (_alias_bomb, "alias"),
    "YAML alias bomb in --set": (_set_alias_bomb, "--set model.options: more than"),
    "a shift larger than the images": (lambda t: ["--set", "data.options.shape=[1, 6, 6]",
                                                  "--queries", "shift:dx=100"], "6x6"),
    "--epochs abc (a type error)": (lambda t: ["--epochs", "abc"], "'--epochs'"),
    "an unknown flag": (lambda t: ["--epoch", "3"], "No such option: --epoch"),
    "train.milestones outside training": (lambda t: ["--set", "train.milestones=[2.0, -1]"],
                                          "train.milestones"),
    # issue 83: unbounded work refused up front, with the estimate and the override
    "boundary:budget=1e12": (lambda t: ["--set", "data.options.shape=[1, 4, 4]", "--queries",
                                        "boundary:budget=1000000000000"],
                             "MIAUDIT_MAX_PASSES_PER_SAMPLE=1e+12"),
    "dropout:n=1e8": (lambda t: ["--queries", "dropout:n=100000000"],
                      "need 1e+08 forward passes per sample"),
    "robust_eval.steps=1e9": (lambda t: ["--set", "data.options.shape=[1, 4, 4]", "--set",
                                         "robust_eval={steps: 1000000000}"],
                              "robust_eval.steps need 1e+09"),
    "--num-models 100000 (files)": (lambda t: ["--num-models", "100000"], "MIAUDIT_MAX_FILES"),
    "an MLP beyond memory": (lambda t: ["--set", "model.options.hidden=[1000000, 1000000]"],
                             "1,000,022,000,004 parameters"),
    "synthetic n_train=1e8": (lambda t: ["--set", "data.options.n_train=100000000", "--set",
                                         "data.options.shape=[1000]"], "to generate"),
    "synthetic shape=[1e5,1e5]": (lambda t: ["--set", "data.options.shape=[100000, 100000]"],
                                  "to generate"),
    "--device tpu": (lambda t: ["--device", "tpu"], "got 'tpu'"),
    "digits test_fraction=1.5": (lambda t: _digits(t, "data.options.test_fraction=1.5"),
                                 "test_fraction must be a number in (0, 1)"),
    "target.weights=/etc/passwd": (lambda t: _etc_passwd_target(t), "/etc/passwd is not a"),
    "a tokenizer that is no JSON": (lambda t: _text(t, tokenizer="NOTJSON"),
                                    "is not a HF tokenizer.json"),
    "a pickled HF checkpoint": (lambda t: _text(t, checkpoint="PICKLED"),
                                "safe_serialization=True"),
    "causal_lm layers=0": (lambda t: _text(t, layers=0), "layers must be an integer >= 1"),
    "a corpus with NUL bytes": (lambda t: _text(t, corpus=b"one\x00two\nthree\n"),
                                "NUL"),
    "a corpus line over the cap": (lambda t: _text(t, corpus=b"x" * (2**20 + 1) + b"\n"),
                                   "longer than"),
    "attack labels sharing a scores file": (lambda t: [
        "--set", 'attacks=[{name: lira, label: "x y"}, {name: loss, label: "x_y"}]'],
        "both save their scores as x_y.npy"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_gives_one_clear_line_and_writes_nothing(tmp_path, case):
    make_args, expected = BAD_INPUTS[case]
    args = make_args(tmp_path)
    base = [] if "-c" in args else ["-c", _config_file(tmp_path)]
    started = time.perf_counter()
    result = _cli("audit", *base, "--quiet", *args)
    assert time.perf_counter() - started < 10
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert expected in lines[0] and "Traceback" not in result.output
    assert not (tmp_path / "runs").exists()


def test_option_dicts_are_bounded_when_given_as_python_objects(tmp_path):
    bomb: list = ["x"] * 10
    for _ in range(8):
        bomb = [bomb] * 10  # shared like YAML aliases: 10**9 items once expanded
    for field in ("model", "data", "train"):
        config = tiny_audit(tmp_path)
        key = "recipe_options" if field == "train" else "options"
        config[field][key] = {**config[field].get(key, {}), "extra": bomb}
        started = time.perf_counter()
        with pytest.raises(ConfigError, match=f"{field}.{key}: more than"):
            validate_config(config)
        assert time.perf_counter() - started < 2


def test_a_diverging_model_is_named_with_its_epoch(tmp_path):
    result = _cli("audit", "-c", _config_file(tmp_path), "--quiet", "--lr", "1e6")
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and "model 0 diverged" in line and "at epoch" in line
    assert "lower train.lr" in line


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("finished")
    config = tiny_audit(tmp_path)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MIAUDIT_CACHE_DIR", str(tmp_path / "decoded-cache"))
        results = pipeline.audit(validate_config(config), show_progress=False)
    return tmp_path, config, results.run_dir


@pytest.mark.parametrize("content", ['{"layout": 2, "run_', "{}", "[]"])
@pytest.mark.parametrize("name", ["manifest.json", "results.json", "models/0001/model.json"])
def test_truncated_or_empty_records_name_the_file_and_the_recovery(
        finished_run, tmp_path, name, content):
    import shutil

    source, config, root = finished_run
    runs = shutil.copytree(source / "runs", tmp_path / "runs")
    root = runs / root.name
    (root / name).write_text(content)
    config = {**config, "output_dir": str(runs)}
    if name == "results.json":
        result = _cli("report", root)
    else:
        config_file = tmp_path / "audit.yaml"
        config_file.write_text(yaml.safe_dump({**config, "share_models": False}))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = _cli("audit", "-c", config_file, "--quiet")
        if name.endswith("model.json"):  # a model record is recomputed, with a warning
            assert result.exit_code == 0, result.output
            assert any(name in str(w.message) for w in caught)
            assert json.loads((root / name).read_text())["identity"]
            return
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and name in line
    assert "older miaudit" not in line
    assert "delete" in line or "rerun" in line


# -- 6. rich markup --------------------------------------------------------------------------
def test_names_print_verbatim_and_long_paths_are_not_wrapped(tmp_path):
    config_file = _config_file(tmp_path)
    result = _cli("audit", "-c", config_file, "--quiet", "--dataset", "[/x]")
    assert result.exit_code == 2 and "'[/x]'" in result.output, result.output
    image_config = _image_config(tmp_path, tmp_path / "nowhere")
    result = _cli("audit", *image_config, "--quiet", "--data-dir", "data/[bold]x")
    assert result.exit_code == 2 and "data/[bold]x" in result.output, result.output

    runs = tmp_path / "[red]runs"
    result = _cli("audit", "-c", config_file, "--quiet", "--output-dir", runs)
    assert result.exit_code == 0, result.output
    assert f"run directory: {runs}/tiny-" in result.output

    deep = "data/" + "/".join(f"folder-number-{i:02d}" for i in range(12))
    result = _cli("audit", *image_config, "--quiet", "--data-dir", deep,
                  env={"COLUMNS": "80"})
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and deep in result.output


# -- 7. failed configs leave nothing behind --------------------------------------------------
def test_a_failed_audit_leaves_no_empty_run_directory(tmp_path):
    config_file = _config_file(tmp_path)
    for args in (["--lr", "1e6"],  # fails while training the first model
                 ["--queries", "flip"]):  # fails in the plan (image query, tabular data)
        result = _cli("audit", "-c", config_file, "--quiet", *args)
        assert result.exit_code == 2, result.output
        assert not (tmp_path / "runs").exists()
    (tmp_path / "runs").mkdir()  # an existing output_dir stays, and holds nothing new
    result = _cli("audit", "-c", config_file, "--quiet", "--lr", "1e6")
    assert result.exit_code == 2
    assert list((tmp_path / "runs").iterdir()) == []


# -- 8. leftovers of a kill ------------------------------------------------------------------
def test_temporaries_left_by_a_kill_are_swept_on_the_next_start(tmp_path):
    config = tiny_audit(tmp_path)
    root = _quiet(config).run_dir
    cache = tmp_path / "runs" / "model_cache"
    entry = next(p for p in cache.iterdir() if p.is_dir())
    leftovers = [root / ".results.json.k1ll.tmp", root / "models" / "0000" / ".model.json.x.tmp",
                 root / "models" / "0001" / "outputs" / ".abc.safetensors.y.tmp",
                 entry / ".weights.safetensors.z.tmp"]
    for path in leftovers:
        path.write_bytes(b"partial")
    staging = root / ".scores-q7.tmp"
    staging.mkdir()
    (staging / "loss.npy").write_bytes(b"partial")
    lock = cache / f".{entry.name}.lock"
    lock.write_text("")
    console = Console(file=io.StringIO(), width=200)
    pipeline.audit(validate_config(config), console=console, show_progress=False)
    for path in [*leftovers, staging]:
        assert not path.exists(), path
    assert lock.exists()  # lock files are kept: another process may hold one
    assert "removed 5 temporary" in console.file.getvalue()


# -- 9. report is read-only ------------------------------------------------------------------
def _listing(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in sorted(root.rglob("*"))}


def test_report_modifies_nothing(tmp_path):
    runs = tmp_path / "runs"
    root = _quiet(tiny_audit(tmp_path)).run_dir
    before = _listing(runs)
    time.sleep(0.01)
    result = _cli("report", root)
    assert result.exit_code == 0, result.output
    assert "lira" in result.output
    assert _listing(runs) == before


# -- 9. miaudit score: bad input as for audit (issue 22) ------------------------------------
def _score_files(root: Path) -> None:
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    keep = (np.arange(6)[:, None] % 2) == (np.arange(30)[None] % 2)
    logits = rng.normal(size=(6, 30, 1, 3)).astype(np.float32)
    np.save(root / "keep.npy", keep)
    np.save(root / "logits.npy", logits)
    np.save(root / "labels.npy", rng.integers(0, 3, 30))
    np.save(root / "allkeep.npy", np.ones((6, 30), bool))
    np.save(root / "keep0.npy", np.zeros((6, 0), bool))
    np.save(root / "logits0.npy", np.zeros((6, 0, 1, 3), np.float32))
    np.save(root / "labels0.npy", np.zeros(0, np.int64))
    np.savez(root / "objects.npz", keep=np.array([1, None], dtype=object))
    np.save(root / "pop_pickle.npy", np.array([1, None], dtype=object), allow_pickle=True)
    np.savez(root / "pop.npz", a=np.arange(3), b=np.arange(2))
    np.save(root / "pop_out.npy", np.array([0, 99]))
    np.save(root / "pop_float.npy", np.array([1.7, 2.2]))
    save_file({"keep": keep, "logits": logits, "labels": rng.integers(0, 3, 30)},
              str(root / "meta.safetensors"), metadata={"query_names": "not json["})


_FILES = ["--logits", "logits.npy", "--labels", "labels.npy", "--attacks", "loss;lira"]
SCORE_BAD_INPUTS = {
    "all-member keep, --balance warn": (["--keep", "allkeep.npy", *_FILES, "--balance", "warn"],
                                        "needs both members and non-members"),
    "zero samples": (["--keep", "keep0.npy", "--logits", "logits0.npy", "--labels",
                      "labels0.npy"], "0 samples"),
    "an .npz member that is a pickle": (["--keep", "objects.npz", *_FILES], "Python objects"),
    "--population a pickle": (["--keep", "keep.npy", *_FILES, "--population", "pop_pickle.npy"],
                              "Python objects"),
    "--population an .npz": (["--keep", "keep.npy", *_FILES, "--population", "pop.npz"],
                             "no array 'population'"),
    "--population out of range": (["--keep", "keep.npy", *_FILES, "--population",
                                   "pop_out.npy"], "0..29"),
    "--population floats": (["--keep", "keep.npy", *_FILES, "--population", "pop_float.npy"],
                            "integer sample indices"),
    "safetensors metadata not JSON": (["meta.safetensors"], "JSON list"),
    "--balance maybe": (["--keep", "keep.npy", *_FILES, "--balance", "maybe"], "maybe"),
    "a folder for a file": (["--keep", ".", *_FILES], "is a folder, not a file"),
    "colliding labels": (["--keep", "keep.npy", "--logits", "logits.npy", "--labels",
                          "labels.npy", "--attacks", "loss;LOSS"], "both save their scores"),
}


@pytest.mark.parametrize("case", sorted(SCORE_BAD_INPUTS))
def test_score_bad_input_gives_one_clear_line_and_writes_nothing(tmp_path, monkeypatch, case):
    _score_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    args, expected = SCORE_BAD_INPUTS[case]
    result = _cli("score", *args, "--out", tmp_path / "out")
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert expected in lines[0] and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def _zip_bomb(path: Path) -> Path:
    """An .npz whose one member expands to 520 MiB of zeros (2.4 MB on disk)."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive, \
            archive.open("keep.npy", "w", force_zip64=True) as member:
        for _ in range(520):
            member.write(bytes(2**20))
    return path


def _text_bundle(root: Path, **change) -> Path:
    """A valid per-token bundle (6 models, 20 texts, 5 tokens, the last 5 texts 3 tokens
    long), with arrays replaced or edited by ``change`` (name -> function of the arrays)."""
    rng = np.random.default_rng(0)
    keep = (np.arange(6)[:, None] % 2) == (np.arange(20)[None] % 2)
    log_p = -rng.gamma(2.0, 1.0, (6, 20, 5)) - 1e-3
    log_p[:, 15:, 3:] = np.nan
    arrays = {"keep": keep, "token_logprobs": log_p,
              "token_mu": np.where(np.isnan(log_p), np.nan, -1.0),
              "token_sigma": np.where(np.isnan(log_p), np.nan, 0.5),
              "token_correct": np.where(np.isnan(log_p), np.nan, 1.0)}
    for name, edit in change.items():
        arrays[name] = edit(arrays)
    path = root / "bundle.npz"
    np.savez(path, **arrays)
    return path


def _set(name: str, index: tuple, value) -> dict:
    def edit(arrays):
        array = arrays[name].astype(np.result_type(arrays[name], np.asarray(value)))
        array[index] = value
        return array
    return {name: edit}


TEXT_BAD_INPUTS = {
    "token_correct of 5": (_set("token_correct", (0, 0, 0), 5.0), "token_correct holds 5"),
    "token_sigma of 0": (_set("token_sigma", (1, 2, 0), 0.0), "token_sigma holds 0"),
    "token_sigma of -1": (_set("token_sigma", (1, 2, 0), -1.0), "must be > 0"),
    "+inf log-prob": (_set("token_logprobs", (0, 3, 1), np.inf), "infinite (model 0, text 3"),
    "-inf log-prob": (_set("token_logprobs", (2, 3, 4), -np.inf), "infinite (model 2, text 3"),
    "NaN before a text's first token": (_set("token_logprobs", (0, 4, 0), np.nan),
                                        "NaN at token 0 of text 4"),
    "complex log-probs": ({"token_logprobs": lambda a: a["token_logprobs"] + 0j},
                          "token_logprobs holds complex numbers"),
    "string token_mu": ({"token_mu": lambda a: a["token_mu"].astype(str)}, "token_mu holds"),
}


@pytest.mark.parametrize("case", sorted(TEXT_BAD_INPUTS))
def test_score_text_bundles_are_validated_like_audits(tmp_path, case):
    """Before: token_correct of 5 gave 500% accuracy, a sigma of 0 an AUC of 0.500, inf and
    a NaN before the first token passed as padding, complex values were cast."""
    change, expected = TEXT_BAD_INPUTS[case]
    result = _cli("score", _text_bundle(tmp_path, **change), "--out", tmp_path / "out")
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ") and expected in line, line
    assert not (tmp_path / "out").exists()


def test_a_valid_text_bundle_scores(tmp_path):
    """The null check of the table above: the unedited bundle is accepted."""
    result = _cli("score", _text_bundle(tmp_path), "--out", tmp_path / "out",
                  "--attacks", "loss;min_k_pp")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("where", ["text bundle --population", "logits bundle", "tabular"])
def test_out_of_range_population_and_zip_bombs_give_one_line(tmp_path, where):
    if where == "text bundle --population":
        np.save(tmp_path / "pop.npy", np.array([0, 20]))
        args = ["score", _text_bundle(tmp_path), "--population", tmp_path / "pop.npy",
                "--out", tmp_path / "out"]
        expected = "0..19"
    elif where == "logits bundle":
        args = ["score", _zip_bomb(tmp_path / "bomb.npz"), "--out", tmp_path / "out"]
        expected = "more than the 512 MiB allowed"
    else:
        bomb = _zip_bomb(tmp_path / "bomb.npz")
        args = ["audit", "-c", _config_file(tmp_path, data={
            "name": "tabular", "options": {"path": str(bomb)}}), "--quiet"]
        expected = "more than the 512 MiB allowed"
    result = _cli(*args)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ") and expected in line and "bomb.npz" in line \
        if where != "text bundle --population" else expected in line, line
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()


def test_compare_prints_paths_verbatim_on_one_line(tmp_path):
    """Before: `miaudit compare "/tmp/nope[/red]"` was parsed as markup, and compare's errors
    wrapped at the terminal's width."""
    missing = tmp_path / ("x" * 150) / "nope[/red]"
    result = _cli("compare", missing, env={"COLUMNS": "40"})
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ") and str(missing) in line


class _Payload:
    """Unpickling it would call print: weights_only loading must refuse it."""

    def __reduce__(self):
        return (print, ("unpickled!",))


def test_a_pickled_pretrained_target_is_refused_with_one_line(tmp_path):
    import pickle

    (tmp_path / "target.pt").write_bytes(pickle.dumps({"w": _Payload()}))
    np.save(tmp_path / "members.npy", np.arange(50))
    path = _config_file(tmp_path, protocol="fixed_target", num_models=2, attacks=["loss"],
                        target={"weights": str(tmp_path / "target.pt"),
                                "members": str(tmp_path / "members.npy")})
    result = _cli("audit", "-c", path, "--quiet")
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: target.weights") and "not a plain state dict" in line
    assert "unpickled!" not in result.output
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", ["report", "compare", "tabular", "imagefolder"])
def test_a_path_of_the_wrong_kind_is_named_as_such(tmp_path, command):
    """Before: "does not exist" was said of paths that exist but are of the wrong kind."""
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    if command in ("report", "compare"):
        result = _cli(command, a_file if command == "report" else tmp_path)
        expected = f"{a_file} is a file, not a folder" if command == "report" else \
            f"{tmp_path / 'results.json'} does not exist"
    else:
        data = {"name": "tabular", "options": {"path": str(tmp_path)}} if command == "tabular" \
            else {"name": "imagefolder", "data_dir": str(a_file)}
        result = _cli("audit", "-c", _config_file(tmp_path, data=data), "--quiet")
        expected = f"{tmp_path} is a folder, not a file" if command == "tabular" else \
            f"{a_file} is a file, not a folder"
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert expected in line, line


# -- issue 83: dp-audit, names that are not UTF-8, a run directory missing its memberships --
DP_BAD_INPUTS = {
    "--device tpu": (["--device", "tpu"], "'tpu' is not a device"),
    "--runs 1e8": (["--runs", "100000000"], "MIAUDIT_MAX_DP_AUDIT_EPOCHS"),
    "--guesses with --runs 2": (["--runs", "2", "--guesses", "5,5"],
                                "guesses apply to the one-run audit"),
    "-c a YAML list": (["-c", "LIST"], "holds a YAML list"),
}
if not __import__("torch").cuda.is_available():
    DP_BAD_INPUTS["--device cuda without CUDA"] = (["--device", "cuda"], "CUDA is not available")


@pytest.mark.parametrize("case", sorted(DP_BAD_INPUTS))
def test_dp_audit_bad_input_gives_one_line(tmp_path, case):
    args, expected = DP_BAD_INPUTS[case]
    if "LIST" in args:
        (tmp_path / "list.yaml").write_text("- a\n- b\n")
        args = ["-c", tmp_path / "list.yaml"]
    started = time.perf_counter()
    result = _cli("dp-audit", *args, "--epochs", "1")
    assert time.perf_counter() - started < 10
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("error: ") and expected in line, line


def test_a_class_folder_name_that_is_not_utf8_is_escaped_in_every_output(tmp_path):
    """Before: the audit trained, then report.html failed with UnicodeEncodeError."""
    root = _image_folder(tmp_path / "images")
    for split in ("train", "test"):
        os.rename(os.fsencode(root / split / "b"), os.path.join(os.fsencode(root / split),
                                                                b"b\xff"))
    result = _cli("audit", "-c", _config_file(tmp_path, data={
        "name": "imagefolder", "data_dir": str(root), "options": {"color": "grey"}}), "--quiet")
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "runs").glob("tiny-*")
    assert "b\\xff" in (run / "report.html").read_text(encoding="utf-8")
    again = _cli("report", run, "--html")
    assert again.exit_code == 0, again.output


def test_compare_paired_names_a_missing_keep_file(tmp_path):
    """Before: with keep.npy missing, the run was said to hold "no scores"."""
    run = _quiet(tiny_audit(tmp_path)).run_dir
    (run / "keep.npy").unlink()
    result = _cli("compare", run, run, "--paired")
    assert result.exit_code == 0, result.output  # the table prints; the pairing says why not
    assert "holds no keep.npy; rerun the audit" in " ".join(result.output.split())
