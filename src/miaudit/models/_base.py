"""Helpers shared by model constructors."""

from __future__ import annotations

from typing import Any

from torch import nn

from miaudit.registry import MODELS


def scaled(channels: int, width: float) -> int:
    """Channel count ``channels * width``, at least 1."""
    return max(1, int(round(channels * width)))


def build_model(name: str, *, input_shape: tuple[int, ...], num_classes: int,
                width: float = 1.0, **options: Any) -> nn.Module:
    """Build a registry model, with errors that name the model and the bad option."""
    return MODELS.build(name, input_shape=tuple(input_shape), num_classes=num_classes,
                        width=width, **options)
