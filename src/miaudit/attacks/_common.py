"""Shared, memory-aware building blocks of the attacks.

Signals are (M, N, Q) float64 arrays cached by :class:`AttackInput`. Statistics over reference
models are accumulated one reference at a time into (N, Q') arrays, so they never copy the
whole signal; the only helper that needs one full-size buffer is :func:`masked_median`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import logsumexp

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


def common_size(keep: np.ndarray, references: np.ndarray, member: bool) -> int | None:
    """The smallest non-zero group size over samples (None when every group is empty)."""
    inside = keep[references].sum(axis=0)
    counts = inside if member else len(references) - inside
    counts = counts[counts > 0]
    return int(counts.min()) if counts.size else None


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


def balanced_mean(signal: np.ndarray, keep: np.ndarray, references: np.ndarray,
                  qidx: np.ndarray, transform=None) -> tuple[np.ndarray, dict[str, int]]:
    """(mean over x's IN references + mean over x's OUT references) / 2, per sample.

    Under the 2n design (n IN and n OUT references per sample) this is exactly the mean over
    all 2n references. Under the rotation protocol it is not: a target member has one IN
    reference fewer than a non-member, so a plain mean over all references is lower for
    members whenever the references memorize, and leaks membership through the references
    alone. Weighting the two groups equally removes that. A sample with references of one kind
    only uses that kind. Returns (mean (N, Q'), counts of samples lacking IN / OUT references).
    """
    mean_in, count_in = masked_mean(signal, keep, references, qidx, True, transform)
    mean_out, count_out = masked_mean(signal, keep, references, qidx, False, transform)
    mean = np.where((count_in == 0)[:, None], mean_out,
                    np.where((count_out == 0)[:, None], mean_in, 0.5 * (mean_in + mean_out)))
    return mean, {"samples_without_in_refs": int((count_in == 0).sum()),
                  "samples_without_out_refs": int((count_out == 0).sum())}


def confidence_logit(data: AttackInput, model: int, qidx: np.ndarray) -> np.ndarray:
    """(N,) logit of Pr(x|theta), the model's true-class softmax probability averaged over the
    query columns: log(mean p) - log(mean (1 - p)), a strictly increasing function of the mean
    confidence. Why not the probability itself: overfit members reach p within 1e-16 of 1,
    which rounds to 1.0 in float64 and would tie; log(1 - p) = log p - phi comes from the
    stable logit-scaled confidence phi (:mod:`miaudit.queries.signals`), so no such ties arise."""
    log_p = columns(data.signal("log_prob")[model], qidx)
    log_not_p = log_p - columns(data.signal("logit_conf")[model], qidx)  # log(1 - p)
    return logsumexp(log_p, axis=1) - logsumexp(log_not_p, axis=1)  # the 1/Q factors cancel


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


#: values of the ``population`` option of the attacks that compare x with population data z
POPULATION_CHOICES = ("disjoint", "target_nonmembers")


def population_samples(data: AttackInput, target: int, option: str, size: int | None,
                       rng: np.random.Generator, attack: str) -> np.ndarray:
    """Indices of the population samples z that x is compared with, optionally a seeded subset
    of ``size``. The ``population`` option and the threat model each value assumes:

    "disjoint" (the default of every attack): ``data.population``, samples that no model
    trained on and that are never evaluated (the audit reserves them, ``data.population_size``).
    The attacker holds data from the training distribution, disjoint from the target's
    training set, and knows nothing about which evaluated samples are members; ML Privacy Meter
    draws z from a separate population set the same way.

    "target_nonmembers": the target's non-members among the evaluated samples (the authors'
    research-code convention, kept for comparison). It assumes an attacker who knows the
    target's membership labels, and z contains the evaluated non-members, x itself included.
    """
    if option == "target_nonmembers":  # never the population or holdout samples
        population = np.flatnonzero(~data.keep[target] & data.evaluated_mask())
        if len(population) == 0:
            raise ValueError(f"{attack}: target {target} has no non-members to use as "
                             "population data")
    else:
        population = np.asarray(data.population, dtype=np.int64).ravel()
        if len(population) == 0:
            raise ValueError(
                f"{attack} with population='disjoint' needs population data, but the audit "
                "reserved none: set data.population_size > 0 (or use "
                "population='target_nonmembers', the research-code convention)")
        if data.keep[:, population].any():
            raise ValueError(f"{attack}: population samples must be non-members of every "
                             "model (a model trained on some)")
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
