"""The blind baseline of a text audit: how well the inputs alone, without any model, tell the
members from the non-members.

Das, Zhang & Tramer 2024 ("Blind Baselines Beat Membership Inference Attacks for Foundation
Models") and Duan et al. 2024 ("Do Membership Inference Attacks Work on Large Language
Models?") show that on the usual member / non-member text benchmarks a classifier that never
queries the model matches the published attacks: the split (other dates, other sources), not
the model, carries the signal. An audit that draws its members at random is immune (the
blind AUC is 0.5 up to noise); a user's own member and non-member sets (``miaudit score``)
may not be.

The classifier follows Das et al. Sec. 3: a bag of word n-grams (1-2) and character n-grams
(2-4, within word boundaries), binary counts, plus their date feature (the largest
four-digit year 1900-2099 the text mentions, Sec. 3.1, and whether it mentions one) and
the text's log length; an L2 logistic regression per target on those features, scored
out-of-fold by stratified K-fold cross-validation, so every text is scored by a classifier
that did not see it. The scores then go through the audit's own metrics and crossed
bootstrap (:mod:`miaudit.stats.intervals`) with the attacks' resamples, so each attack's advantage
over the blind baseline is a paired difference with its interval.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from miaudit.stats import intervals, metrics

FOLDS = 5
#: the most n-gram features kept (most frequent first): bounds the classifier's cost on large
#: pools; Das et al.'s bag-of-words classifiers use vocabularies of this order
MAX_FEATURES = 50_000
YEAR = re.compile(r"(?<!\d)(19\d\d|20\d\d)(?!\d)")


def dense_features(texts: list[str]) -> np.ndarray:
    """(N, 3): log(1 + characters), the largest year mentioned (0 when none; Das et al.
    Sec. 3.1's date feature, scaled to [0, 1] over 1900-2099), and whether one is."""
    years = [max((int(y) for y in YEAR.findall(t)), default=0) for t in texts]
    mentioned = np.array([y > 0 for y in years], dtype=np.float64)
    scaled = np.where(mentioned > 0, (np.array(years, dtype=np.float64) - 1900) / 199, 0.0)
    length = np.log1p([len(t) for t in texts])
    return np.column_stack([length / max(length.max(), 1.0), scaled, mentioned])


def blind_features(texts: list[str]) -> Any:
    """(N, F) sparse: binary word 1-2-grams, character 2-4-grams, and the dense features.
    The vocabularies are fit on all texts (unsupervised: no label reaches them)."""
    from scipy import sparse
    from sklearn.feature_extraction.text import CountVectorizer

    blocks = []
    for options in ({"analyzer": "word", "ngram_range": (1, 2), "token_pattern": r"(?u)\b\w+\b"},
                    {"analyzer": "char_wb", "ngram_range": (2, 4)}):
        vectorizer = CountVectorizer(binary=True, lowercase=True, max_features=MAX_FEATURES,
                                     dtype=np.float64, **options)
        try:
            blocks.append(vectorizer.fit_transform(texts))
        except ValueError:  # no n-gram at all (e.g. texts of digits only for words)
            continue
    blocks.append(sparse.csr_matrix(dense_features(texts)))
    return sparse.hstack(blocks).tocsr()


def out_of_fold_scores(features: Any, members: np.ndarray, folds: int = FOLDS,
                       seed: int = 0) -> np.ndarray:
    """(N,) logistic-regression decision values, each text scored by the model fit on the
    other folds (stratified K-fold). Fewer members or non-members than folds: fewer folds."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    members = np.asarray(members, dtype=bool)
    splits = min(folds, int(members.sum()), int((~members).sum()))
    if splits < 2:
        raise ValueError("the blind baseline needs at least 2 members and 2 non-members")
    scores = np.empty(len(members))
    for train, test in StratifiedKFold(splits, shuffle=True, random_state=seed).split(
            np.zeros(len(members)), members):
        classifier = LogisticRegression(C=1.0, max_iter=1000)
        classifier.fit(features[train], members[train])
        scores[test] = classifier.decision_function(features[test])
    return scores


def blind_scores(texts: list[str], members: np.ndarray, seed: int = 0) -> np.ndarray:
    """(T, N) out-of-fold blind scores of the N texts for each target's (T, N) membership."""
    features = blind_features(list(texts))
    return np.stack([out_of_fold_scores(features, row, seed=seed + t)
                     for t, row in enumerate(np.asarray(members, dtype=bool))])


def shift_warning(pooled: dict[str, Any]) -> str | None:
    """One line when the blind AUC's interval lies above 0.5: the texts alone tell members
    from non-members, so the attacks' numbers measure the split as much as the model."""
    low, high = pooled.get("auc_ci", [0.0, 1.0])
    if low <= 0.5:
        return None
    return (f"blind baseline: the texts alone separate members from non-members (AUC "
            f"{pooled['auc']:.3f} [{low:.3f}, {high:.3f}], no model queried): the member and "
            "non-member sets differ in distribution, so attack numbers overstate membership "
            "leakage; compare each attack's advantage over the blind baseline, or draw the "
            "sets at random from one source (Das et al. 2024)")


def blind_baseline(texts: list[str], members: np.ndarray, resamples: intervals.Resamples,
                   fpr_levels: tuple[float, ...] = metrics.DEFAULT_FPR_LEVELS,
                   ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(record, replicates): the blind baseline's pooled metrics with the audit's intervals
    (``resamples``: the attacks' own, so differences are paired) and its bootstrap
    replicates. The record holds ``pooled``, ``method`` and ``warning`` (None or a line)."""
    scores = blind_scores(texts, members)
    replicates = intervals.replicate_metrics(scores, members, resamples, fpr_levels)
    pooled = intervals.pooled_intervals(metrics.summarize(scores.ravel(), members.ravel(),
                                                          fpr_levels),
                                        replicates, resamples.method)
    record = {"pooled": pooled, "warning": shift_warning(pooled), "method": (
        f"logistic regression on word 1-2-grams, character 2-4-grams, year mentioned and "
        f"length of the texts alone, {FOLDS}-fold out-of-fold scores per target (Das et al. "
        "2024)")}
    return record, replicates


def advantages(attacks: dict[str, dict[str, Any]], replicates: dict[str, dict[str, np.ndarray]],
               blind_pooled: dict[str, Any], blind_replicates: dict[str, np.ndarray]) -> None:
    """``attacks[label]["over_blind"] = {key: {"value", "ci"}}``: each attack minus the blind
    baseline on the headline metrics, paired over the shared resamples."""
    for label, record in attacks.items():
        record["over_blind"] = intervals.paired_differences(
            record["pooled"], blind_pooled, replicates[label], blind_replicates,
            metrics.HEADLINE_KEYS)
