"""Score both tools' trained models alike: logits of each tool's 10 models on the same 4,000
CIFAR-10 images (the first 200 train + 200 test images of each class), stacked into keep /
logits / labels arrays with each tool's population (2,000 images no model of it trained on:
the peer's test half, miaudit's planned population) and scored by `miaudit score --attacks
'rmia;lira'` (every model the target in turn). Run in miaudit's environment after
`vs_privacy_meter.sh run`.

    python score_both.py PM_WORK JPEG_ROOT
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from pm_cnn import PeerCNN
from safetensors.torch import load_file

from miaudit import DATASETS


@torch.no_grad()
def logits_of(states: list[dict], x: torch.Tensor) -> np.ndarray:
    outputs = []
    for state in states:
        model = PeerCNN()
        model.load_state_dict(state)
        outputs.append(model.eval()(x).numpy())
    return np.stack(outputs).astype(np.float32)


def peer_arrays(work: Path, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The newest peer run's models (model_i.pkl state dicts) and memberships.npy (models x
    2,000 training images); the 2,000 test images get keep = False."""
    run = sorted((work / "runs").glob("peer-*"))[-1]
    memberships = np.load(next(run.rglob("memberships.npy")))
    folder = next(run.rglob("memberships.npy")).parent
    states = []
    for index in range(len(memberships)):
        with open(folder / f"model_{index}.pkl", "rb") as file:
            states.append(pickle.load(file))
    keep = np.concatenate([memberships, np.zeros_like(memberships)], axis=1)
    population = np.arange(memberships.shape[1], keep.shape[1])  # the test images
    return keep, logits_of(states, (x - 0.5) / 0.5), population  # peer's Normalize(0.5, 0.5)


def miaudit_arrays(work: Path, x: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The newest miaudit run: keep.npy (models x pool; its pool is the same 4,000 images,
    train then test), the saved weights and its population (2,000 pool samples, random over
    train and test images, that no model trained on)."""
    run = sorted((work / "runs").glob("miaudit-*"))[-1]
    root = next(run.rglob("keep.npy")).parent
    keep = np.load(root / "keep.npy")
    states = [load_file(root / "models" / f"{i:04d}" / "weights.safetensors")
              for i in range(len(keep))]
    return keep, logits_of(states, x), np.load(root / "split.npz")["population"]


def main() -> None:
    work, jpeg = Path(sys.argv[1]), sys.argv[2]
    splits = DATASETS.build("cifar10", data_dir=jpeg, limit_per_class=200)
    x, y = torch.cat([splits.x_train, splits.x_test]), torch.cat([splits.y_train, splits.y_test])
    out = work / "scored"
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "labels.npy", y.numpy())
    for tool, arrays in (("peer", peer_arrays), ("miaudit", miaudit_arrays)):
        keep, logits, population = arrays(work, x)
        np.save(out / f"{tool}_population.npy", population)
        np.save(out / f"{tool}_keep.npy", keep)
        np.save(out / f"{tool}_logits.npy", logits)
        correct = logits.argmax(-1) == y.numpy()  # (models, samples)
        print(f"{tool}: {len(keep)} models, train acc "
              f"{np.mean([correct[i][keep[i]].mean() for i in range(len(keep))]):.3f}, "
              f"population acc {correct[:, population].mean():.3f}", flush=True)
        subprocess.run([sys.executable, "-m", "miaudit.cli", "score",
                        "--keep", str(out / f"{tool}_keep.npy"),
                        "--logits", str(out / f"{tool}_logits.npy"),
                        "--labels", str(out / "labels.npy"),
                        "--population", str(out / f"{tool}_population.npy"),
                        "--attacks", "rmia;lira", "--out", str(out / tool)], check=True)


if __name__ == "__main__":
    main()
