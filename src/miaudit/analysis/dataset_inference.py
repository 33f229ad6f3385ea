"""Dataset inference (Maini, Jia, Papernot & Dziedzic 2024, "LLM Dataset Inference: Did you
train on my dataset?", NeurIPS, Sec. 4): was a *collection* of texts trained on?

Single-text attacks on language models are weak, but a data owner asks about a whole
collection, and many weak per-text signals add up. Given the suspect collection and a
held-out collection from the same distribution known not to be trained on, and per-text
features (the scores of several membership attacks on the suspect model):

1. each collection is split at random into two halves (Sec. 4, stage 2: "the suspect and
   validation sets are split into two equal halves");
2. on the first halves a linear map of the features is learned that separates suspect (1)
   from held-out (0) texts (stage 3: least-squares regression on the standardized features,
   their linear aggregator);
3. on the second halves the learned score of the suspect texts is compared with the held-out
   texts' by a one-sided Welch t-test (stage 4: H0 "the suspect mean is not larger"), and,
   making no normality assumption, a permutation test of the same difference of means.

When the model never trained on the suspect texts both collections are draws from one
distribution, the map learned on the first halves is independent of the second halves, and
the p-value is uniform (tested: a Kolmogorov-Smirnov test over many null draws); a
collection that was trained on gives small p-values. :func:`texts_needed` measures how many
suspect texts (with as many held-out ones) a given share of members needs to reach p < 0.01.
"""

from __future__ import annotations

from typing import Any

import numpy as np

PERMUTATIONS = 2000


