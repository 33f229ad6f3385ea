"""Import before torchvision in the peer's venv. PyPI's torchvision 0.28.0 wheel is built
against CUDA torch; with torch 2.13.0+cpu its C extension (detection ops) does not load, and
torchvision then fails at import while registering fake kernels for the missing
``torchvision::nms`` and ``torchvision::qnms`` operators. Declaring their schemas lets the
pure-Python parts the peer uses (datasets.CIFAR10, transforms) import; any detection op would
still fail."""

import torch

_LIBRARY = torch.library.Library("torchvision", "DEF")  # kept alive: owns the definition
_LIBRARY.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
_LIBRARY.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
