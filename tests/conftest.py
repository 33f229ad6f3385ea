"""Shared fixtures: small audit configs and the optional shared data copy."""

from __future__ import annotations

import importlib.util
import os
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
