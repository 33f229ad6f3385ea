"""Attack-P, the population attack (Ye et al. 2022, "Enhanced Membership Inference Attacks
against Machine Learning Models", Sec. 4.1), and its raw-confidence form in the spiking-network
MI study (Guan et al., Table 1)."""

from __future__ import annotations

import numpy as np

from miaudit.attacks._base import Attack, AttackInput, AttackResult
from miaudit.attacks._common import (
    POPULATION_CHOICES,
    check_models,
    choice,
    confidence_logit,
    population_samples,
    positive_int,
    query_option,
)
from miaudit.registry import ATTACKS


@ATTACKS.register("attack_p")
class AttackP(Attack):
    """Attack-P: the target's confidence Pr(x|theta) on x, the true-class softmax probability
    averaged over the ``queries`` columns (all by default). No reference models.

    Options:
      variant ("paper_c" | "ye", "paper_c"):
        "paper_c": score = Pr(x|theta) itself (the spiking-network study's Table 1). It is
          returned as logit(Pr(x|theta)), strictly increasing in it (same ROC), so that
          confidences within 1e-16 of 1 do not round to 1.0 and tie (see
          ``confidence_logit``).
        "ye": Ye et al.'s test, score = fraction of population points z with
          Pr(z|theta) <= Pr(x|theta), the percentile whose alpha-threshold is their per-model
          threshold. It ranks x exactly as "paper_c" does, up to the ties of a finite
          population (the spiking study's Proposition 1), and needs population data.
        Default "paper_c": the same ranking without ties and without population data.
      population ("disjoint" | "target_nonmembers", "disjoint"), variant "ye" only: where z
        comes from. "disjoint": ``data.population`` (an attacker holding data from the
        training distribution, disjoint from the target's training set); "target_nonmembers":
        the target's non-members among the evaluated samples (the authors' research-code
        convention, for comparison: it assumes the attacker knows the target's membership
        labels, and z contains the evaluated non-members). See ``population_samples``.
      population_size (int | None, None = all), variant "ye": a seeded subset of z.
      seed (int, 0); queries (list[str] | None).
    """

    modalities = ("classes", "text")  # reads per-sample signals only

    min_references = 0

    def __init__(self, variant: str = "paper_c", population: str = "disjoint",
                 population_size: int | None = None, seed: int = 0,
                 queries: list[str] | None = None):
        self.variant = choice(variant, "variant", ("paper_c", "ye"))
        self.population = choice(population, "population", POPULATION_CHOICES)
        self.population_size = positive_int(population_size, "population_size", allow_none=True)
        self.seed = int(seed)
        self.queries = query_option(queries)
        self.needs_population = self.variant == "ye" and self.population == "disjoint"

    def evaluate(self, data: AttackInput, target: int, references: np.ndarray) -> AttackResult:
        check_models(data, target, references, "attack_p", minimum=0)
        confidence = confidence_logit(data, target, data.query_index(self.queries))
        if self.variant == "paper_c":
            return AttackResult(confidence)
        population = population_samples(data, target, self.population, self.population_size,
                                        np.random.default_rng(self.seed), "attack_p")
        below = np.searchsorted(np.sort(confidence[population]), confidence, side="right")
        return AttackResult(below / len(population), {"population_size": int(len(population))})
