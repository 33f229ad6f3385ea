"""Shadow-model attack (Shokri et al. 2017, "Membership Inference Attacks Against Machine
Learning Models", Sec. V): per-class attack classifiers trained on shadow (reference) outputs.

Also the shared pieces of the shadow-classifier attacks (features, classifiers, training
pairs), used by :mod:`miaudit.attacks.salem`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.special import log_softmax
from sklearn.base import ClassifierMixin
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from miaudit.attacks._base import Attack, AttackInput, AttackResult
from miaudit.attacks._common import check_models, choice, positive_int, query_option
from miaudit.registry import ATTACKS

_ROWS_PER_CHUNK = 16384  # samples whose (Q, C) logits are turned into features at once
_LOG_FLOOR = np.log(1e-30)
CLASSIFIERS = ("gbdt", "mlp", "logistic")

Features = Callable[[np.ndarray], np.ndarray]


def log_probs(logits: np.ndarray) -> np.ndarray:
    """(n, Q', C) logits -> (n, C) features: log of the query-averaged softmax, in class order
    (Shokri et al.'s full prediction vector: the attack model of class y sees which entry is
    the true class). The log is a monotone per-feature transform that trees ignore and that
    keeps near-1 probabilities apart for the MLP and the logistic model."""
    probs = np.exp(log_softmax(logits.astype(np.float64), axis=-1)).mean(axis=1)
    return np.log(np.maximum(probs, np.exp(_LOG_FLOOR)))


def sorted_log_probs(logits: np.ndarray, top_k: int | None = None) -> np.ndarray:
    """:func:`log_probs` sorted in decreasing order, the first ``top_k`` kept (Salem et al.
    2019, Sec. III: the class identity is dropped, so one attack model serves all classes)."""
    return -np.sort(-log_probs(logits), axis=1)[:, :top_k]


def features_of(data: AttackInput, models: np.ndarray, samples: np.ndarray, qidx: np.ndarray,
                features: Features = log_probs) -> np.ndarray:
    """Features of (model, sample) pairs, computed in chunks to bound the float64 softmax."""
    chunks = []
    for start in range(0, len(samples), _ROWS_PER_CHUNK):
        stop = start + _ROWS_PER_CHUNK
        chunks.append(features(data.logits[models[start:stop], samples[start:stop]][:, qidx]))
    return np.concatenate(chunks) if chunks else np.zeros((0, data.logits.shape[-1]))


def make_classifier(kind: str, seed: int) -> ClassifierMixin:
    """The attack model. ``gbdt``: histogram gradient boosting, 40 rounds of learning rate 0.25
    on 32 bins (benchmarks/shokri_quality.py: the same pooled AUC as scikit-learn's default
    100 rounds of 0.1 on 255 bins on synthetic memorizing logits, at ~40% of the CPU time;
    fewer rounds or smaller trees lost AUC, and so did logistic regression and the MLP:
    0.66-0.70 against 0.73). ``mlp``: Shokri et al.'s attack network (one hidden layer of 64
    units, Sec. V-C). ``logistic``: standardized logistic regression."""
    if kind == "gbdt":
        return HistGradientBoostingClassifier(max_iter=40, learning_rate=0.25, max_bins=32,
                                              early_stopping=False, random_state=seed)
    if kind == "mlp":
        return make_pipeline(StandardScaler(), MLPClassifier(
            hidden_layer_sizes=(64,), max_iter=200, early_stopping=True, random_state=seed))
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))


def training_pairs(keep: np.ndarray, refs: np.ndarray, samples: np.ndarray, max_rows: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(reference, sample) training pairs, balanced per sample: each sample contributes as
    many IN as OUT pairs (k = min(#IN, #OUT) references each, picked at random), then a
    seeded random ``max_rows`` of all pairs are kept.

    Why balanced: the paper's shadow data is disjoint from the target's, but here references
    and target share one pool. Under the rotation protocol's balanced keep matrix a sample
    is IN for 7 of the 15 references when the 16th model (the target) trained on it and for
    8 when it did not. An attack model flexible enough to recognise a sample from its
    outputs learns that per-sample IN rate and ranks the target's members LOWER (AUC < 0.5
    with no leakage at all; cf. the inverted Shokri AUCs of 0.34-0.45 in the neural-ODE
    study's tables). With k IN and k OUT pairs per sample the rate is 1/2 for everyone.
    """
    inside = keep[np.ix_(refs, samples)]  # (references, samples)
    # Each reference's rank inside its own group (IN or OUT) of its sample, in random order:
    # IN keys lie in [0, 1), OUT keys in [2, 3), so a column sorts IN first, then OUT.
    key = rng.random(inside.shape) + 2.0 * ~inside
    rank = np.argsort(np.argsort(key, axis=0), axis=0)
    n_in = inside.sum(axis=0)
    per_sample = np.minimum(n_in, len(refs) - n_in)
    chosen = np.where(inside, rank, rank - n_in) < per_sample
    ref_pos, sample_pos = np.nonzero(chosen)
    if len(ref_pos) > max_rows:
        subset = np.sort(rng.choice(len(ref_pos), max_rows, replace=False))
        ref_pos, sample_pos = ref_pos[subset], sample_pos[subset]
    return refs[ref_pos], samples[sample_pos]


