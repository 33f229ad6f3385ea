"""Attack-R, the reference-model attack (Ye et al. 2022, "Enhanced Membership Inference Attacks
against Machine Learning Models", Sec. 4.3), and the all-references form of the spiking-network
MI study (Guan et al., Table 1)."""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from miaudit.attacks._base import Attack, AttackInput, AttackResult
from miaudit.attacks._common import (
    check_models,
    choice,
    columns,
    common_size,
    confidence_logit,
    group_masks,
    query_option,
)
from miaudit.registry import ATTACKS


def log_confidence(data: AttackInput, model: int, qidx: np.ndarray) -> np.ndarray:
    """(N,) log Pr(x|theta), Pr the true-class probability averaged over the query columns
    (= minus the cross-entropy loss of the averaged prediction)."""
    log_p = columns(data.signal("log_prob")[model], qidx)
    return logsumexp(log_p, axis=1) - np.log(log_p.shape[1])


def interpolated_cdf(values: np.ndarray, valid: np.ndarray, point: np.ndarray) -> np.ndarray:
    """Per sample i, the inverse of numpy's 'linear' quantile of values[valid[:, i], i] at
    point[i]: sup {q in [0, 1] : np.quantile(group, q, method='linear') <= point}, 0 when the
    point is below every value. Continuous and piecewise linear in the point, so the score
    does not take only n + 1 values (which ties at low FPR).

    values, valid: (R, N); point: (N,). A sample with c of its k values <= point, 0 < c < k,
    lies between the sorted values v[c-1] <= point < v[c]: q = (c - 1 + frac) / (k - 1).
    Hand-written: numpy and scipy offer the quantile, not its inverse per sample.
    """
    ordered = np.sort(np.where(valid, values, np.nan), axis=0)  # NaN sorts last
    k = valid.sum(axis=0)
    c = (ordered <= point).sum(axis=0)  # NaN comparisons are False
    lower = np.take_along_axis(ordered, np.clip(c - 1, 0, None)[None], axis=0)[0]
    upper = np.take_along_axis(ordered, np.minimum(c, len(values) - 1)[None], axis=0)[0]
    inside = (c > 0) & (c < k)
    with np.errstate(invalid="ignore", divide="ignore"):
        fraction = (c - 1 + (point - lower) / (upper - lower)) / (k - 1)
    return np.where(c == 0, 0.0, np.where(inside, fraction, 1.0))


def group_matrix(keep: np.ndarray, refs: np.ndarray, member: bool,
                 equalize: bool) -> tuple[np.ndarray, int | None]:
    """(R, N) mask of the references in each sample's IN (or OUT) group, and the common group
    size when ``equalize`` (every sample keeps its first that many, in reference order)."""
    limit = common_size(keep, refs, member) if equalize else None
    return np.stack([mask for _, mask in group_masks(keep, refs, member, limit)]), limit


def group_fraction(values: np.ndarray, group: np.ndarray, point: np.ndarray) -> np.ndarray:
    """Per sample, the fraction of its group's reference values <= point (NaN if empty)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return ((values <= point) & group).sum(axis=0) / group.sum(axis=0)


@ATTACKS.register("attack_r")
class AttackR(Attack):
    """Attack-R: compare the target's confidence Pr(x|theta) with the reference models'
    Pr(x|theta'), Pr the true-class softmax probability averaged over the ``queries`` columns
    (all by default; a dropout column already averages its n passes, the study's Eq. 8).

    Options:
      variant ("ye" | "paper_c", "ye"):
        "ye": Ye et al.'s per-sample test against the OUT references (those that did not train
          on x): score = interpolated CDF of the target's log-confidence (minus its loss, the
          scale Ye et al. threshold on) among the OUT references' (``interpolated_cdf``), so
          "score >= 1 - alpha" is exactly their test "loss <= alpha-quantile (numpy 'linear')
          of the reference losses". Ties remain only outside the references' range (score 0
          or 1): with few references, a memorizing target's members often all score 1, and
          TPR at low FPR can still be 0. Samples that are IN for every reference use all of
          them (counted in ``info``).
        "paper_c": the spiking-network study's Table 1 score, (1/2n) sum over all 2n reference
          models of 1[Pr(x|theta) >= Pr(x|theta')], computed as (IN-group fraction +
          OUT-group fraction) / 2: equal to the paper's formula under its 2n design (n IN and
          n OUT references per sample), and free of the membership leak a plain fraction has
          under the rotation protocol (a target member has one IN reference fewer, and IN
          references are more confident on x). A sample with references of one kind only
          uses that kind (counted in ``info``).
        Default "ye": it is the attack the name stands for, a calibrated per-sample hypothesis
        test against the OUT distribution, and continuous. Reproductions of the spiking study
        set ``variant: paper_c``.
      equalize (bool, True): every sample's IN (and OUT) group has the same size, the
        smallest over samples, each sample keeping its first references of the group (as
        LiRA's ``equalize``). Under the rotation protocol a member has one OUT reference more
        and one IN reference fewer than a non-member; with unequal sizes the score's
        distribution differs by group size even when the target memorizes nothing (with 3 vs
        4 OUT references, a target above all of them is likelier for the 3, so "ye" scored a
        null AUC of 0.489 averaged over six synthetic worlds). Under the 2n design no
        reference is dropped, so the paper's formula is unchanged.
      queries (list[str] | None).
    """

    modalities = ("classes", "text")  # reads per-sample signals only

    def __init__(self, variant: str = "ye", equalize: bool = True,
                 queries: list[str] | None = None):
        self.variant = choice(variant, "variant", ("ye", "paper_c"))
        if not isinstance(equalize, bool):
            raise ValueError(f"option 'equalize' must be a boolean, got {equalize!r}")
        self.equalize = equalize
        self.queries = query_option(queries)

    def evaluate(self, data: AttackInput, target: int, references: np.ndarray) -> AttackResult:
        refs = check_models(data, target, references, "attack_r")
        qidx = data.query_index(self.queries)
        out, out_size = group_matrix(data.keep, refs, False, self.equalize)
        if self.variant == "ye":
            return self._ye(data, target, refs, qidx, out, out_size)
        inside, in_size = group_matrix(data.keep, refs, True, self.equalize)
        # Ordering only: the logit keeps near-1 confidences apart (see confidence_logit).
        values = np.stack([confidence_logit(data, model, qidx) for model in refs])
        point = confidence_logit(data, target, qidx)
        in_fraction = group_fraction(values, inside, point)
        out_fraction = group_fraction(values, out, point)
        scores = np.where(np.isnan(in_fraction), out_fraction,
                          np.where(np.isnan(out_fraction), in_fraction,
                                   0.5 * (in_fraction + out_fraction)))
        return AttackResult(scores, {
            "in_refs_per_sample": in_size, "out_refs_per_sample": out_size,
            "samples_without_in_refs": int((~inside.any(axis=0)).sum()),
            "samples_without_out_refs": int((~out.any(axis=0)).sum())})

    @staticmethod
    def _ye(data: AttackInput, target: int, refs: np.ndarray, qidx: np.ndarray,
            out: np.ndarray, out_size: int | None) -> AttackResult:
        values = np.stack([log_confidence(data, model, qidx) for model in refs])
        missing = ~out.any(axis=0)
        group = out | missing[None]  # OUT references, or all where x has none
        scores = interpolated_cdf(values, group, log_confidence(data, target, qidx))
        return AttackResult(scores, {"out_refs_per_sample": out_size,
                                     "samples_without_out_refs": int(missing.sum())})
