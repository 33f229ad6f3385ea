"""ResNet-14, the baseline of the neural-ODE membership study.

ResNet-14 ("Understanding and Mitigating Membership Inference Risks of Neural ODEs", Appendix A):
stem conv3x3 (C -> 32, stride 2) + norm (:func:`~miaudit.models.staged.cifar_stem`, shared with
ODENet/SDENet so that ResNet-vs-ODE comparisons run at the same resolution), three groups of
three pre-activation residual blocks (He et al. 2016, "Identity mappings":
norm-ReLU-conv-norm-ReLU-conv + identity) at 32, 64, 128 channels, norm-ReLU-strided conv
downsampling between groups, then the head (the skeleton of :mod:`miaudit.models.staged`).
"""

from __future__ import annotations

from torch import Tensor, nn

from miaudit.models._base import scaled
from miaudit.models.staged import (
    StagedNet,
    check_norm,
    check_stem_stride,
    cifar_stem,
    conv3x3,
    image_channels,
    norm_layer,
    staged_layout,
)
from miaudit.registry import MODELS


class ResBlock(nn.Module):
    """Pre-activation residual block: x + conv(ReLU(norm(conv(ReLU(norm(x))))))."""

    def __init__(self, channels: int, norm: str = "batch"):
        super().__init__()
        self.norm1 = norm_layer(norm, channels)
        self.conv1 = conv3x3(channels, channels)
        self.norm2 = norm_layer(norm, channels)
        self.conv2 = conv3x3(channels, channels)
        self.relu = nn.ReLU()  # not in place: Opacus hooks and autograd need the inputs

    def residual(self, x: Tensor) -> Tensor:
        out = self.conv1(self.relu(self.norm1(x)))
        return self.conv2(self.relu(self.norm2(out)))

    def forward(self, x: Tensor) -> Tensor:
        return x + self.residual(x)


def check_resnet14(*, norm: str, blocks: int, stem_stride: int) -> None:
    """resnet14's option values (the config checks them too, before any data is loaded)."""
    check_norm(norm)
    if not isinstance(blocks, int) or blocks < 1:
        raise ValueError(f"option 'blocks' must be a positive integer; got {blocks!r}")
    check_stem_stride(stem_stride)


@MODELS.register("resnet14", check=check_resnet14)
def resnet14(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0,
             norm: str = "batch", blocks: int = 3, stem_stride: int = 2) -> StagedNet:
    """ResNet-14 of the neural-ODE MI study: 3 groups x 3 pre-activation blocks at 32/64/128.

    Options: ``norm`` batch | group | none (group for DP-SGD: Opacus rejects BatchNorm);
    ``blocks`` residual blocks per group (3 = ResNet-14); ``stem_stride`` 2 (paper) or 1."""
    cin = image_channels(input_shape, "resnet14")
    check_resnet14(norm=norm, blocks=blocks, stem_stride=stem_stride)
    widths = [scaled(c, width) for c in (32, 64, 128)]
    stem = cifar_stem(cin, widths[0], norm, stem_stride)
    return staged_layout(cin, widths,
                         lambda c: nn.Sequential(*[ResBlock(c, norm) for _ in range(blocks)]),
                         norm, stem, num_classes)


class Bottleneck(nn.Module):
    """ResNet-50's bottleneck block (He et al. 2016, "Deep residual learning", Table 1):
    1x1 reduce, 3x3 (stride here), 1x1 expand x4, each followed by norm; ReLU after the sum;
    a 1x1 strided projection where the shape changes."""

    def __init__(self, cin: int, mid: int, stride: int, norm: str):
        super().__init__()
        cout = 4 * mid
        self.body = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), norm_layer(norm, mid), nn.ReLU(),
            conv3x3(mid, mid, stride), norm_layer(norm, mid), nn.ReLU(),
            nn.Conv2d(mid, cout, 1, bias=False), norm_layer(norm, cout))
        self.shortcut = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride=stride, bias=False), norm_layer(norm, cout))
        self.relu = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


class ResNet50(nn.Module):
    """The CIFAR variant of ResNet-50: a 3x3 stride-1 stem without max pooling (32x32 inputs
    keep their resolution into the first stage), stages of 3, 4, 6, 3 bottlenecks at 64, 128,
    256, 512 (x4 out), global average pooling, linear head."""

    def __init__(self, cin: int, num_classes: int, width: float, norm: str):
        super().__init__()
        mids = [scaled(c, width) for c in (64, 128, 256, 512)]
        self.stem = nn.Sequential(conv3x3(cin, mids[0]), norm_layer(norm, mids[0]), nn.ReLU())
        layers, channels = [], mids[0]
        for stage, (mid, count) in enumerate(zip(mids, (3, 4, 6, 3))):
            for index in range(count):
                stride = 2 if stage > 0 and index == 0 else 1
                layers.append(Bottleneck(channels, mid, stride, norm))
                channels = 4 * mid
        self.stages = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(channels, num_classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.stages(self.stem(x)))


def check_resnet50(*, norm: str) -> None:
    check_norm(norm)


@MODELS.register("resnet50", check=check_resnet50)
def resnet50(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0,
             norm: str = "batch") -> ResNet50:
    """ResNet-50, CIFAR variant (3x3 stem, no max pool): the DeMem study's model (paper B).

    Options: ``norm`` batch | group | none."""
    cin = image_channels(input_shape, "resnet50")
    check_resnet50(norm=norm)
    return ResNet50(cin, num_classes, width, norm)
