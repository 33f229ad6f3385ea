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
from typing import Any

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


def retire_amp(raw: Any) -> Any:
    """``amp`` (CUDA-only bfloat16 autocast, a no-op elsewhere) became ``precision``:
    ``amp: false`` (what earlier runs stored) is still read; ``amp: true`` is refused,
    since its meaning on CPU changed from float32 to bfloat16."""
    if isinstance(raw, dict) and "amp" in raw:
        raw = dict(raw)
        if raw.pop("amp") is not False:
            raise ValueError("amp was replaced by precision: write 'precision: bf16' "
                             "(bfloat16 autocast on CPU and CUDA) instead of 'amp: true'")
    return raw


def check_precision(precision: str, recipe_name: str, recipe: Any, ensemble: int) -> None:
    """bf16 needs a recipe that supports it (no ``fp32_only`` reason) and ensemble 1."""
    if precision == "fp32":
        return
    if recipe.fp32_only is not None:
        raise ValueError(f"precision {precision} is not supported by recipe "
                         f"{recipe_name!r}: {recipe.fp32_only}; use precision fp32")
    if ensemble > 1:
        raise ValueError(f"precision {precision} needs ensemble 1 (vectorized "
                         "ensembles train in float32)")
