"""Membership planning: who trains on what, who is attacked, with which references.

Carlini et al. 2022 (LiRA, Sec. VI-A and the official code): a seeded M x N uniform matrix,
``keep = argsort(u, axis=0) < M / 2``, puts every sample IN for exactly half of the models.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def balanced_keep(num_models: int, num_samples: int, rng: np.random.Generator) -> np.ndarray:
    """(M, N) bool; every column has exactly M/2 True entries (M even)."""
    if num_models % 2:
        raise ValueError(f"balanced keep needs an even number of models, got {num_models}")
    ranks = np.argsort(rng.uniform(size=(num_models, num_samples)), axis=0)
    return ranks < num_models // 2


def half_split(num_samples: int, rng: np.random.Generator) -> np.ndarray:
    """(N,) bool with exactly floor(N/2) True entries at random positions."""
    row = np.zeros(num_samples, dtype=bool)
    row[rng.permutation(num_samples)[: num_samples // 2]] = True
    return row


@dataclass(frozen=True)
class Plan:
    """The keep matrix and the attack schedule. Model 0..M-1 are rows of ``keep``."""

    keep: np.ndarray  # (M, N) bool
    targets: tuple[int, ...]
    protocol: str

    def references(self, target: int) -> np.ndarray:
        """Every model but the target (the attacker's reference models)."""
        return np.array([m for m in range(len(self.keep)) if m != target], dtype=np.int64)

    def is_reference_architecture(self, model_index: int) -> bool:
        """Under fixed_target, models 1.. are references and may use another architecture."""
        return self.protocol == "fixed_target" and model_index > 0


def make_plan(protocol: str, num_models: int, num_samples: int, seed: int,
              num_targets: int | None = None) -> Plan:
    """rotation: M models on a balanced keep matrix, each in turn the target (neural-ODE
    study). fixed_target: model 0 on a random half, plus ``num_models`` = 2n references on
    balanced reshuffled halves (spiking-network study)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x4B454550]))
    if protocol == "rotation":
        keep = balanced_keep(num_models, num_samples, rng)
        targets = tuple(range(num_targets or num_models))
    elif protocol == "fixed_target":
        target_row = half_split(num_samples, rng)
        keep = np.vstack([target_row, balanced_keep(num_models, num_samples, rng)])
        targets = (0,)
    else:
        raise ValueError(f"unknown protocol {protocol!r}; valid: fixed_target, rotation")
    return Plan(keep=keep, targets=targets, protocol=protocol)


def model_seed(seed: int, model_index: int) -> int:
    """Independent, reproducible per-model seed from (audit seed, model index)."""
    return int(np.random.SeedSequence([seed, model_index]).generate_state(1)[0])
