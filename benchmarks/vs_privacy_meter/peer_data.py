"""Write the peer's data files (run with the peer's venv): ``cifar10.pkl`` and
``cifar10_population.pkl``, pickled torchvision CIFAR10 objects, as the peer's
``dataset/utils.py:get_dataset`` caches them, holding the first ``n / 10`` images of each class
of the shared JPEG copy's train and test folders (sorted file names, as miaudit's
``cifar10`` loader with ``limit_per_class`` reads them), with the peer's own transform.

    python peer_data.py JPEG_ROOT OUT_DIR N
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import cpu_torchvision  # noqa: F401  (before torchvision: see that module)
import numpy as np
from PIL import Image
from torchvision import transforms
from torchvision.datasets import CIFAR10

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
           "truck"]


def dataset(root: Path, split: str, per_class: int, train: bool) -> CIFAR10:
    images, labels = [], []
    for label, name in enumerate(CLASSES):
        for path in sorted((root / split / name).iterdir())[:per_class]:
            images.append(np.asarray(Image.open(path).convert("RGB"), dtype=np.uint8))
            labels.append(label)
    data = CIFAR10.__new__(CIFAR10)  # no download: fill the object the constructor would
    transform = transforms.Compose([transforms.ToTensor(),
                                    transforms.Normalize([0.5] * 3, [0.5] * 3)])
    super(CIFAR10, data).__init__(str(root), transform=transform)
    data.train, data.data, data.targets = train, np.stack(images), labels
    data.classes = CLASSES
    data.class_to_idx = {name: i for i, name in enumerate(CLASSES)}
    return data


def main() -> None:
    root, out, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    for name, split, train in (("cifar10", "train", True),
                               ("cifar10_population", "test", False)):
        with open(out / f"{name}.pkl", "wb") as file:
            pickle.dump(dataset(root, split, n // 10, train), file)


if __name__ == "__main__":
    main()
