"""The optimization hyper-parameters of one training run (torch-free, so the audit config can
take its defaults from here without importing torch)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainParams:
    """Optimization hyper-parameters of one training run. These defaults are the only ones:
    the audit config (``miaudit.config.TrainConfig``) takes its defaults from here."""

    epochs: int = 30
    batch_size: int = 64
    optimizer: str = "sgd"  # sgd | adam | adamw
    lr: float = 0.05
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 5e-4
    schedule: str = "cosine"  # cosine | step | constant
    warmup_epochs: float = 0.0
    milestones: tuple[float, ...] = (0.5, 0.75)  # step schedule: fractions of training, x0.1
    crop_padding: int = 0  # random crop after reflect padding; 0 disables
    flip: bool = False  # random horizontal flip
