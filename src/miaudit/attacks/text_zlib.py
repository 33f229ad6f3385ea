"""zlib attack on language models (Carlini et al. 2021, "Extracting Training Data from Large
Language Models", USENIX Security, Sec. 5.2, "zlib")."""

from __future__ import annotations

import zlib

import numpy as np

from miaudit.attacks._base import Attack, AttackInput
from miaudit.attacks._common import check_models
from miaudit.attacks._text import require_text
from miaudit.registry import ATTACKS


def zlib_entropy(texts: list[str]) -> np.ndarray:
    """(N,) bytes of each text's zlib compression (level 9): its zlib entropy."""
    return np.array([len(zlib.compress(t.encode("utf-8"), 9)) for t in texts], dtype=np.float64)


@ATTACKS.register("zlib")
class ZlibAttack(Attack):
    """zlib (Carlini et al. 2021, Sec. 5.2): the ratio of the target's log-perplexity to the
    text's zlib entropy; score = mean_j log p(t_j | t_<j) / zlib_bytes(x) (the negated ratio,
    so members, with low perplexity for their compressibility, score higher). Texts that are
    merely repetitive (low perplexity *and* low zlib entropy) are discounted. No reference
    models; needs the texts (data set text, or ``texts`` given to ``miaudit score``)."""

    min_references = 0
    modalities = ("text",)

    def score(self, data: AttackInput, target: int, references: np.ndarray) -> np.ndarray:
        check_models(data, target, references, "zlib", minimum=0)
        require_text(data, "zlib")
        if data.texts is None:
            raise ValueError("zlib needs the texts of the samples (its zlib entropy); give "
                             "them with the outputs")
        return data.signal("log_prob")[target, :, 0] / zlib_entropy(data.texts)
