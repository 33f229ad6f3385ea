"""Mixed-precision training (``train.precision``).

``bf16``: the forward pass runs under bfloat16 autocast (matrix multiplies and convolutions in
bfloat16, reductions and losses in float32), convolutional models in channels_last memory
format (the layout the CPU's oneDNN and CUDA's cuDNN bfloat16 kernels are fastest in). The
parameters, their gradients and the optimizer state stay float32 (autocast casts a copy per
op), and the returned model is float32 in the default memory format, so what is saved, reloaded
and queried is an ordinary float32 model. bfloat16 keeps float32's exponent range: no gradient
scaler is needed (unlike float16).

``fp32``: nothing changes (bit-identical to training without this module).
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

PRECISIONS = ("fp32", "bf16")


def is_convolutional(model: nn.Module) -> bool:
    return any(isinstance(m, nn.Conv2d) for m in model.modules())


def autocast_context(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The context the forward pass (and loss) runs in."""
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    raise ValueError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")


def training_layout(model: nn.Module, precision: str) -> tuple[nn.Module, bool]:
    """The model in the memory format it trains fastest in; True when inputs should be
    channels_last too."""
    if precision == "fp32" or not is_convolutional(model):
        return model, False
    return model.to(memory_format=torch.channels_last), True


def input_layout(x: torch.Tensor, channels_last: bool) -> torch.Tensor:
    return x.contiguous(memory_format=torch.channels_last) if channels_last and x.dim() == 4 \
        else x


def default_layout(model: nn.Module, channels_last: bool) -> nn.Module:
    """Back to the default (contiguous) layout, so saved tensors are plain contiguous ones."""
    return model.to(memory_format=torch.contiguous_format) if channels_last else model
