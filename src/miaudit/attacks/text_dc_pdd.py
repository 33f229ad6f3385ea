"""DC-PDD (Zhang et al. 2024): token probabilities calibrated by how frequent each token is
in a reference corpus (here: the audit's population texts, never trained on)."""

from __future__ import annotations

import numpy as np

from miaudit.attacks._base import Attack, AttackInput
from miaudit.attacks._common import check_models
from miaudit.attacks._text import require_text, token_stat
from miaudit.registry import ATTACKS


def token_frequencies(tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """(V,) Laplace-smoothed frequency of each token id in the reference ``tokens`` (any
    shape, -1 = padding): (count + 1) / (total + V) (Zhang et al. 2024, Sec. 3.3)."""
    real = tokens[tokens >= 0]
    counts = np.bincount(real, minlength=vocab_size)[:vocab_size]
    return (counts + 1.0) / (len(real) + vocab_size)


def first_occurrences(ids: np.ndarray) -> np.ndarray:
    """(N, T) bool: position j holds the first occurrence of its id in its row (ids < 0,
    padding, never). Sorting each row by (id, position) puts a first occurrence where the id
    differs from its sorted predecessor."""
    order = np.argsort(ids, axis=1, kind="stable")
    ordered = np.take_along_axis(ids, order, axis=1)
    first = np.ones_like(ordered, dtype=bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    mask = np.zeros_like(first)
    np.put_along_axis(mask, order, first, axis=1)
    return mask & (ids >= 0)


def dc_pdd_scores(log_p: np.ndarray, ids: np.ndarray, frequency: np.ndarray,
                  cap: float) -> np.ndarray:
    """(N,) beta = mean over the first occurrences of min(-p(x_j | x_<j) log f(x_j), a)
    (Zhang et al. 2024, Sec. 3.4): the cross-entropy of the model's token probability against
    the token's corpus frequency, capped so no single token dominates."""
    first = first_occurrences(ids) & np.isfinite(log_p)
    alpha = -np.exp(np.where(first, log_p, -np.inf)) * np.log(frequency[np.maximum(ids, 0)])
    alpha = np.minimum(alpha, cap)
    with np.errstate(invalid="ignore"):
        return np.where(first, alpha, 0.0).sum(1) / first.sum(1)


@ATTACKS.register("dc_pdd")
class DCPDD(Attack):
    """DC-PDD (Zhang et al. 2024, "Pretraining Data Detection for Large Language Models: A
    Divergence-based Calibration Method", EMNLP, Secs. 3.3-3.4): each token's
    probability under the target times its information -log f(x_j) in a reference corpus
    (Laplace-smoothed frequencies of the audit's population texts), capped at ``a``
    (default 1; the paper tunes a, and a cap below every token's value ties all texts),
    averaged over the first occurrence of each distinct token of the text. A member's
    rare tokens are likelier than their frequency says. Needs the texts' token ids and
    population data; no reference models."""

    min_references = 0
    needs_population = True
    modalities = ("text",)

    def __init__(self, a: float = 1.0):
        if isinstance(a, bool) or not isinstance(a, (int, float)) or a <= 0:
            raise ValueError(f"option 'a' (the cap on each token's score) must be > 0, got {a!r}")
        self.a = float(a)

    def score(self, data: AttackInput, target: int, references: np.ndarray) -> np.ndarray:
        check_models(data, target, references, "dc_pdd", minimum=0)
        require_text(data, "dc_pdd")
        if data.tokens is None:
            raise ValueError("dc_pdd needs the texts' token ids (audits have them; bundles: "
                             "give token_ids)")
        if not len(data.population):
            raise ValueError("dc_pdd takes token frequencies from population texts; give "
                             "population data (data.population_size, or --population)")
        ids = np.asarray(data.tokens, dtype=np.int64)[:, 1:]
        vocab = data.vocab_size or int(ids.max()) + 1
        frequency = token_frequencies(ids[np.asarray(data.population, dtype=np.int64)], vocab)
        return dc_pdd_scores(token_stat(data, target, "log_prob"), ids, frequency, self.a)
