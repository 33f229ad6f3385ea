"""Small baselines: a CNN for images (the default audit's model) and an MLP for tabular data."""

from __future__ import annotations

from torch import nn

from miaudit.models._base import scaled
from miaudit.registry import MODELS


def _conv_block(cin: int, cout: int, pool: bool) -> list[nn.Module]:
    # ReLU not in place: Opacus's per-sample hooks need the unmodified input
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU()]
    return layers + [nn.MaxPool2d(2)] if pool else layers


@MODELS.register("small_cnn")
def small_cnn(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0,
              depth: int = 2, dropout: float = 0.0) -> nn.Module:
    """Conv(32w)-ReLU-Pool x depth (channels doubling), global average pool, linear."""
    if len(input_shape) != 3:
        raise ValueError(f"small_cnn needs image inputs (C, H, W), got shape {input_shape}")
    channels, height, _ = input_shape
    layers: list[nn.Module] = []
    cin = channels
    for block in range(depth):
        cout = scaled(32 * 2**block, width)
        layers += _conv_block(cin, cout, pool=height // 2 ** (block + 1) >= 2)
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(dropout),
               nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers)


def check_mlp(*, hidden: tuple[int, ...], dropout: float) -> None:
    """mlp's option values (the config checks them before any data is loaded)."""
    if isinstance(hidden, (str, bytes)) or not all(
            isinstance(size, int) and not isinstance(size, bool) and size > 0 for size in hidden):
        raise ValueError(f"mlp option 'hidden' must be a list of positive layer sizes, got "
                         f"{hidden!r}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"mlp option 'dropout' must be in [0, 1), got {dropout!r}")


@MODELS.register("mlp", check=check_mlp)
def mlp(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0,
        hidden: tuple[int, ...] = (256, 128), dropout: float = 0.0) -> nn.Module:
    """Fully connected net with Tanh hidden layers (Shokri et al. 2017's tabular models)."""
    check_mlp(hidden=hidden, dropout=dropout)
    features = 1
    for size in input_shape:
        features *= size
    layers: list[nn.Module] = [nn.Flatten()]
    cin = features
    for size in hidden:
        layers += [nn.Linear(cin, scaled(size, width)), nn.Tanh(), nn.Dropout(dropout)]
        cin = scaled(size, width)
    return nn.Sequential(*layers, nn.Linear(cin, num_classes))
