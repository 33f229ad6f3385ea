"""Shared fixtures: small audit configs and the optional shared data copy."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """A script of the repository (experiments/, benchmarks/: not part of the package) as a
    module, registered under its file name so that dataclasses and its own imports find it."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def shared_data_dir() -> Path | None:
    """The read-only data copy beside the repository (CI has it; users need not)."""
    candidates = [os.environ.get("MIAUDIT_SHARED_DATA"), REPO.parent / "shared" / "data"]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


@pytest.fixture
def shared_data() -> Path:
    path = shared_data_dir()
    if path is None:
        pytest.skip("shared data copy (../shared/data or $MIAUDIT_SHARED_DATA) is absent")
    return path


def sigint_as_a_terminal_sends_it() -> None:
    """Ctrl-C tests: a pytest worker can hold SIGINT blocked or ignored after an earlier test
    file's libraries, and a child inherits both across exec (the Ctrl-C tests then waited
    forever); a terminal's Ctrl-C reaches a process whose SIGINT is neither. For
    ``subprocess.Popen(preexec_fn=...)``, and in this process through ``sigint_delivered``."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def sigint_delivered():
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    handler = signal.getsignal(signal.SIGINT)
    sigint_as_a_terminal_sends_it()
    yield
    signal.signal(signal.SIGINT, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


@pytest.fixture(autouse=True)
def _few_threads() -> None:
    torch.set_num_threads(1)  # tiny models: threads only contend


def tiny_audit(tmp_path: Path, **overrides: object) -> dict:
    """A synthetic-data audit that trains 4 MLPs in about a second."""
    config: dict = {
        "name": "tiny",
        "seed": 3,
        "data": {"name": "synthetic", "options": {"n_train": 160, "n_test": 40,
                                                  "shape": [16], "num_classes": 4}},
        "model": {"name": "mlp", "options": {"hidden": [32]}},
        "train": {"epochs": 8, "batch_size": 32, "lr": 0.1},
        "num_models": 4,
        "queries": ["identity"],
        "attacks": ["loss", "lira", "lira:offline=true"],
        "output_dir": str(tmp_path / "runs"),
        "device": "cpu",
    }
    config.update(overrides)
    return config


def committed(lookup):
    """``claims.load_results`` (experiments/claims.py) answering from ``lookup(experiment,
    stem)``: a fragment of results.json as a test writes it (its digest under "sha256"), or
    None for a row not run; the fragment completed with neutral values to a valid record and
    typed as :meth:`miaudit.Results.load` types a committed file."""
    from miaudit import Results

    def load_results(experiment, stem):
        fragment = lookup(experiment, stem)
        if fragment is None:
            return None
        return Results(run_dir=None, summary=typed_summary(fragment),
                       digest=fragment.get("sha256"))

    return load_results


def typed_summary(fragment: dict):
    """``fragment`` (some keys of results.json) completed to a valid Summary: the keys it has
    keep its values; the others get neutral ones (one target of two models, AUC 0.5)."""
    from miaudit import Summary

    targets = fragment.get("targets", [0])
    record = {"name": "test", "run_dir": "/nowhere", "protocol": "rotation", "targets": targets,
              "num_models": len(targets) + 1, "pool_size": 100, "queries": ["identity"],
              "config": {}, **{k: v for k, v in fragment.items() if k != "sha256"}}
    accuracy = {"train_accuracy": 0.9, "test_accuracy": 0.9, "generalization_gap": 0.0,
                "train_accuracy_std": 0.0, "test_accuracy_std": 0.0}
    record["target_models"] = {**accuracy, **fragment.get("target_models", {})}
    record["attacks"] = {label: {"attack": label.split(":")[0], "options": {}, "mean": {},
                                 "std": {}, "min": {}, "max": {}, "per_target": [],
                                 "per_class": {}, **attack,
                                 "pooled": {"auc": 0.5, **attack.get("pooled", {})}}
                         for label, attack in fragment.get("attacks", {}).items()}
    return Summary.model_validate(record)
