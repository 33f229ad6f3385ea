"""Shared, memory-aware building blocks of the attacks.

Signals are (M, N, Q) float64 arrays cached by :class:`AttackInput`. Statistics over reference
models are accumulated one reference at a time into (N, Q') arrays, so they never copy the
whole signal; the only helper that needs one full-size buffer is :func:`masked_median`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from miaudit.attacks._base import AttackInput


def query_option(queries: Any) -> list[str] | None:
    """Validate the ``queries`` option: None (all columns), one spec, or a list of specs."""
    if queries is None:
        return None
    if isinstance(queries, str):
        return [queries]
    if isinstance(queries, (list, tuple)) and queries and all(isinstance(q, str) for q in queries):
        return list(queries)
    raise ValueError(f"option 'queries' must be a non-empty list of query specs, got {queries!r}")


def check_models(data: AttackInput, target: int, references: Any, attack: str,
                 minimum: int = 1) -> np.ndarray:
    """Validate the target index and the reference indices; return references as int array."""
    models = data.num_models
    if not 0 <= int(target) < models:
        raise ValueError(f"{attack}: target {target} is not a model index (0..{models - 1})")
    refs = np.asarray(references, dtype=np.int64).ravel()
    if refs.size and (refs.min() < 0 or refs.max() >= models):
        raise ValueError(f"{attack}: reference indices {refs} out of range 0..{models - 1}")
    if int(target) in set(refs.tolist()):
        raise ValueError(f"{attack}: the target {target} cannot be its own reference")
    if len(np.unique(refs)) != len(refs):
        raise ValueError(f"{attack}: duplicate reference models {refs}")
    if len(refs) < minimum:
        raise ValueError(f"{attack} needs at least {minimum} reference model(s), got {len(refs)}")
    return refs


def columns(values: np.ndarray, qidx: np.ndarray) -> np.ndarray:
    """values[:, qidx] of one model's (N, Q) signal; a view when every column is selected."""
    if len(qidx) == values.shape[1] and np.array_equal(qidx, np.arange(values.shape[1])):
        return values
    return values[:, qidx]


def membership_mask(keep: np.ndarray, model: int, member: bool | None) -> np.ndarray:
    """Which samples of ``model`` belong to the group: IN (True), OUT (False), all (None)."""
    if member is None:
        return np.ones(keep.shape[1], dtype=bool)
    return keep[model] if member else ~keep[model]


def group_masks(keep: np.ndarray, references: np.ndarray, member: bool | None,
                limit: int | None = None):
    """Yield (model, mask) over the references: the samples each one contributes to the group.
    With ``limit``, a sample takes only its first ``limit`` references of the group (in
    reference order), so every sample's group has the same size (as LiRA's official code)."""
    count = np.zeros(keep.shape[1], dtype=np.int64)
    for model in references:  # a loop over models, never over samples
        mask = membership_mask(keep, model, member)
        if limit is not None:
            mask = mask & (count < limit)
        count += mask
        yield model, mask


def masked_mean(signal: np.ndarray, keep: np.ndarray, references: np.ndarray, qidx: np.ndarray,
                member: bool | None, transform=None,
                limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample mean over the references in the group, and the group size per sample.

    Returns (mean (N, Q') with NaN where the group is empty, count (N,)). ``transform`` is
    applied to each reference's values first (e.g. ``np.exp`` to average probabilities).
    """
    samples = signal.shape[1]
    total = np.zeros((samples, len(qidx)))
    count = np.zeros(samples, dtype=np.int64)
    for model, mask in group_masks(keep, references, member, limit):
        values = columns(signal[model], qidx)
        if transform is not None:
            values = transform(values)
        np.add(total, values, out=total, where=mask[:, None])
        count += mask
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / count[:, None], count


def masked_sq_dev(signal: np.ndarray, keep: np.ndarray, references: np.ndarray,
                  qidx: np.ndarray, member: bool | None, mean: np.ndarray,
                  limit: int | None = None) -> np.ndarray:
    """Per-sample sum of squared deviations from ``mean`` over the group (two-pass variance,
    accurate where one-pass sum-of-squares would cancel)."""
    total = np.zeros_like(mean)
    for model, mask in group_masks(keep, references, member, limit):
        deviation = columns(signal[model], qidx) - mean
        np.add(total, deviation * deviation, out=total, where=mask[:, None])
    return total


def masked_median(signal: np.ndarray, keep: np.ndarray, references: np.ndarray,
                  qidx: np.ndarray, member: bool, limit: int | None = None) -> np.ndarray:
    """Per-sample median over the references in the group (NaN where it is empty).

    Group sizes differ between samples, so a fixed-``kth`` partition does not apply: each
    sample's values are packed into one (N, Q', G) buffer, G the largest group (about half the
    references under the balanced keep matrix, so the buffer is about half a signal array),
    NaN-padded, sorted along the last axis (NaN sorts last), and the middle of each sample's
    own count is read out (mean of the two middle values for even counts, as ``np.median``).
    """
    samples = signal.shape[1]
    groups = list(group_masks(keep, references, member, limit))
    count = np.zeros(samples, dtype=np.int64)
    for _, mask in groups:
        count += mask
    buffer = np.full((samples, len(qidx), max(int(count.max()), 1)), np.nan)
    slot = np.zeros(samples, dtype=np.int64)  # next free slot of each sample
    for model, mask in groups:
        rows = np.flatnonzero(mask)
        buffer[rows, :, slot[rows]] = columns(signal[model], qidx)[rows]
        slot[rows] += 1
    buffer.sort(axis=-1)
    low = np.maximum((count - 1) // 2, 0)[:, None, None]
    high = (count // 2)[:, None, None]
    shape = (samples, len(qidx), 1)
    median = 0.5 * (np.take_along_axis(buffer, np.broadcast_to(low, shape), axis=-1)
                    + np.take_along_axis(buffer, np.broadcast_to(high, shape), axis=-1))[..., 0]
    median[count == 0] = np.nan
    return median


def out_mean_with_fallback(signal: np.ndarray, keep: np.ndarray, references: np.ndarray,
                           qidx: np.ndarray, transform=None) -> tuple[np.ndarray, int]:
    """Mean over each sample's OUT references; samples that are IN for every reference use
    the mean over all references instead. Returns (mean (N, Q'), number of such samples)."""
    mean, count = masked_mean(signal, keep, references, qidx, member=False, transform=transform)
    missing = count == 0
    if missing.any():
        everyone, _ = masked_mean(signal, keep, references, qidx, member=None,
                                  transform=transform)
        mean[missing] = everyone[missing]
    return mean, int(missing.sum())


def target_non_members(data: AttackInput, target: int, size: int | None,
                       rng: np.random.Generator) -> np.ndarray:
    """Population samples z: the target's non-members (the attacker's population data, as in
    the RMIA and Attack-P reference code), optionally a seeded subset of ``size``."""
    population = np.flatnonzero(~data.keep[target])
    if len(population) == 0:
        raise ValueError(f"target {target} has no non-members to use as population data")
    if size is not None and size < len(population):
        population = np.sort(rng.choice(population, size=size, replace=False))
    return population


def positive_int(value: Any, option: str, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"option {option!r} must be a positive integer, got {value!r}")
    return int(value)


def choice(value: Any, option: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"option {option!r} must be one of {allowed}, got {value!r}")
    return value
