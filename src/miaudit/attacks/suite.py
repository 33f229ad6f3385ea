"""A suite of attacks over outputs in memory, in rotation: every target in turn, every other
model its reference. Pure: numpy arrays in, scores out, no files. The score stage and
``miaudit.score`` run the same per-target loop (:func:`run_attack`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from miaudit.attacks._base import Attack, AttackInput, AttackResult


def run_attack(attack: Attack, data: AttackInput, targets: Sequence[int],
               references: Callable[[int], np.ndarray]) -> list[AttackResult]:
    """One attack on each target, given each target's reference models."""
    return [attack.evaluate(data, target, references(target)) for target in targets]


def rotation_references(num_models: int) -> Callable[[int], np.ndarray]:
    """Every model but the target is a reference (the rotation protocol)."""
    def references(target: int) -> np.ndarray:
        return np.array([m for m in range(num_models) if m != target])

    return references


def evaluate(signals: np.ndarray, keep: np.ndarray, specs: Sequence[Any], *,
             labels: np.ndarray, targets: Sequence[int] | None = None,
             population: np.ndarray | None = None,
             query_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Membership scores of every attack in ``specs`` on every target, in rotation.

    ``signals``: the models' outputs, logits of shape (M, N, Q, C) or (M, N, C) (one query);
    ``keep`` (M, N) bool, ``labels`` (N,) class indices; ``specs`` as in a config's ``attacks``
    (``"lira:offline=true"``, or a dict with ``name``); ``targets`` (default: every model);
    ``population``: indices of samples no model trained on, for attacks that need them (their
    scores are NaN: they are never scored). Returns {label: (targets, N) float64 scores},
    higher = more likely a member. Bad specs raise :class:`miaudit.ConfigError`.
    """
    from miaudit.auditor.components import attack_label, build_attack

    logits = np.asarray(signals)
    logits = logits[:, :, None, :] if logits.ndim == 3 else logits
    data = AttackInput(
        logits=logits, labels=np.asarray(labels, dtype=np.int64), keep=np.asarray(keep, bool),
        query_names=(list(query_names) if query_names is not None
                     else [f"query{q}" for q in range(logits.shape[2])]),
        population=np.asarray([] if population is None else population, dtype=np.int64))
    chosen = list(range(data.num_models)) if targets is None else list(targets)
    references = rotation_references(data.num_models)
    scores = {}
    for index, spec in enumerate(specs):
        attack = build_attack(spec, f"attacks[{index}]")
        outcomes = run_attack(attack, data, chosen, references)
        table = np.stack([np.asarray(o.scores, dtype=np.float64) for o in outcomes])
        table[:, data.population] = np.nan
        scores[attack_label(spec)[0]] = table
    return scores
