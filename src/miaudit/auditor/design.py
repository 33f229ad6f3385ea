"""Membership planning: which pool samples are audited, which are set aside, who trains on
what, who is attacked with which references.

The pool is split once (seeded) into three disjoint parts:

* **audited** samples, whose membership is planned and scored;
* the attacker's **population** data (RMIA's z, Attack-P): queried on every model, trained on
  by none, never scored (the RMIA paper's attacker holds population data);
* the defender's **holdout** data (validation for early stopping / MMD, MemGuard's defender
  classifier): trained on by none, never scored, so no evaluated sample picks a
  hyper-parameter or trains a defense.

Memberships come in complementary pairs: model 2k trains on a seeded random half of the
audited samples (drawn from (seed, k) alone) and model 2k+1 on the other half. Every audited
sample is therefore IN for exactly half of the models at every even M (the balanced design of
Carlini et al. 2022), and raising M keeps every existing row: growing an audit trains only the
new models. (As in any balanced design, a target's membership follows from its references'
keep rows; attacks never read them that way.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from miaudit.errors import ConfigError

PROTOCOLS = ("rotation", "fixed_target")


@dataclass(frozen=True)
class Split:
    """Disjoint index sets of the pool (sorted int64 arrays)."""

    audited: np.ndarray
    population: np.ndarray
    holdout: np.ndarray

    @property
    def pool_size(self) -> int:
        return len(self.audited) + len(self.population) + len(self.holdout)


def resolve_size(size: int | float, total: int, name: str) -> int:
    """A count, or a fraction in (0, 1) of ``total``."""
    if isinstance(size, float) and 0 < size < 1:
        return max(1, int(round(size * total)))
    if size != int(size) or size < 0:
        raise ConfigError(f"{name} must be a count >= 0 or a fraction in (0, 1), got {size}")
    return int(size)


def make_split(pool_size: int, population: int | float, holdout: int | float,
               seed: int, exclude: np.ndarray | None = None) -> Split:
    """Seeded split of the pool into audited, population and holdout indices. Samples in
    ``exclude`` (a pre-trained target's members) are never set aside: they stay audited."""
    n_population = resolve_size(population, pool_size, "data.population_size")
    n_holdout = resolve_size(holdout, pool_size, "data.holdout_size")
    if pool_size - n_population - n_holdout < 2:
        raise ConfigError(f"the pool of {pool_size} samples leaves fewer than 2 to audit after "
                          f"{n_population} population and {n_holdout} holdout samples; "
                          "lower data.population_size / data.holdout_size")
    order = np.random.default_rng(np.random.SeedSequence([seed, 0x53504C54])).permutation(
        pool_size)
    if exclude is not None:  # excluded samples last, so they are never set aside
        order = np.concatenate([order[~exclude[order]], order[exclude[order]]])
        if n_population + n_holdout > int((~exclude).sum()):
            raise ConfigError("the target's non-members are too few for data.population_size "
                              "+ data.holdout_size; lower them")
    population_idx = np.sort(order[:n_population])
    holdout_idx = np.sort(order[n_population:n_population + n_holdout])
    audited_idx = np.sort(order[n_population + n_holdout:])
    return Split(audited=audited_idx, population=population_idx, holdout=holdout_idx)


def half_split(num_samples: int, rng: np.random.Generator) -> np.ndarray:
    """(N,) bool with exactly floor(N/2) True entries at random positions."""
    row = np.zeros(num_samples, dtype=bool)
    row[rng.permutation(num_samples)[: num_samples // 2]] = True
    return row


def pair_rows(pair: int, num_samples: int, seed: int) -> np.ndarray:
    """(2, N) bool: the complementary memberships of family models 2*pair and 2*pair + 1,
    determined by (seed, pair) alone."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x4B454550, pair]))
    first = half_split(num_samples, rng)
    return np.stack([first, ~first])


def balanced_keep(num_models: int, num_samples: int, seed: int) -> np.ndarray:
    """(M, N) bool from complementary pairs; every column has exactly M/2 True entries, and
    the first M rows of a larger family are exactly this matrix."""
    if num_models % 2 or num_models < 2:
        raise ConfigError(f"the balanced design needs an even number of models >= 2, got "
                          f"{num_models}")
    return np.concatenate([pair_rows(p, num_samples, seed) for p in range(num_models // 2)])


def target_row(num_samples: int, seed: int) -> np.ndarray:
    """The fixed target's membership: a seeded random half, independent of the family."""
    return half_split(num_samples, np.random.default_rng(
        np.random.SeedSequence([seed, 0x54415247])))


@dataclass(frozen=True)
class Plan:
    """Memberships over the whole pool and the attack schedule.

    ``keep`` (models x pool) is False on population and holdout columns. rotation: models
    0..M-1 form the balanced family, each the target in turn. fixed_target: model 0 is the
    target, models 1..M the family (its references, possibly of another architecture).
    """

    keep: np.ndarray
    targets: tuple[int, ...]
    protocol: str
    split: Split

    def references(self, target: int) -> np.ndarray:
        """Every model but the target (the attacker's reference models)."""
        return np.array([m for m in range(len(self.keep)) if m != target], dtype=np.int64)

    def is_reference_architecture(self, model_index: int) -> bool:
        """Under fixed_target, models 1.. are references and may use another architecture."""
        return self.protocol == "fixed_target" and model_index > 0

    def family_index(self, model_index: int) -> int:
        """Position of a model in the balanced family (-1 for the fixed target)."""
        return model_index - 1 if self.protocol == "fixed_target" else model_index


def make_plan(protocol: str, num_models: int, split: Split, seed: int,
              num_targets: int | None = None, target_members: np.ndarray | None = None) -> Plan:
    """rotation: a family of M models, each the target in turn (neural-ODE study).
    fixed_target: a target on a random half (or on ``target_members``, a pre-trained
    target's training set) plus the family of M = 2n references (spiking-network study)."""
    audited = len(split.audited)
    family = np.zeros((num_models, split.pool_size), dtype=bool)
    family[:, split.audited] = balanced_keep(num_models, audited, seed)
    if protocol == "rotation":
        return Plan(family, tuple(range(num_targets or num_models)), protocol, split)
    if protocol == "fixed_target":
        target = np.zeros((1, split.pool_size), dtype=bool)
        if target_members is None:
            target[0, split.audited] = target_row(audited, seed)
        else:
            target[0] = target_members
        return Plan(np.vstack([target, family]), (0,), protocol, split)
    raise ConfigError(f"unknown protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")


def model_seed(seed: int, model_index: int) -> int:
    """Independent, reproducible per-model seed from (audit seed, model index)."""
    return int(np.random.SeedSequence([seed, model_index]).generate_state(1)[0])
