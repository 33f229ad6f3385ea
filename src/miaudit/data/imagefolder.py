"""A generic image folder, ``train/<class>/*`` and ``test/<class>/*`` (PNG or JPEG), so users can
audit models of their own images. Decoded once with pillow and cached as uint8."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from miaudit._runtime.io import path_problem, printable
from miaudit.data._base import DataError, DataSplits
from miaudit.data.cache import as_path, cached, to_float
from miaudit.registry import DATASETS

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg")
COLORS = {"rgb": "RGB", "grey": "L", "gray": "L"}
SPLITS = ("train", "test")
_BATCH = 256  # images per decoding task: large enough to amortize scheduling, small for balance


def check_size(size: Any) -> tuple[int, int] | None:
    """``size`` option: ``None`` (all images must share one size), ``n`` or ``(height, width)``."""
    if size is None:
        return None
    pair = (size, size) if isinstance(size, int) else tuple(size) if isinstance(
        size, (list, tuple)) else None
    if pair is None or len(pair) != 2 or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in pair):
        raise ValueError(f"size must be a positive int or (height, width), got {size!r}")
    return pair


def check_limit(limit_per_class: Any) -> int | None:
    """``limit_per_class`` option: ``None`` or a positive int."""
    if limit_per_class is None:
        return None
    if isinstance(limit_per_class, bool) or not isinstance(limit_per_class, int) \
            or limit_per_class < 1:
        raise ValueError(f"limit_per_class must be a positive int, got {limit_per_class!r}")
    return limit_per_class


def _visible(entries: Sequence[os.DirEntry]) -> list[os.DirEntry]:
    return sorted((e for e in entries if not e.name.startswith(".")), key=lambda e: e.name)


def discover_classes(root: Path) -> list[str]:
    """Sorted names of the class folders of ``root/train``."""
    train = root / "train"
    if not train.is_dir():
        raise DataError(f"expected an image folder with train/<class>/ and test/<class>/ "
                        f"sub-folders, but {train} is not a directory")
    with os.scandir(train) as entries:
        names = [e.name for e in _visible(list(entries)) if e.is_dir()]
    if not names:
        raise DataError(f"expected class folders train/<class>/ in {train}, found none")
    return names


def list_images(root: Path, classes: Sequence[str], limit: int | None, exclusive: bool = True,
                ) -> dict[str, tuple[list[str], np.ndarray]]:
    """Per split, the image files (sorted by name within a class) and their int64 labels;
    ``exclusive``: class folders other than ``classes`` are an error rather than ignored."""
    listing = {}
    for split in SPLITS:
        split_dir = root / split
        if not split_dir.is_dir():
            raise DataError(f"expected the folder {split_dir} (layout {split}/<class>/*.png|jpg)")
        with os.scandir(split_dir) as entries:
            extra = {e.name for e in _visible(list(entries)) if e.is_dir()} - set(classes)
        if extra and exclusive:
            raise DataError(f"{split_dir} has class folders {sorted(extra)} that are not among "
                            f"the classes {list(classes)}")
        files, labels = [], []
        for label, name in enumerate(classes):
            found = _class_files(split_dir / name, required=split == "train")
            found = found[:limit] if limit is not None else found
            files += found
            labels += [label] * len(found)
        listing[split] = (files, np.asarray(labels, dtype=np.int64))
    return listing


def _class_files(folder: Path, required: bool) -> list[str]:
    if not folder.is_dir():
        if required:
            raise DataError(f"expected the class folder {folder}")
        return []
    with os.scandir(folder) as entries:
        files = [e.path for e in _visible(list(entries))
                 if e.name.lower().endswith(IMAGE_EXTENSIONS) and e.is_file()]
    if required and not files:
        raise DataError(f"class folder {folder} holds no PNG or JPEG images")
    return files


def _open(path: str, mode: str, size: tuple[int, int] | None) -> np.ndarray:
    """One image as an H x W x C uint8 array in ``mode``, resized to ``size`` if given."""
    from PIL import Image

    try:
        with Image.open(path) as image:  # pillow refuses above 2 x MAX_IMAGE_PIXELS itself
            if image.width * image.height > (Image.MAX_IMAGE_PIXELS or float("inf")):
                raise DataError(f"image {path} claims {image.width}x{image.height} pixels, "
                                f"more than pillow's limit of {Image.MAX_IMAGE_PIXELS} (a "
                                "decompression bomb?); remove or shrink it")
            image = image.convert(mode) if image.mode != mode else image
            if size is not None and image.size != (size[1], size[0]):
                image = image.resize((size[1], size[0]), Image.Resampling.BILINEAR)
            pixels = np.asarray(image, dtype=np.uint8)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
        # pillow's errors for bad files (a decompression bomb is none of the first three)
        raise DataError(f"cannot decode image {path}: {error}") from error
    return pixels[:, :, None] if pixels.ndim == 2 else pixels


def decode_images(files: Sequence[str], *, color: str = "rgb", size: tuple[int, int] | None = None,
                  workers: int | None = None) -> np.ndarray:
    """Decode ``files`` into one N x C x H x W uint8 array.

    Batches of files are decoded by a thread pool (pillow releases the GIL while decoding);
    each batch writes only its own slice of the preallocated output, so batches never race.
    Without ``size`` every image must have the first image's size.
    """
    mode = COLORS[color]
    if not files:
        return np.zeros((0, 1 if mode == "L" else 3, *(size or (0, 0))), dtype=np.uint8)
    first = _open(files[0], mode, size)
    height, width, channels = first.shape
    out = np.empty((len(files), channels, height, width), dtype=np.uint8)

    def decode_batch(start: int) -> None:
        for i in range(start, min(start + _BATCH, len(files))):
            pixels = _open(files[i], mode, size)
            if pixels.shape != first.shape:
                raise DataError(f"image {files[i]} is {pixels.shape[1]}x{pixels.shape[0]} but "
                                f"{files[0]} is {width}x{height}; set the option size to resize")
            out[i] = pixels.transpose(2, 0, 1)

    workers = workers or min(4, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(decode_batch, start) for start in range(0, len(files), _BATCH)]
        try:
            for future in futures:
                future.result()  # re-raises a batch's error
        except BaseException:
            for future in futures:  # a bad file: do not decode the rest in vain
                future.cancel()
            raise
    return out


def read_image_folder(root: Path, *, classes: Sequence[str], color: str,
                      size: tuple[int, int] | None, limit_per_class: int | None,
                      workers: int | None, cache: bool, kind: str = "imagefolder",
                      exclusive: bool = True) -> dict[str, np.ndarray]:
    """Decoded (cached) uint8 images and int64 labels: x_train, y_train, x_test, y_test."""
    listing = list_images(root, classes, limit_per_class, exclusive)

    def build() -> tuple[dict[str, np.ndarray], dict[str, str]]:
        arrays = {}
        for split, (files, labels) in listing.items():
            arrays[f"x_{split}"] = decode_images(files, color=color, size=size, workers=workers)
            arrays[f"y_{split}"] = labels
        shapes = {arrays["x_train"].shape[1:], arrays["x_test"].shape[1:]}
        if len(arrays["x_test"]) and len(shapes) > 1:
            raise DataError(f"train and test images in {root} differ in size {sorted(shapes)}; "
                            "set the option size to resize")
        return arrays, {"class_names": json.dumps(list(classes))}

    files = [f for split in SPLITS for f in listing[split][0]]
    options = {"classes": list(classes), "color": color, "size": size,
               "limit_per_class": limit_per_class}
    arrays, _ = cached(kind, root=root, files=files, options=options, build=build,
                       enabled=cache)
    return arrays


def splits_from_arrays(arrays: dict[str, np.ndarray], class_names: Sequence[str]) -> DataSplits:
    """uint8 N x C x H x W images and labels -> float32 :class:`DataSplits`."""
    return DataSplits(to_float(arrays["x_train"]), torch.from_numpy(arrays["y_train"]).long(),
                      to_float(arrays["x_test"]), torch.from_numpy(arrays["y_test"]).long(),
                      num_classes=len(class_names),
                      # a folder name that is not UTF-8 is written as \xNN in every output
                      class_names=[printable(name) for name in class_names])


def check_imagefolder(*, size: Any, color: str, classes: Sequence[str] | None,
                      limit_per_class: int | None, workers: int | None,
                      **unchecked: object) -> None:
    """The image folder's option values (the config checks them before reading a file)."""
    if color not in COLORS:
        raise ValueError(f"color must be one of {sorted(COLORS)}, got {color!r}")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be a positive int, got {workers!r}")
    check_size(size)
    check_limit(limit_per_class)
    if classes is not None:
        _check_classes(classes)


