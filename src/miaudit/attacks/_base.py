"""The attack interface: outputs of all models, the keep matrix, and a scoring method."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from miaudit.queries.signals import SIGNALS, TEXT_SIGNALS

MODALITIES = ("classes", "text")


@dataclass
class AttackInput:
    """Everything an attack may use.

    logits: (M, N, Q, C) float32, every model x pool sample x query augmentation.
    labels: (N,) int64 true labels.
    keep:   (M, N) bool, keep[m, i] is True iff model m trained on sample i.
    query_names: the Q query specs, in order.
    population: indices of the attacker's population samples (RMIA's z, Attack-P): outputs
        exist for them, no model trained on them (their keep columns are all False) and they
        are never evaluated. Empty when the audit reserved none.
    evaluated: indices of the samples whose membership is scored (the audited samples), or
        None for every sample outside ``population``.
    features: (N, F) the attacker's view of each pool input (:mod:`miaudit.queries.features`), for
        attacks that regress on the example (QMIA); None when only outputs exist.
    modality: "classes" (logits over C classes) or "text" (a causal LM's per-token outputs,
        (M, N, 1, 4 * L): see :mod:`miaudit.queries.signals`; ``labels`` are then all 0).
    texts: the N texts (text only, when known; the zlib attack needs them).
    tokens: (N, L) int64 token ids of the texts, ``[BOS, t_1, ..., t_T, -1, ...]`` (text only,
        when known; DC-PDD's token frequencies need them), and ``vocab_size`` their vocabulary.
    """

    logits: np.ndarray
    labels: np.ndarray
    keep: np.ndarray
    query_names: list[str]
    population: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    evaluated: np.ndarray | None = None
    features: np.ndarray | None = None
    modality: str = "classes"
    texts: list[str] | None = None
    tokens: np.ndarray | None = None
    vocab_size: int | None = None
    _signals: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        models, samples = self.keep.shape
        if self.logits.shape[:2] != (models, samples) or self.logits.ndim != 4:
            raise ValueError(f"logits {self.logits.shape} do not match keep {self.keep.shape}")
        if self.labels.shape != (samples,):
            raise ValueError(f"labels {self.labels.shape} do not match {samples} samples")
        if self.features is not None and len(self.features) != samples:
            raise ValueError(f"features {self.features.shape} do not match {samples} samples")
        if self.modality not in MODALITIES:
            raise ValueError(f"modality must be one of {MODALITIES}, got {self.modality!r}")
        if self.texts is not None and len(self.texts) != samples:
            raise ValueError(f"{len(self.texts)} texts for {samples} samples")

    @property
    def num_models(self) -> int:
        return self.keep.shape[0]

    def signal(self, name: str) -> np.ndarray:
        """(M, N, Q) float64 signal (see :mod:`miaudit.queries.signals`), computed once and
        cached."""
        if name not in self._signals:
            table = TEXT_SIGNALS if self.modality == "text" else SIGNALS
            if name not in table:
                raise KeyError(f"unknown {self.modality} signal {name!r}; valid: {sorted(table)}")
            # One model at a time: the float64 temporaries of a signal are several times the
            # (M, N, Q, C) logits; per model they stay (N, Q, C).
            compute = table[name]
            values = np.empty(self.logits.shape[:3], dtype=np.float64)
            for model in range(self.num_models):
                values[model] = compute(self.logits[model], self.labels[:, None])
            self._signals[name] = values
        return self._signals[name]

    def evaluated_mask(self) -> np.ndarray:
        """(N,) bool: the samples whose membership is scored."""
        mask = np.zeros(self.keep.shape[1], dtype=bool)
        if self.evaluated is None:
            mask[:] = True
            mask[np.asarray(self.population, dtype=np.int64)] = False
        else:
            mask[np.asarray(self.evaluated, dtype=np.int64)] = True
        return mask

    def query_index(self, names: list[str] | None) -> np.ndarray:
        """Column indices of the given query specs. ``names`` None: every query that releases
        scores, i.e. all but the label-only ones (:mod:`miaudit.queries.labels`), which an
        attack reads only by name."""
        if names is None:
            from miaudit.auditor.stages.prefix_query import is_conditional
            from miaudit.queries.labels import is_label_only

            # prefix queries condition the text on other texts: no augmentation of it
            scored = [i for i, n in enumerate(self.query_names)
                      if not is_label_only(n) and not is_conditional(n)]
            if not scored:
                raise ValueError(f"every query ({self.query_names}) releases labels only: a "
                                 "score-based attack needs a query such as 'identity'")
            return np.array(scored)
        missing = [n for n in names if n not in self.query_names]
        if missing:
            raise ValueError(f"queries {missing} were not collected; have {self.query_names}")
        return np.array([self.query_names.index(n) for n in names])


@dataclass
class AttackResult:
    """What one attack says about one target: (N,) scores (higher = more likely a member) and
    diagnostics (JSON-able: tuned hyper-parameters, fallbacks taken), stored in results.json."""

    scores: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)


class Attack:
    """Base class. ``score`` returns (N,) membership scores for the target model, using only
    the outputs of ``references`` (and their keep rows) as attacker knowledge. Attacks with
    diagnostics override ``evaluate`` instead and let ``score`` return its scores."""

    #: the fewest reference models the attack works with (checked before any training)
    min_references: int = 1
    #: True for attacks that need the attacker's population data (``AttackInput.population``)
    needs_population: bool = False
    #: True for attacks that need the attacker's view of the inputs (``AttackInput.features``)
    needs_features: bool = False
    #: the outputs it reads (AttackInput.modality): attacks over the per-sample signals only
    #: also apply to text
    modalities: tuple[str, ...] = ("classes",)

    def check_queries(self, query_names: list[str]) -> None:
        """Raise ValueError naming the query to add when the audit's ``query_names`` lack one
        this attack reads (an audit checks it before training anything)."""
        named = getattr(self, "queries", None)
        missing = [q for q in named or [] if q not in query_names]
        if missing:
            raise ValueError(f"reads queries {missing}, which the audit does not collect "
                             f"({query_names}); add them to queries")

    def caveats(self, references: int) -> list[str]:
        """Warnings about this attack's numbers with ``references`` reference models, shown
        beside its row in the table and the report (e.g. a setting the paper advises against
        at that scale)."""
        return []

    def score(self, data: AttackInput, target: int, references: np.ndarray) -> np.ndarray:
        return self.evaluate(data, target, references).scores

    def evaluate(self, data: AttackInput, target: int, references: np.ndarray) -> AttackResult:
        if type(self).score is Attack.score:
            raise NotImplementedError(f"{type(self).__name__} implements neither score nor "
                                      "evaluate")
        return AttackResult(self.score(data, target, references))