def fit_in_out(data: AttackInput, models: np.ndarray, samples: np.ndarray, qidx: np.ndarray,
               kind: str, seed: int, features: Features) -> ClassifierMixin | None:
    """An IN/OUT classifier on the pairs' features, labelled by the keep matrix; None when
    the pairs hold only members or only non-members (nothing to learn)."""
    members = data.keep[models, samples]
    if members.all() or not members.any():
        return None
    # Single-threaded: on a loaded 2-core machine the OpenMP threads of gradient boosting
    # spin-wait and made a 3,500-row fit 40x slower; these fits are small anyway.
    with threadpool_limits(limits=1):
        return make_classifier(kind, seed).fit(
            features_of(data, models, samples, qidx, features), members)


def member_probability(model: ClassifierMixin, features: np.ndarray) -> np.ndarray:
    with threadpool_limits(limits=1):
        return model.predict_proba(features)[:, 1]


def fold_training_models(refs: np.ndarray, target: int, folds: int | None) -> np.ndarray:
    """The references an attack model for ``target`` is trained on: all of them, or with
    ``folds`` = k those outside the target's fold {m : m = target (mod k)}. Every model of a
    fold then has the same training models (when its references are all other models, as
    under the rotation protocol), so one set of attack models serves the whole fold, never
    trained on any output of the model it scores."""
    if folds is None:
        return refs
    return refs[refs % folds != target % folds]