@DATASETS.register("imagefolder", check=check_imagefolder)
def load_imagefolder(*, data_dir: str | Path | None = None, size: Any = None, color: str = "rgb",
                     classes: Sequence[str] | None = None, limit_per_class: int | None = None,
                     workers: int | None = None, cache: bool = True) -> DataSplits:
    """Your own images: data_dir/train/<class>/* and data_dir/test/<class>/* (PNG or JPEG).

    Options: ``size`` (None: all images must share one size; n or (height, width): resize),
    ``color`` ("rgb" or "grey"), ``classes`` (label order; default the sorted train folder
    names), ``limit_per_class`` (first n files per class and split, by name), ``workers``
    (decoding threads), ``cache`` (reuse decoded arrays across runs).
    """
    root = as_path(data_dir)
    if root is None:
        raise ValueError("imagefolder needs data_dir: the folder holding train/ and test/")
    check_imagefolder(size=size, color=color, classes=classes, limit_per_class=limit_per_class,
                      workers=workers)
    if not root.is_dir():
        raise DataError(f"image folder {path_problem(root, 'folder')} (expected "
                        "train/<class>/* and test/<class>/* inside it)")
    names = discover_classes(root) if classes is None else _check_classes(classes)
    arrays = read_image_folder(root, classes=names, color=color, size=check_size(size),
                               limit_per_class=check_limit(limit_per_class), workers=workers,
                               cache=cache, exclusive=classes is None)
    return splits_from_arrays(arrays, names)


def _check_classes(classes: Any) -> list[str]:
    if isinstance(classes, str) or not isinstance(classes, (list, tuple)) or not classes \
            or not all(isinstance(c, str) and c for c in classes):
        raise ValueError(f"classes must be a non-empty list of folder names, got {classes!r}")
    if len(set(classes)) != len(classes):
        raise ValueError(f"classes has duplicates: {classes!r}")
    return list(classes)
