"""The staged skeleton shared by ResNet-14 and the ODE/SDE nets, and its building blocks.

Skeleton (:class:`StagedNet`): ``stem`` -> ``stages`` (each an optional downsampling layer then
a sequence of blocks) -> ``head`` (norm, ReLU, global average pool, linear). Keeping the three
parts as named attributes lets replace-then-finetune swap the blocks of the last stage
(:mod:`miaudit.recipes.replace_finetune`) and lets the ODE/SDE nets reuse the layout. The
stem (:func:`cifar_stem`) and the norm-ReLU-strided conv downsampling between groups (the
downsampling block of Oganesyan et al. 2020's CIFAR skeleton) are paper A's Appendix A.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

NORMS = ("batch", "group", "none")


def check_norm(norm: str, option: str = "norm") -> str:
    if norm not in NORMS:
        raise ValueError(f"option {option!r} must be one of {', '.join(NORMS)}; got {norm!r}")
    return norm


def group_count(channels: int) -> int:
    """GroupNorm groups: at most 32 (Chen et al.'s GroupNorm(min(32, C), C)) and at least 4
    channels per group, so that the 1x1 maps of 8x8 inputs after three stride-2 layers still
    normalize over several values (one value per group would be zeroed)."""
    return math.gcd(channels, min(32, max(1, channels // 4)))


def norm_layer(kind: str, channels: int) -> nn.Module:
    """BatchNorm, GroupNorm (Opacus needs it instead of BatchNorm) or nothing."""
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(group_count(channels), channels)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"option 'norm' must be one of {', '.join(NORMS)}; got {kind!r}")


def image_channels(input_shape: Sequence[int], model: str) -> int:
    if len(input_shape) != 3:
        raise ValueError(f"{model} needs image inputs (C, H, W); "
                         f"got input_shape {tuple(input_shape)}")
    return int(input_shape[0])


def conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def downsample(cin: int, cout: int, norm: str) -> nn.Sequential:
    """norm -> ReLU -> conv3x3 stride 2 (Oganesyan et al. 2020's downsampling block)."""
    return nn.Sequential(norm_layer(norm, cin), nn.ReLU(), conv3x3(cin, cout, stride=2))


class Stage(nn.Module):
    """One group: ``down`` (downsampling or identity) then ``blocks``."""

    def __init__(self, down: nn.Module, blocks: nn.Module, channels: int):
        super().__init__()
        self.down = down
        self.blocks = blocks
        self.channels = channels  # width the blocks see (replace-then-finetune matches it)

    def forward(self, x: Tensor) -> Tensor:
        return self.blocks(self.down(x))


class StagedNet(nn.Module):
    """stem -> stages -> head (norm, ReLU, global average pool, linear)."""

    def __init__(self, stem: nn.Module, stages: Sequence[Stage], out_channels: int,
                 num_classes: int, norm: str):
        super().__init__()
        self.stem = stem
        self.stages = nn.ModuleList(stages)
        self.head = nn.Sequential(norm_layer(norm, out_channels), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(out_channels, num_classes))
        self.norm_kind = norm

    def features(self, x: Tensor) -> Tensor:
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return x

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))


def check_stem_stride(stem_stride: int) -> int:
    if stem_stride not in (1, 2):
        raise ValueError(f"option 'stem_stride' must be 1 or 2; got {stem_stride!r}")
    return stem_stride


def cifar_stem(cin: int, channels: int, norm: str, stride: int = 2) -> nn.Sequential:
    """conv3x3 (stride 2: 32x32 -> 16x16) -> norm: the stem paper A's Appendix A gives ResNet-14
    and ODENet alike. No ReLU: the first (pre-activation) block starts with norm -> ReLU.
    ``stride=1`` keeps full resolution (e.g. for 8x8 digits; stride 2 also works there: the
    maps go 8 -> 4 -> 2 -> 1, never 0, since padded stride-2 convs map 1x1 to 1x1)."""
    return nn.Sequential(conv3x3(cin, channels, stride=check_stem_stride(stride)),
                         norm_layer(norm, channels))


def staged_layout(cin: int, widths: Sequence[int], make_blocks: Any, norm: str,
                  stem: nn.Module, num_classes: int) -> StagedNet:
    """Stages at ``widths`` with downsampling between them; ``make_blocks(channels)`` gives the
    blocks of one stage."""
    stages, previous = [], widths[0]
    for index, channels in enumerate(widths):
        down = nn.Identity() if index == 0 else downsample(previous, channels, norm)
        stages.append(Stage(down, make_blocks(channels), channels))
        previous = channels
    return StagedNet(stem, stages, widths[-1], num_classes, norm)
