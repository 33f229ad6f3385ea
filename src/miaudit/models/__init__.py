"""Model zoo (registered in :data:`miaudit.registry.MODELS`).

A constructor is ``build(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0,
**options) -> nn.Module``. Image models take N x C x H x W inputs in [0, 1] of any spatial size
(global average pooling), so the CPU-scale (digits 8x8, narrow) and paper-scale (CIFAR 32x32,
full width) profiles share one code path. ``width`` multiplies every channel count.
"""

from miaudit.models._base import build_model, scaled

__all__ = ["build_model", "scaled"]
