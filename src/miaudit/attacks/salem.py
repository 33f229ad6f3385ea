"""ML-Leaks shadow-model attack (Salem et al. 2019, "ML-Leaks: Model and Data Independent
Membership Inference Attacks and Defenses on Machine Learning Models", Sec. III, adversary 1):
one attack classifier on the top-k sorted posteriors, for all classes."""

from __future__ import annotations

from functools import partial

import numpy as np

from miaudit.attacks._base import Attack, AttackInput, AttackResult
from miaudit.attacks._common import check_models, choice, positive_int, query_option
from miaudit.attacks.shokri import (
    CLASSIFIERS,
    features_of,
    fit_in_out,
    member_probability,
    sorted_log_probs,
    training_pairs,
)
from miaudit.registry import ATTACKS


@ATTACKS.register("salem")
class Salem(Attack):
    """Salem et al. 2019 (ML-Leaks, adversary 1): the reference models' posteriors, sorted in
    decreasing order and cut to the top ``top_k`` (3 in the paper, which reports that the
    top 3 posteriors perform about as well as the full vector), train ONE attack model for
    all classes (the
    sorting drops the class identity that Shokri et al.'s per-class models rely on); the
    target's sorted top-k posteriors are scored by its member probability.

    Differences from the paper, on purpose: every reference model is a shadow model (the
    paper trains one), and the attack model defaults to gradient boosting (the paper's is a
    64-unit MLP, ``classifier="mlp"``), as for ``shokri``.

    Options:
      top_k (int, 3): posteriors kept after sorting (the number of classes keeps all).
      classifier ("gbdt" | "mlp" | "logistic", "gbdt"): see
        :func:`miaudit.attacks.shokri.make_classifier`.
      max_rows (int, 20000): a seeded random subset of the (reference, sample) pairs for
        training, balanced per sample (:func:`miaudit.attacks.shokri.training_pairs`).
      seed (int, 0); queries (list[str] | None): softmax averaged over these columns.
    """

    min_references = 1

    def __init__(self, top_k: int = 3, classifier: str = "gbdt", max_rows: int = 20000,
                 seed: int = 0, queries: list[str] | None = None):
        self.top_k = positive_int(top_k, "top_k")
        self.classifier = choice(classifier, "classifier", CLASSIFIERS)
        self.max_rows = positive_int(max_rows, "max_rows")
        self.seed = int(seed)
        self.queries = query_option(queries)

    def evaluate(self, data: AttackInput, target: int, references: np.ndarray) -> AttackResult:
        refs = check_models(data, target, references, "salem", self.min_references)
        qidx = data.query_index(self.queries)
        features = partial(sorted_log_probs, top_k=self.top_k)
        samples = np.arange(len(data.labels))
        pairs = training_pairs(data.keep, refs, samples, self.max_rows,
                               np.random.default_rng(self.seed))
        model = fit_in_out(data, *pairs, qidx, self.classifier, self.seed, features)
        if model is None:
            raise ValueError("salem: the references have no member/non-member contrast to "
                             "learn from")
        target_features = features_of(data, np.full(len(samples), target), samples, qidx,
                                      features)
        return AttackResult(member_probability(model, target_features),
                            {"top_k": min(self.top_k, data.logits.shape[-1])})
