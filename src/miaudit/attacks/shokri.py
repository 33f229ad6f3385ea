"""Shadow-model attack (Shokri et al. 2017, "Membership Inference Attacks Against Machine
Learning Models", Sec. V): per-class attack classifiers trained on shadow (reference) outputs."""

from __future__ import annotations

import numpy as np
from scipy.special import log_softmax
from sklearn.base import ClassifierMixin
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from miaudit.attacks._base import Attack, AttackInput
from miaudit.attacks._common import check_models, choice, positive_int, query_option
from miaudit.registry import ATTACKS

_ROWS_PER_CHUNK = 16384  # samples whose (Q, C) logits are turned into features at once
_LOG_FLOOR = np.log(1e-30)


def sorted_log_probs(logits: np.ndarray) -> np.ndarray:
    """(n, Q', C) logits -> (n, C) features: log of the query-averaged softmax, sorted in
    decreasing order (Shokri's sorted probability vector; the log is a monotone per-feature
    transform that trees ignore and that keeps near-1 probabilities apart for the MLP)."""
    probs = np.exp(log_softmax(logits.astype(np.float64), axis=-1)).mean(axis=1)
    features = np.log(np.maximum(probs, np.exp(_LOG_FLOOR)))
    return -np.sort(-features, axis=1)


def features_of(data: AttackInput, models: np.ndarray, samples: np.ndarray,
                qidx: np.ndarray) -> np.ndarray:
    """Features of (model, sample) pairs, computed in chunks to bound the float64 softmax."""
    out = np.empty((len(samples), data.logits.shape[-1]))
    for start in range(0, len(samples), _ROWS_PER_CHUNK):
        stop = start + _ROWS_PER_CHUNK
        chunk = data.logits[models[start:stop], samples[start:stop]][:, qidx]
        out[start:stop] = sorted_log_probs(chunk)
    return out


def make_classifier(kind: str, seed: int) -> ClassifierMixin:
    if kind == "gbdt":
        return HistGradientBoostingClassifier(max_iter=100, random_state=seed)
    if kind == "mlp":  # Shokri's attack model: one hidden layer of 64 units
        return make_pipeline(StandardScaler(), MLPClassifier(
            hidden_layer_sizes=(64,), max_iter=200, early_stopping=True, random_state=seed))
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))


@ATTACKS.register("shokri")
class Shokri(Attack):
    """Shokri et al. 2017 shadow-model attack: for each class, a scikit-learn classifier learns
    IN/OUT from the reference models' sorted output vectors (labelled by the keep matrix) and
    scores the target's outputs by its predicted member probability.

    Options:
      classifier ("gbdt" | "mlp" | "logistic", "gbdt"): histogram gradient boosting, a
        64-unit MLP (closest to the paper's attack network), or logistic regression.
      max_rows (int, 20000): per class, a seeded random subset of the (reference, sample)
        pairs for training (the paper trains on a few thousand shadow records).
      seed (int, 0); queries (list[str] | None): softmax averaged over these columns.
    A class whose training rows lack members or non-members uses one pooled classifier.
    """

    def __init__(self, classifier: str = "gbdt", max_rows: int = 20000, seed: int = 0,
                 queries: list[str] | None = None):
        self.classifier = choice(classifier, "classifier", ("gbdt", "mlp", "logistic"))
        self.max_rows = positive_int(max_rows, "max_rows")
        self.seed = int(seed)
        self.queries = query_option(queries)
        self.last_info: dict = {}

    def training_pairs(self, data: AttackInput, refs: np.ndarray, label: int | None,
                       rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(reference, sample) pairs of one class (or all), subsampled to ``max_rows``."""
        samples = np.flatnonzero(data.labels == label) if label is not None else \
            np.arange(len(data.labels))
        total = len(refs) * len(samples)
        flat = np.arange(total) if total <= self.max_rows else \
            np.sort(rng.choice(total, self.max_rows, replace=False))
        return refs[flat // len(samples)], samples[flat % len(samples)]

    def fit(self, data: AttackInput, models: np.ndarray, samples: np.ndarray,
            qidx: np.ndarray) -> ClassifierMixin | None:
        members = data.keep[models, samples]
        if members.all() or not members.any():
            return None
        classifier = make_classifier(self.classifier, self.seed)
        return classifier.fit(features_of(data, models, samples, qidx), members)

    def score(self, data: AttackInput, target: int, references: np.ndarray) -> np.ndarray:
        # Single-threaded: on a loaded 2-core machine the OpenMP threads of gradient boosting
        # spin-wait and made a 3,500-row fit 40x slower; these fits are small anyway.
        with threadpool_limits(limits=1):
            return self._score(data, target, references)

    def _score(self, data: AttackInput, target: int, references: np.ndarray) -> np.ndarray:
        refs = check_models(data, target, references, "shokri")
        qidx = data.query_index(self.queries)
        rng = np.random.default_rng(self.seed)
        samples = np.arange(len(data.labels))
        target_features = features_of(data, np.full(len(samples), target), samples, qidx)
        scores = np.empty(len(samples))
        pooled, pooled_classes = None, []
        for label in np.unique(data.labels):  # one attack model per class, as in the paper
            rows = data.labels == label
            model = self.fit(data, *self.training_pairs(data, refs, label, rng), qidx)
            if model is None:
                if pooled is None:
                    pooled = self.fit(data, *self.training_pairs(data, refs, None, rng), qidx)
                    if pooled is None:
                        raise ValueError("shokri: the references have no member/non-member "
                                         "contrast to learn from")
                model = pooled
                pooled_classes.append(int(label))
            scores[rows] = model.predict_proba(target_features[rows])[:, 1]
        self.last_info = {"classes_using_pooled_model": pooled_classes}
        return scores