@ATTACKS.register("shokri")
class Shokri(Attack):
    """Shokri et al. 2017 shadow-model attack (Sec. V): for each class y, an attack model
    learns IN/OUT from the reference models' full prediction vectors (class order kept, so
    the model knows which entry is class y; labelled by the keep matrix) and scores the
    target's outputs on class-y samples by its predicted member probability. The references
    play the shadow models, trained on known halves of the pool.

    The sorted top-k variant with one attack model for all classes is Salem et al.'s, the
    separate attack ``salem`` (:mod:`miaudit.attacks.salem`).

    Options:
      classifier ("gbdt" | "mlp" | "logistic", "gbdt"): see :func:`make_classifier`; "mlp"
        is the paper's attack network.
      max_rows (int, 20000): per class, a seeded random subset of the (reference, sample)
        pairs for training (the paper trains on a few thousand shadow records per class),
        balanced per sample (see :func:`training_pairs`).
      folds (int | None, None): train on the references outside the target's fold (see
        :func:`fold_training_models`) and reuse those attack models for every target of the
        fold: under the rotation protocol k folds need k trainings instead of one per
        target, at the price of a 1/k smaller training set. Leave it unset for a single
        target (fixed_target protocol): there it only drops references.
      seed (int, 0); queries (list[str] | None): softmax averaged over these columns.
    A class whose training rows lack members or non-members uses one classifier trained on
    all classes' rows (info: ``classes_using_pooled_model``); info also holds the number of
    ``training_models``.
    """

    min_references = 1
    #: (n, Q', C) logits -> (n, F) attack features; a class attribute so that
    #: benchmarks/shokri_quality.py can compare the sorted vector miaudit used before
    features: Features = staticmethod(log_probs)

    def __init__(self, classifier: str = "gbdt", max_rows: int = 20000,
                 folds: int | None = None, seed: int = 0, queries: list[str] | None = None):
        self.classifier = choice(classifier, "classifier", CLASSIFIERS)
        self.max_rows = positive_int(max_rows, "max_rows")
        self.folds = positive_int(folds, "folds", allow_none=True)
        if self.folds == 1:
            raise ValueError("option 'folds' must be at least 2 (one fold holds every model)")
        self.seed = int(seed)
        self.queries = query_option(queries)
        # Trained attack models by training-model set, for the AttackInput they were trained
        # on (held by reference, so it cannot be a recycled object with the same id).
        self._trained: dict[tuple[int, ...], tuple[dict, list[int]]] = {}
        self._trained_on: AttackInput | None = None

    def fit(self, data: AttackInput, refs: np.ndarray, samples: np.ndarray, qidx: np.ndarray,
            rng: np.random.Generator) -> ClassifierMixin | None:
        pairs = training_pairs(data.keep, refs, samples, self.max_rows, rng)
        return fit_in_out(data, *pairs, qidx, self.classifier, self.seed, self.features)

    def attack_models(self, data: AttackInput, refs: np.ndarray,
                      qidx: np.ndarray) -> tuple[dict, list[int]]:
        """({class: attack model}, classes using the pooled model), trained on ``refs``."""
        rng = np.random.default_rng(self.seed)
        models, pooled, pooled_classes = {}, None, []
        for label in np.unique(data.labels):  # one attack model per class, as in the paper
            models[label] = self.fit(data, refs, np.flatnonzero(data.labels == label), qidx,
                                     rng)
            if models[label] is None:
                if pooled is None:
                    pooled = self.fit(data, refs, np.arange(len(data.labels)), qidx, rng)
                    if pooled is None:
                        raise ValueError("shokri: the references have no member/non-member "
                                         "contrast to learn from")
                models[label] = pooled
                pooled_classes.append(int(label))
        return models, pooled_classes

    def trained(self, data: AttackInput, refs: np.ndarray,
                qidx: np.ndarray) -> tuple[dict, list[int]]:
        """:meth:`attack_models`, reused across targets that share the training models."""
        if self.folds is None:
            return self.attack_models(data, refs, qidx)
        if self._trained_on is not data:
            self._trained, self._trained_on = {}, data
        key = (*refs.tolist(), -1, *qidx.tolist())
        if key not in self._trained:
            self._trained[key] = self.attack_models(data, refs, qidx)
        return self._trained[key]

    def evaluate(self, data: AttackInput, target: int, references: np.ndarray) -> AttackResult:
        refs = check_models(data, target, references, "shokri", self.min_references)
        training = fold_training_models(np.sort(refs), target, self.folds)
        if len(training) < self.min_references:
            raise ValueError(f"shokri: no reference outside target {target}'s fold "
                             f"(folds={self.folds})")
        qidx = data.query_index(self.queries)
        models, pooled_classes = self.trained(data, training, qidx)
        samples = np.arange(len(data.labels))
        target_features = features_of(data, np.full(len(samples), target), samples, qidx,
                                      self.features)
        scores = np.empty(len(samples))
        for label, model in models.items():
            rows = data.labels == label
            scores[rows] = member_probability(model, target_features[rows])
        return AttackResult(scores, {"classes_using_pooled_model": pooled_classes,
                                     "training_models": int(len(training))})
