"""The kind of outputs an audit scores, as one object: class logits (:data:`CLASSES`) or a
language model's per-token statistics (:data:`TEXT`). Every place where the two differ (the
width of the stored outputs, how they are stored, the attack input's extras, the targets'
statistics, the run's caveats, the texts shown beside exposed samples, what the reports call
accuracy) asks the pool's modality (:func:`modality_of`) instead of branching on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

    from miaudit.data import Pool
    from miaudit.results.target_models import TargetModels


class Modality:
    """Class logits: one output vector of ``num_classes`` logits per sample and query."""

    name = "classes"  # AttackInput.modality, Attack.modalities
    outputs = "class logits"  # what the models release, in messages
    accuracy_kind = "accuracy"  # what the reports call the targets' accuracy
    has_classes = True  # per-class tables, exposed samples by class

    def output_width(self, pool: Pool) -> int:
        """Values stored per sample and query."""
        return pool.num_classes

    def stored(self, logits: torch.Tensor) -> torch.Tensor:
        """The outputs as the query stage stores them."""
        return logits

    def attack_extras(self, pool: Pool) -> dict[str, Any]:
        """The AttackInput fields of this kind of outputs beside logits and labels."""
        return {}

    def texts(self, pool: Pool, indices: np.ndarray) -> list[str] | None:
        """The samples' texts, shown beside exposed samples (None: not text)."""
        return None

    def target_stats(self, outputs: np.ndarray, labels: np.ndarray, keep: np.ndarray,
                     audited: np.ndarray, targets: list[int], column: int,
                     query: str) -> TargetModels:
        """The targets' statistics (:mod:`miaudit.results.target_models`) from their (M, N,
        Q, C) outputs; ``column`` / ``query``: the clean query the accuracy is measured on."""
        from miaudit.results.target_models import classifier_stats

        return classifier_stats(outputs, labels, keep, audited, targets, column).with_facts(
            accuracy_query=query)

    def external_stats(self, outputs: Any, audited: np.ndarray,
                       targets: list[int]) -> TargetModels:
        """The targets' statistics from outputs made elsewhere (``miaudit score``): accuracy
        on their clean query (named ``identity``, or a shift by 0 without flip); without one,
        on the first query, and the record says so."""
        from miaudit.queries import clean_column

        column = clean_column(list(outputs.query_names))
        query = outputs.query_names[0 if column is None else column]
        stats = self.target_stats(outputs.logits, outputs.labels, outputs.keep, audited,
                                  targets, 0 if column is None else column, query)
        if column is not None:
            return stats
        return stats.with_facts(accuracy_note=f"accuracy on query {query!r}, which may be an "
                                              "augmentation: no query is named identity")

    def caveats(self, stats: TargetModels, logits: np.ndarray) -> list[str]:
        """Warnings about the whole run: targets that learned nothing (near chance)."""
        from miaudit.results.target_models import untrained_caveat

        caveat = untrained_caveat(stats, int(logits.shape[-1]))
        return [caveat] if caveat else []


class TextModality(Modality):
    """A causal language model's per-token statistics (``queries.signals.TEXT_STATS`` per
    token of each text), stored as float16."""

    name = "text"
    outputs = "text (causal LM) outputs"
    accuracy_kind = "next-token accuracy"
    has_classes = False

    def output_width(self, pool: Pool) -> int:
        from miaudit.queries.signals import TEXT_STATS

        return len(TEXT_STATS) * (pool.x.shape[1] - 1)  # one value per predicted token

    def stored(self, logits: torch.Tensor) -> torch.Tensor:
        """A language model's per-token statistics stored as float16: half the disk and memory
        of float32 (a GPT-2 family of 16 models x 20,000 texts x 127 tokens x 4 statistics x 3
        queries: 1.0 GB instead of 2.0). Relative rounding 2^-11 of each value; measured on the
        fortunes audit, the pooled AUC of every text attack moves by at most the amount stated in
        docs/tutorials/language-models-advanced.md (benchmarks/text_float16.py)."""
        import torch

        return logits.to(torch.float16)

    def attack_extras(self, pool: Pool) -> dict[str, Any]:
        return {"modality": self.name, "texts": list(pool.texts), "tokens": pool.x.numpy(),
                "vocab_size": int(pool.num_classes)}

    def texts(self, pool: Pool, indices: np.ndarray) -> list[str] | None:
        return [pool.texts[i] for i in indices]

    def target_stats(self, outputs: np.ndarray, labels: np.ndarray, keep: np.ndarray,
                     audited: np.ndarray, targets: list[int], column: int,
                     query: str) -> TargetModels:
        from miaudit.results.target_models import text_stats

        return text_stats(outputs, keep, audited, targets)  # queried once, per token

    def external_stats(self, outputs: Any, audited: np.ndarray,
                       targets: list[int]) -> TargetModels:
        from miaudit.results.target_models import text_stats

        return text_stats(outputs.logits, outputs.keep, audited, targets)

    def caveats(self, stats: TargetModels, logits: np.ndarray) -> list[str]:
        return []  # chance is not defined over a vocabulary's next tokens


CLASSES, TEXT = Modality(), TextModality()
MODALITIES = {modality.name: modality for modality in (CLASSES, TEXT)}


def modality_of(pool: Pool) -> Modality:
    """The modality of a pool's samples."""
    return TEXT if pool.is_text else CLASSES
