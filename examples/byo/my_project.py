"""A user's own project, audited by miaudit without changing a line of it.

Three functions stand for what a real project already has; miaudit names them by import path
(``my_project:make_net`` etc., see README.md):

- :func:`make_net`: the model constructor. miaudit calls it with the keyword arguments
  ``input_shape`` (one sample's shape), ``num_classes`` and ``width``, plus ``model.options``.
- :func:`load_data`: the data loader. Called with ``data_dir`` plus ``data.options``; returns
  ``miaudit.data.DataSplits`` (float32 features in [0, 1], int64 labels, class names).
- :func:`train`: the training function. Called once per audited model with a fresh model and a
  ``TensorDataset`` of that model's members; keeps its own optimizer, augmentation and schedule.

The task is a small synthetic one (three interleaved spiral arms, one class each, 2-D points),
so the example needs no download and trains in seconds on a CPU.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from miaudit.data import DataSplits


def make_net(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0,
             hidden: int = 64) -> nn.Module:
    """A two-hidden-layer MLP with GELU; ``width`` scales the hidden size."""
    features = math.prod(input_shape)
    size = max(1, int(round(hidden * width)))
    return nn.Sequential(nn.Flatten(), nn.Linear(features, size), nn.GELU(),
                         nn.Linear(size, size), nn.GELU(), nn.Linear(size, num_classes))


def load_data(*, data_dir: str | Path | None = None, n: int = 600, noise: float = 0.15,
              test_fraction: float = 0.25, seed: int = 0) -> DataSplits:
    """``n`` points on 3 noisy spiral arms (half a turn each), scaled to [0, 1]; a seeded split.

    A real project would read its files from ``data_dir`` here; this one generates its data.
    """
    generator = torch.Generator().manual_seed(seed)
    classes = 3
    y = torch.arange(n) % classes
    radius = torch.rand(n, generator=generator)
    angle = radius * math.pi + y * (2 * math.pi / classes)
    points = torch.stack([radius * angle.cos(), radius * angle.sin()], dim=1)
    points += noise * torch.randn(n, 2, generator=generator) * radius[:, None]
    low, high = points.min(0).values, points.max(0).values
    x = ((points - low) / (high - low)).float()
    order = torch.randperm(n, generator=generator)
    n_test = int(round(test_fraction * n))
    test, train = order[:n_test], order[n_test:]
    return DataSplits(x[train], y[train], x[test], y[test], num_classes=classes,
                      class_names=["spiral0", "spiral1", "spiral2"])


def train(model: nn.Module, dataset: TensorDataset, *, seed: int, device: torch.device,
          epochs: int = 40, lr: float = 3e-2, batch_size: int = 32,
          jitter: float = 0.01) -> nn.Module:
    """AdamW with a one-cycle schedule, label smoothing and Gaussian input jitter: the kind of
    loop a project has and miaudit's options do not spell out."""
    generator = torch.Generator().manual_seed(seed)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=generator)
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr,
                                                   total_steps=epochs * len(loader))
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.05)
    model.train()
    for _ in range(epochs):
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            xb = xb + jitter * torch.randn(xb.shape, generator=generator).to(device)
            optimizer.zero_grad()
            loss_fn(model(xb), yb).backward()
            optimizer.step()
            schedule.step()
    return model.eval()
