"""ReCaLL (Xie et al. 2024) and Con-ReCall (Wang et al. 2024): how a text's likelihood moves
when the text follows a prefix of non-member (and member) texts. They read the ``prefix``
query columns (:mod:`miaudit.auditor.stages.prefix_query`), stored once per model."""

from __future__ import annotations

import numpy as np

from miaudit.attacks._base import Attack, AttackInput, AttackResult
from miaudit.attacks._common import check_models
from miaudit.attacks._text import require_text
from miaudit.registry import ATTACKS

NONMEMBER_PREFIX = "prefix"
MEMBER_PREFIX = "prefix:member=true"


def mean_log_likelihood(data: AttackInput, model: int, query: str) -> np.ndarray:
    """(N,) LL(x) = mean_j log p(t_j | ...) of model ``model`` under query column ``query``."""
    if query not in data.query_names:
        raise ValueError(f"this attack needs the {query!r} query column (the texts' log-probs "
                         f"after a prefix); add {query!r} to queries (have {data.query_names})")
    return data.signal("log_prob")[model, :, data.query_names.index(query)]


def recall_scores(conditional: np.ndarray, unconditional: np.ndarray) -> np.ndarray:
    """ReCaLL (Xie et al. 2024, Sec. 3, the ReCaLL score): LL(x | P) / LL(x), P a non-member
    prefix. Both are negative; a member's likelihood falls further under an unrelated
    prefix, so its ratio is larger (higher = member)."""
    return conditional / unconditional


def con_recall_scores(nonmember: np.ndarray, member: np.ndarray, unconditional: np.ndarray,
                      gamma: float) -> np.ndarray:
    """Con-ReCall (Wang et al. 2024, Sec. 3, the contrastive score): (LL(x | P_nm) - gamma
    LL(x | P_m)) / LL(x): the non-member prefix pulls a member's likelihood down, the member
    prefix holds it up."""
    return (nonmember - gamma * member) / unconditional


@ATTACKS.register("recall")
class ReCaLL(Attack):
    """ReCaLL (Xie et al. 2024, "ReCaLL: Membership Inference via Relative Conditional
    Log-Likelihoods", Sec. 3): score = LL(x | P) / LL(x), LL the mean token log-likelihood and P
    a prefix of ``shots`` non-member texts (the audit's population data; query ``prefix``). No
    reference models."""

    min_references = 0
    modalities = ("text",)

    def __init__(self, query: str = NONMEMBER_PREFIX):
        self.query = str(query)

    def score(self, data: AttackInput, target: int, references: np.ndarray) -> np.ndarray:
        check_models(data, target, references, "recall", minimum=0)
        require_text(data, "recall")
        unconditional = data.signal("log_prob")[target, :, 0]
        return recall_scores(mean_log_likelihood(data, target, self.query), unconditional)


@ATTACKS.register("con_recall")
class ConReCall(Attack):
    """Con-ReCall (Wang et al. 2024, "Con-ReCall: Detecting Pre-training Data in LLMs via
    Contrastive Decoding", Sec. 3): score = (LL(x | P_nm) - gamma LL(x | P_m)) / LL(x), P_nm a
    prefix of non-member texts (query ``prefix``), P_m of the target's own members (query
    ``prefix:member=true``), gamma (default 1) weighting the member side. The texts inside
    the target's member prefix cannot be scored fairly (each is conditioned on itself): they
    get the target's lowest score (counted in the info), which can only lower the attack's
    numbers. No reference models."""

    min_references = 0
    modalities = ("text",)

    def __init__(self, gamma: float = 1.0, nonmember_query: str = NONMEMBER_PREFIX,
                 member_query: str = MEMBER_PREFIX):
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or gamma < 0:
            raise ValueError(f"option 'gamma' must be a number >= 0, got {gamma!r}")
        self.gamma = float(gamma)
        self.nonmember_query, self.member_query = str(nonmember_query), str(member_query)

    def evaluate(self, data: AttackInput, target: int, references: np.ndarray) -> AttackResult:
        from miaudit.auditor.stages.prefix_query import prefix_samples

        check_models(data, target, references, "con_recall", minimum=0)
        require_text(data, "con_recall")
        scores = con_recall_scores(mean_log_likelihood(data, target, self.nonmember_query),
                                   mean_log_likelihood(data, target, self.member_query),
                                   data.signal("log_prob")[target, :, 0], self.gamma)
        inside = prefix_samples(self.member_query, data.keep[target], data.population,
                                data.evaluated)
        evaluated = data.evaluated_mask()
        scores[inside] = scores[evaluated].min()
        return AttackResult(scores, {"member_prefix_texts": [int(i) for i in inside]})
