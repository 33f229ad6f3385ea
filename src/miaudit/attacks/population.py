"""Attack-P, the population attack (Ye et al. 2022, "Enhanced Membership Inference Attacks
against Machine Learning Models", Sec. 4.1)."""

from __future__ import annotations

import numpy as np

from miaudit.attacks._base import Attack, AttackInput
from miaudit.attacks._common import (
    check_models,
    columns,
    positive_int,
    query_option,
    target_non_members,
)
from miaudit.registry import ATTACKS


@ATTACKS.register("attack_p")
class AttackP(Attack):
    """Attack-P (Ye et al. 2022): compare the target's confidence on x with its confidences on
    population data z. Score = fraction of population z with log p(z) <= log p(x) (the
    percentile of x's loss among population losses, whose alpha-threshold is the paper's
    test), on the confidence averaged over the ``queries`` columns.

    Options: ``population_size`` (int | None, None = all): how many population points,
    a seeded subset of the target's non-members (the attacker's population data);
    ``seed`` (int, 0); ``queries``. No reference models. Ranking-equivalent to the target
    confidence itself (the spiking-network study's Proposition 1), up to ties.
    """

    uses_references = False

    def __init__(self, population_size: int | None = None, seed: int = 0,
                 queries: list[str] | None = None):
        self.population_size = positive_int(population_size, "population_size", allow_none=True)
        self.seed = int(seed)
        self.queries = query_option(queries)
        self.last_info: dict = {}

    def score(self, data: AttackInput, target: int, references: np.ndarray) -> np.ndarray:
        check_models(data, target, references, "attack_p", minimum=0)
        qidx = data.query_index(self.queries)
        confidence = columns(data.signal("log_prob")[target], qidx).mean(axis=1)
        population = target_non_members(data, target, self.population_size,
                                        np.random.default_rng(self.seed))
        self.last_info = {"population_size": int(len(population))}
        below = np.searchsorted(np.sort(confidence[population]), confidence, side="right")
        return below / len(population)
