"""CUDA-only training speed-ups that leave CPU training bit-identical."""

from __future__ import annotations

import contextlib

import torch
from torch import nn


def cuda_speedups(model: nn.Module,
                  device: torch.device) -> tuple[nn.Module, contextlib.AbstractContextManager]:
    """CUDA-only speed-ups: channels_last memory format for convolutional models and a
    bfloat16 autocast context for forward passes (bfloat16 keeps float32's exponent range,
    so no gradient scaler is needed). On any other device: the model unchanged and a null
    context, so CPU results stay bit-identical."""
    if device.type != "cuda":
        return model, contextlib.nullcontext()
    if any(isinstance(m, nn.Conv2d) for m in model.modules()):
        model = model.to(memory_format=torch.channels_last)
    return model, torch.autocast("cuda", dtype=torch.bfloat16)
