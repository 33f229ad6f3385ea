"""Min-K% Prob (Shi et al. 2024) and Min-K%++ (Zhang et al. 2024): reference-free attacks
on language models that average the least likely tokens of a text."""

from __future__ import annotations

import numpy as np

from miaudit.attacks._base import Attack, AttackInput
from miaudit.attacks._common import check_models
from miaudit.attacks._text import fraction_option, lowest_fraction_mean, require_text, token_stat
from miaudit.registry import ATTACKS


@ATTACKS.register("min_k")
class MinK(Attack):
    """Min-K% Prob (Shi et al. 2024, "Detecting Pretraining Data from Large Language Models",
    ICLR, Sec. 3, Eq. 1): score = (1/E) sum over the Min-K%(x) set of log p(x_i | x_<i), the
    mean log-probability of the fraction ``k`` (default 0.2) of the text's tokens that the
    target finds least likely (E = max(1, floor(k T)) tokens of T). Members have fewer
    outlier tokens of low probability. No reference models."""

    min_references = 0
    modalities = ("text",)

    def __init__(self, k: float = 0.2):
        self.k = fraction_option(k)

    def score(self, data: AttackInput, target: int, references: np.ndarray) -> np.ndarray:
        check_models(data, target, references, "min_k", minimum=0)
        require_text(data, "min_k")
        return lowest_fraction_mean(token_stat(data, target, "log_prob"), self.k)


def normalized_token_scores(log_p: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """(log p(x_t | x_<t) - mu_<t) / sigma_<t (Zhang et al. 2024, Eq. 3); 0 where the
    next-token distribution is a point mass (sigma = 0: nothing to normalize by)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        scores = (log_p - mu) / sigma
    return np.where(sigma > 0, scores, np.where(np.isfinite(log_p), 0.0, np.nan))


@ATTACKS.register("min_k_pp")
class MinKPlusPlus(Attack):
    """Min-K%++ (Zhang et al. 2024, "Min-K%++: Improved Baseline for Detecting Pre-Training
    Data from Large Language Models", Eqs. 3-4): each token's log-probability standardized by
    the mean mu and standard deviation sigma of log p(z | x_<t) over the whole next-token
    distribution z ~ p(.|x_<t), then the mean over the fraction ``k`` (default 0.2) of lowest
    token scores (as Min-K%). Members sit near local maxima of the likelihood, so their tokens
    score high relative to the distribution. mu and sigma are stored by the query stage."""

    min_references = 0
    modalities = ("text",)

    def __init__(self, k: float = 0.2):
        self.k = fraction_option(k)

    def score(self, data: AttackInput, target: int, references: np.ndarray) -> np.ndarray:
        check_models(data, target, references, "min_k_pp", minimum=0)
        require_text(data, "min_k_pp")
        log_p, mu, sigma = (token_stat(data, target, name) for name in ("log_prob", "mu",
                                                                        "sigma"))
        if not np.isfinite(mu[np.isfinite(log_p)]).all():
            raise ValueError("min_k_pp needs the mean and standard deviation of log p over "
                             "each next-token distribution (token_mu, token_sigma)")
        tokens = normalized_token_scores(log_p, mu, sigma)
        return lowest_fraction_mean(tokens, self.k)
