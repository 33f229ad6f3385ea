"""Load a finished audit's run directory (keep.npy, models/*/outputs.safetensors, manifest.json)
into an :class:`AttackInput`, for benchmarks that re-run attacks on stored outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file

from miaudit.attacks import AttackInput
from miaudit.data import make_pool
from miaudit.registry import DATASETS


def load_run(run_dir: str | Path) -> tuple[AttackInput, dict[str, Any]]:
    """(AttackInput of every model's stored logits, the run's config as a dict). The labels
    are rebuilt from the config's data section (the pool is deterministic given the seed)."""
    root = Path(run_dir)
    config = json.loads((root / "manifest.json").read_text())["config"]
    keep = np.load(root / "keep.npy")
    logits = np.stack([load_file(root / "models" / f"{m:04d}" / "outputs.safetensors")["logits"]
                       for m in range(len(keep))])
    data_cfg = config["data"]
    splits = DATASETS.build(data_cfg["name"], data_dir=data_cfg["data_dir"],
                            **data_cfg["options"])
    pool = make_pool(splits, data_cfg["pool"], data_cfg["pool_size"], config["seed"])
    labels = pool.y.numpy()
    return AttackInput(logits=logits, labels=labels, keep=keep,
                       query_names=list(config["queries"])), config
