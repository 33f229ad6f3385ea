"""Model zoo (registered in :data:`miaudit.registry.MODELS`).

A constructor is ``build(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0,
**options) -> nn.Module``. Image models take N x C x H x W inputs in [0, 1] of any spatial size
(global average pooling), so the CPU-scale (digits 8x8, narrow) and paper-scale (CIFAR 32x32,
full width) profiles share one code path. ``width`` multiplies every channel count.
"""

from typing import Any

from miaudit.models._base import build_model, scaled

__all__ = ["build_model", "scaled", "switch_noise_off"]


def __getattr__(name: str) -> Any:
    if name == "switch_noise_off":  # loads the SDE module (torchsde) only when asked for
        from miaudit.models.sde import switch_noise_off

        return switch_noise_off
    raise AttributeError(f"module 'miaudit.models' has no attribute {name!r}")
