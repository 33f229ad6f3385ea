"""The attacker's view of the pool inputs, for attacks that regress on the example itself
(QMIA): a fixed, model-free feature map, so no attacker-side network has to be downloaded.

Images (N, C, H, W) are average-pooled to at most 8 x 8 per channel and flattened (192 values
for CIFAR-10: colour and coarse layout, what a small regressor can use); other inputs are
flattened as they are. float32, one row per pool sample.
"""

from __future__ import annotations

import numpy as np
import torch

POOLED_SIDE = 8


def input_features(x: torch.Tensor) -> np.ndarray:
    x = torch.as_tensor(x).float()
    if x.dim() == 4:
        side = (min(POOLED_SIDE, x.shape[-2]), min(POOLED_SIDE, x.shape[-1]))
        x = torch.nn.functional.adaptive_avg_pool2d(x, side)
    return x.reshape(len(x), -1).numpy()