def _halves(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    order = rng.permutation(count)
    return order[: count // 2], order[count // 2 :]


def fit_aggregator(suspect: np.ndarray, heldout: np.ndarray) -> tuple[np.ndarray, ...]:
    """(mean, scale, weights): least squares of the label (suspect 1, held-out 0) on the
    standardized features plus an intercept (Maini et al. Sec. 4, stage 3)."""
    features = np.vstack([suspect, heldout])
    mean, scale = features.mean(0), features.std(0)
    scale = np.where(scale > 0, scale, 1.0)
    design = np.column_stack([(features - mean) / scale, np.ones(len(features))])
    target = np.r_[np.ones(len(suspect)), np.zeros(len(heldout))]
    weights = np.linalg.lstsq(design, target, rcond=None)[0]
    return mean, scale, weights


def aggregate(features: np.ndarray, mean: np.ndarray, scale: np.ndarray,
              weights: np.ndarray) -> np.ndarray:
    return ((features - mean) / scale) @ weights[:-1] + weights[-1]


def welch_greater(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(t, p) of the one-sided Welch test H1: mean(a) > mean(b)."""
    from scipy.stats import ttest_ind

    result = ttest_ind(a, b, equal_var=False, alternative="greater")
    return float(result.statistic), float(result.pvalue)


def permutation_greater(a: np.ndarray, b: np.ndarray, rounds: int,
                        rng: np.random.Generator) -> float:
    """p of the one-sided permutation test of mean(a) - mean(b) (labels shuffled ``rounds``
    times; (1 + as extreme) / (1 + rounds), never 0). Vectorized: one matrix of shuffles."""
    pooled = np.r_[a, b]
    observed = a.mean() - b.mean()
    shuffles = np.argsort(rng.random((rounds, len(pooled))), axis=1)
    drawn = pooled[shuffles]
    differences = drawn[:, : len(a)].mean(1) - drawn[:, len(a):].mean(1)
    return float((1 + np.count_nonzero(differences >= observed - 1e-12)) / (1 + rounds))


def dataset_inference(suspect: np.ndarray, heldout: np.ndarray, *, seed: int = 0,
                      permutations: int = PERMUTATIONS) -> dict[str, Any]:
    """The test of "the suspect collection was trained on" from (n_s, F) suspect and (n_h, F)
    held-out per-text features (higher = more member-like is not required: the aggregator
    learns each feature's sign). Returns the p-values, the t statistic, the held-out halves'
    mean scores and sizes, and the learned weights (on standardized features)."""
    suspect = np.asarray(suspect, dtype=np.float64)
    heldout = np.asarray(heldout, dtype=np.float64)
    if suspect.ndim == 1:
        suspect, heldout = suspect[:, None], heldout[:, None]
    if min(len(suspect), len(heldout)) < 8:
        raise ValueError(f"dataset inference needs at least 8 suspect and 8 held-out texts "
                         f"(two halves of 4), got {len(suspect)} and {len(heldout)}")
    if not (np.isfinite(suspect).all() and np.isfinite(heldout).all()):
        raise ValueError("dataset inference features must be finite")
    rng = np.random.default_rng(seed)
    (s_fit, s_test), (h_fit, h_test) = _halves(len(suspect), rng), _halves(len(heldout), rng)
    mean, scale, weights = fit_aggregator(suspect[s_fit], heldout[h_fit])
    a = aggregate(suspect[s_test], mean, scale, weights)
    b = aggregate(heldout[h_test], mean, scale, weights)
    t, p = welch_greater(a, b)
    permuted = permutation_greater(a, b, permutations, rng) if permutations else None
    return {"p_value": p, "p_value_permutation": permuted,
            "t": t, "suspect_mean": float(a.mean()), "heldout_mean": float(b.mean()),
            "suspect_texts": len(suspect), "heldout_texts": len(heldout),
            "tested_texts": [len(a), len(b)], "weights": [float(w) for w in weights[:-1]]}


def texts_needed(members: np.ndarray, nonmembers: np.ndarray, fraction: float,
                 sizes: list[int], *, draws: int = 20, alpha: float = 0.01, seed: int = 0,
                 ) -> dict[str, Any]:
    """How many suspect texts, a share ``fraction`` of them members, dataset inference needs
    to reach p < ``alpha`` (Welch): for each size n in ``sizes``, ``draws`` collections of n
    suspect texts (round(fraction n) from ``members``, the rest from ``nonmembers``) and n
    held-out texts (other ``nonmembers``), each tested; the smallest n whose median p-value
    is below ``alpha`` (None when no size reaches it). Sizes the texts cannot fill are
    skipped."""
    rng = np.random.default_rng(seed)
    rows = []
    for size in sizes:
        inside = int(round(fraction * size))
        outside = size - inside
        if inside > len(members) or outside + size > len(nonmembers):
            continue
        p_values = []
        for _ in range(draws):
            chosen_members = rng.choice(len(members), inside, replace=False)
            others = rng.permutation(len(nonmembers))
            suspect = np.vstack([members[chosen_members], nonmembers[others[:outside]]])
            heldout = nonmembers[others[outside : outside + size]]
            p_values.append(_p_value(suspect, heldout, rng))
        rows.append(_size_row(size, p_values, alpha))
    return {"fraction": fraction, **_needed(rows, alpha, draws)}


def subsample_curve(suspect: np.ndarray, heldout: np.ndarray, sizes: list[int], *,
                    draws: int = 20, alpha: float = 0.01, seed: int = 0) -> dict[str, Any]:
    """:func:`texts_needed` for a given suspect collection: ``draws`` subsets of n of its
    texts against n held-out texts, for each n in ``sizes`` the collections can fill."""
    rng = np.random.default_rng(seed)
    rows = []
    for size in sizes:
        if size > len(suspect) or size > len(heldout):
            continue
        p_values = [_p_value(suspect[rng.choice(len(suspect), size, replace=False)],
                             heldout[rng.choice(len(heldout), size, replace=False)], rng)
                    for _ in range(draws)]
        rows.append(_size_row(size, p_values, alpha))
    return _needed(rows, alpha, draws)


def _p_value(suspect: np.ndarray, heldout: np.ndarray, rng: np.random.Generator) -> float:
    return dataset_inference(suspect, heldout, seed=int(rng.integers(2**31)),
                             permutations=0)["p_value"]


def _size_row(size: int, p_values: list[float], alpha: float) -> dict[str, Any]:
    values = np.array(p_values)
    return {"texts": size, "median_p": float(np.median(values)),
            "share_below_alpha": float((values < alpha).mean())}


def _needed(rows: list[dict[str, Any]], alpha: float, draws: int) -> dict[str, Any]:
    reached = [row["texts"] for row in rows if row["median_p"] < alpha]
    return {"alpha": alpha, "draws": draws, "sizes": rows,
            "texts_needed": min(reached) if reached else None}


# -- from a run directory or a bundle -------------------------------------------------------------
def run_features(source: Any, attacks: list[str] | None, target: int,
                 population: np.ndarray | None = None) -> dict[str, Any]:
    """Per-text features of one target: {"features": (A, F) attack scores of the audited texts,
    "audited": (A,) their pool indices, "members": (A,) the target's membership, "attacks":
    the F labels, "target": its row}. ``source``: a run directory (audit or ``miaudit
    score``; its stored scores are read) or a bundle file (scored now, in memory, with the
    text suite or ``attacks``)."""
    from pathlib import Path

    from miaudit.errors import ConfigError

    path = Path(source)
    if path.is_dir():
        from miaudit.auditor.rundir import RunDir, read_scores
        from miaudit.results import load_summary

        summary = load_summary(path)
        labels = list(summary.attacks) if attacks is None else attacks
        unknown = [a for a in labels if a not in summary.attacks]
        if unknown:
            raise ConfigError(f"attacks {unknown} are not in {path}'s results; it has "
                              f"{list(summary.attacks)}")
        if target not in summary.targets:
            raise ConfigError(f"target {target} is not a target of {path}; its targets are "
                              f"{summary.targets}")
        row = summary.targets.index(target)
        run = RunDir(path)
        audited = np.asarray(run.read_split()["audited"], dtype=np.int64)
        members = run.read_keep()[target][audited]
        columns = [read_scores(path, summary.scores_dir, a)[row] for a in labels]
    else:
        from miaudit.auditor.text_audit import default_text_attacks
        from miaudit.results.external import read_any
        from miaudit.results.scoring import score

        outputs = read_any(path, population=population, balance="ignore")
        labels = attacks or default_text_attacks(outputs, population is not None)
        if not 0 <= target < outputs.num_models:
            raise ConfigError(f"target {target}: the bundle holds {outputs.num_models} models")
        results = score(outputs, labels, population=population, targets=[target])
        mask = np.ones(outputs.num_samples, dtype=bool)
        if population is not None:
            mask[population] = False
        audited = np.flatnonzero(mask)
        members = outputs.keep[target][audited]
        columns = [results.memory_scores[a][0] for a in labels]
    features = np.column_stack(columns).astype(np.float64)
    usable = np.isfinite(features).all(0)
    return {"features": features[:, usable], "audited": audited, "members": members,
            "attacks": [a for a, ok in zip(labels, usable) if ok], "target": target}


def collection_rows(indices: np.ndarray, audited: np.ndarray, what: str) -> np.ndarray:
    """Rows of the audited texts for pool ``indices`` (one clear error for others)."""
    from miaudit.errors import ConfigError

    indices = np.asarray(indices).ravel()
    if indices.dtype.kind not in "iu":
        raise ConfigError(f"{what}: give integer pool indices, got dtype {indices.dtype}")
    position = {int(i): row for row, i in enumerate(audited)}
    missing = [int(i) for i in indices if int(i) not in position]
    if missing:
        raise ConfigError(f"{what}: pool indices {missing[:5]} are not audited texts (scored "
                          "ones); population and out-of-range indices have no scores")
    if len(set(indices.tolist())) != len(indices):
        raise ConfigError(f"{what}: indices repeat")
    return np.array([position[int(i)] for i in indices], dtype=np.int64)
