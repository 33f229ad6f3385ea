"""The peer's CIFAR-10 ``CNN`` (ML Privacy Meter ``models/cnn.py``: LeNet-style, 62,006
parameters) written as a miaudit model builder, for this benchmark only (named by import path
``pm_cnn:peer_cnn`` with this folder on PYTHONPATH). Same layers and parameter names, so the
peer's saved state dicts load into it."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn


class PeerCNN(nn.Module):
    """conv5x5(3->6)-ReLU-pool, conv5x5(6->16)-ReLU-pool, FC 400-120-84-classes."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc3(F.relu(self.fc2(x)))


def peer_cnn(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0) -> nn.Module:
    if tuple(input_shape) != (3, 32, 32):
        raise ValueError(f"the peer's CNN takes 3x32x32 images, got {input_shape}")
    return PeerCNN(num_classes)
