"""The ``prefix`` query of language-model audits: every text's per-token statistics when the
text follows a prefix of other texts, computed once per model from the reloaded weights.

ReCaLL (Xie et al. 2024) conditions each text on a prefix of *non-member* texts; Con-ReCall
(Wang et al. 2024) also on a prefix of *member* texts. ``prefix`` (``shots`` texts, default 5)
takes them from the audit's population data (never trained on, never scored);
``prefix:member=true`` from the model's own training texts. The texts are the first
``shots`` in pool order (the pool is a seeded random draw), so attacks can tell which texts a
member prefix holds (:func:`prefix_samples`). The prefix is the texts' tokens, each text
opened by the begin-of-text token, cut from the left to the model's context length less the
pool's longest sample (the same prefix for every text), so models built from a config need
``model.options.positions`` above the data's ``max_tokens + 1``.

The stored layout is the ``identity`` query's (log p, mu, sigma, correct per token): the
query is one more column of the text outputs, which score-based attacks that average over
query columns leave out (:func:`is_conditional`).
"""

from __future__ import annotations

import numpy as np
import torch

from miaudit.queries import Query
from miaudit.registry import QUERIES, parse_spec

PAD = -1


class PrefixQuery(Query):
    """A text's statistics after a prefix of ``shots`` other texts (see module doc)."""

    def __init__(self, shots: int = 5, member: bool = False):
        super().__init__()
        if isinstance(shots, bool) or not isinstance(shots, int) or shots < 1:
            raise ValueError(f"option 'shots' must be an integer >= 1, got {shots!r}")
        if not isinstance(member, bool):
            raise ValueError(f"option 'member' must be true or false, got {member!r}")
        self.shots, self.member = shots, member

    @property
    def applies_to_tabular(self) -> bool:
        return False

    def __call__(self, forward, x, generator=None):  # noqa: ANN001 (the Query interface)
        raise ValueError("the prefix query conditions a language model's texts on other "
                         "texts: it runs in text audits only (data set text, model causal_lm)")


@QUERIES.register("prefix")
def prefix(shots: int = 5, member: bool = False) -> PrefixQuery:
    """Each text after ``shots`` population texts (or, member=true, the model's members)."""
    return PrefixQuery(shots, member)


def is_conditional(spec: str) -> bool:
    """Whether a query spec names a prefix query (not an augmentation of the text itself)."""
    try:
        return parse_spec(spec)[0] == "prefix"
    except Exception:  # not a spec this package parses: not ours
        return False


def prefix_samples(spec: str, keep_row: np.ndarray, population: np.ndarray,
                   audited: np.ndarray | None = None) -> np.ndarray:
    """Pool indices of the texts in the prefix of query ``spec`` for a model with membership
    ``keep_row``: the first ``shots`` population texts, or (member=true) the first ``shots``
    of its members among the audited texts (all texts when ``audited`` is None)."""
    name, options = parse_spec(spec)
    query = QUERIES.build(name, **options)
    if query.member:
        candidates = np.flatnonzero(keep_row)
        if audited is not None:
            candidates = np.intersect1d(candidates, audited)
    else:
        candidates = np.sort(np.asarray(population, dtype=np.int64))
    if len(candidates) < query.shots:
        which = "members" if query.member else "population texts (data.population_size)"
        raise ValueError(f"query {spec!r} needs {query.shots} {which}, the audit has "
                         f"{len(candidates)}")
    return candidates[: query.shots]


def prefix_ids(x: torch.Tensor, samples: np.ndarray, room: int) -> torch.Tensor:
    """1-D token ids of the prefix: the samples' rows (each opened by its begin-of-text token,
    padding dropped) joined, the last ``room`` kept."""
    if room < 1:
        raise ValueError("the model's context has no room for a prefix beside the longest "
                         "text; build it with model.options.positions above the data's "
                         "max_tokens + 1 (or lower max_tokens)")
    rows = [row[row != PAD] for row in x[torch.as_tensor(samples)]]
    return torch.cat(rows)[-room:]


def context_length(model: torch.nn.Module) -> int:
    """The causal LM's context length (its position embeddings)."""
    config = model.lm.config
    limit = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings",
                                                            None)
    if limit is None:
        raise ValueError("cannot tell the language model's context length (no n_positions or "
                         "max_position_embeddings in its config)")
    return int(limit)


def prefix_outputs(model: torch.nn.Module, x: torch.Tensor, samples: np.ndarray,
                   device: torch.device) -> torch.Tensor:
    """(N, 4 * (L - 1)) statistics of every text after the prefix of ``samples``."""
    model.eval()
    ids = prefix_ids(x, samples, context_length(model) - x.shape[1])
    return model.conditional(x.to(device), ids.to(device)).float().cpu()
