"""Metric-based attacks of Song & Mittal 2021 ("Systematic Evaluation of Privacy Risks of
Machine Learning Models", Sec. 3.2): confidence, entropy and modified-entropy thresholds with
class-dependent thresholds, and the prediction-correctness baseline (their Eq. 1; Yeom et al.
2018)."""

from __future__ import annotations

import numpy as np
from scipy.special import log_softmax as _log_softmax

from miaudit.attacks._base import Attack, AttackInput, AttackResult
from miaudit.attacks._common import check_models, choice, columns, query_option
from miaudit.queries.signals import SIGNALS
from miaudit.registry import ATTACKS

_CLAMP = 1e-30  # Song & Mittal's code clamps every log argument at 1e-30


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float64 log-softmax over the last axis (scipy's, about 2x faster than a logsumexp)."""
    return _log_softmax(np.asarray(logits, dtype=np.float64), axis=-1)


def prediction_entropy(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Shannon entropy -sum_i p_i log p_i of the softmax (Song & Mittal Eq. 3)."""
    log_p = log_softmax(logits)
    return -(np.exp(log_p) * np.maximum(log_p, np.log(_CLAMP))).sum(axis=-1)


def modified_entropy(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Mentr = -(1 - p_y) log p_y - sum_{i != y} p_i log(1 - p_i) (Song & Mittal Eq. 4)."""
    log_p = log_softmax(logits)
    probs = np.exp(log_p)
    log_one_minus = np.log(np.maximum(1.0 - probs, _CLAMP))
    labels_b = np.broadcast_to(np.asarray(labels)[..., None], log_p.shape[:-1] + (1,))
    log_py = np.take_along_axis(np.maximum(log_p, np.log(_CLAMP)), labels_b, axis=-1)[..., 0]
    p_y = np.take_along_axis(probs, labels_b, axis=-1)[..., 0]
    others = (probs * log_one_minus).sum(axis=-1)
    others -= np.take_along_axis(probs * log_one_minus, labels_b, axis=-1)[..., 0]
    return -(1.0 - p_y) * log_py - others


def prediction_correct(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """1.0 where the arg-max class is the true label, else 0.0."""
    predicted = np.argmax(logits, axis=-1)
    return (predicted == np.broadcast_to(labels, predicted.shape)).astype(np.float64)


# Extra per-(model, sample, query) signals for AttackInput.signal (cached like the core ones).
SIGNALS.setdefault("entropy", prediction_entropy)
SIGNALS.setdefault("mentr", modified_entropy)
SIGNALS.setdefault("correct", prediction_correct)

# signal option -> (cached signal, sign so that higher = member)
_METRICS = {"confidence": ("log_prob", 1.0), "entropy": ("entropy", -1.0),
            "mentr": ("mentr", -1.0)}


def best_threshold(members: np.ndarray, nonmembers: np.ndarray) -> tuple[float, float]:
    """Threshold t among the observed values maximizing (P(member >= t) + P(non-member < t))/2
    (Song & Mittal's ``_thre_setting``), by sorting instead of their O(n^2) loop. Ties go to
    the smallest maximizing value. Returns (t, balanced accuracy)."""
    candidates = np.unique(np.concatenate([members, nonmembers]))
    members, nonmembers = np.sort(members), np.sort(nonmembers)
    tpr = 1.0 - np.searchsorted(members, candidates, side="left") / len(members)
    tnr = np.searchsorted(nonmembers, candidates, side="left") / len(nonmembers)
    accuracy = 0.5 * (tpr + tnr)
    best = int(np.argmax(accuracy))
    return float(candidates[best]), float(accuracy[best])


def class_thresholds(values: np.ndarray, is_member: np.ndarray, labels: np.ndarray,
                     num_classes: int) -> tuple[np.ndarray, dict]:
    """Per-class thresholds on pooled reference values (rows = (reference, sample) pairs).
    A class lacking member or non-member values uses the class-independent threshold."""
    pooled, _ = best_threshold(values[is_member], values[~is_member])
    thresholds = np.full(num_classes, pooled)
    fallback = []
    for label in range(num_classes):  # a loop over classes; each search is vectorized
        rows = labels == label
        members, nonmembers = values[rows & is_member], values[rows & ~is_member]
        if len(members) and len(nonmembers):
            thresholds[label], _ = best_threshold(members, nonmembers)
        else:
            fallback.append(label)
    return thresholds, {"pooled_threshold": pooled, "classes_using_pooled": fallback}


@ATTACKS.register("song_mittal")
class SongMittal(Attack):
    """Song & Mittal 2021 threshold attack with class-dependent thresholds (Sec. 3.2).

    Options:
      signal ("confidence" | "entropy" | "mentr", "mentr"): p_y, -entropy, or -Mentr
        (modified entropy, Eq. 4; logs clamped at 1e-30). Confidence is thresholded as log p_y,
        which selects the same thresholds as p_y (monotone).
      class_dependent (bool, True): one threshold per class, else one for all.
      queries (list[str] | None): the signal is averaged over these query columns.

    Thresholds maximize (TPR + TNR) / 2 over the reference models' member / non-member values
    of each class (all (reference, sample) pairs pooled). The score is the margin
    signal(x) - threshold[y(x)], so "score >= 0" is exactly the paper's decision and the ROC
    sweeps around it.
    """

    def __init__(self, signal: str = "mentr", class_dependent: bool = True,
                 queries: list[str] | None = None):
        self.signal = choice(signal, "signal", tuple(_METRICS))
        if not isinstance(class_dependent, bool):
            raise ValueError("option 'class_dependent' must be a boolean")
        self.class_dependent = class_dependent
        self.queries = query_option(queries)

    def values(self, data: AttackInput, model: int, qidx: np.ndarray) -> np.ndarray:
        name, sign = _METRICS[self.signal]
        return sign * columns(data.signal(name)[model], qidx).mean(axis=1)

    def evaluate(self, data: AttackInput, target: int, references: np.ndarray) -> AttackResult:
        refs = check_models(data, target, references, "song_mittal")
        qidx = data.query_index(self.queries)
        ref_values = np.stack([self.values(data, r, qidx) for r in refs]).ravel()
        is_member = data.keep[refs].ravel()
        labels = np.tile(data.labels, len(refs)) if self.class_dependent else \
            np.zeros(len(ref_values), dtype=np.int64)
        num_classes = int(data.labels.max()) + 1 if self.class_dependent else 1
        if is_member.all() or not is_member.any():
            raise ValueError("song_mittal: the references need both member and non-member "
                             "values to choose a threshold")
        thresholds, info = class_thresholds(ref_values, is_member, labels, num_classes)
        target_labels = data.labels if self.class_dependent else 0
        return AttackResult(self.values(data, target, qidx) - thresholds[target_labels],
                            {"thresholds": [float(t) for t in thresholds], **info})


@ATTACKS.register("correctness")
class Correctness(Attack):
    """Prediction-correctness baseline (Song & Mittal 2021 Eq. 1; Yeom et al. 2018 Alg. 3):
    "member" iff the target classifies x correctly. Score = fraction of the ``queries``
    columns (all by default) classified correctly. No reference models."""

    min_references = 0

    def __init__(self, queries: list[str] | None = None):
        self.queries = query_option(queries)

    def score(self, data: AttackInput, target: int, references: np.ndarray) -> np.ndarray:
        check_models(data, target, references, "correctness", minimum=0)
        qidx = data.query_index(self.queries)
        return columns(data.signal("correct")[target], qidx).mean(axis=1)
