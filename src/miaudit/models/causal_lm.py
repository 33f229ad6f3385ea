"""``causal_lm``: an HF ``transformers`` causal language model over text data
(:mod:`miaudit.data.text`), from a local checkpoint folder (offline) or built from a config.

Inputs are (N, L) int64 token ids ``[BOS, t_1, ..., t_T, PAD...]`` (PAD = -1). The module's
output (what the query stage stores, once per model) is, for every sample and every scored
position j = 1..L-1 (token t_j given its prefix), four numbers laid out as (N, 4 * (L - 1)):

- ``log p(t_j | t_<j)``: the per-token log-probability (LOSS, Min-K%, zlib, LiRA, RMIA);
- ``mu_j = E_{z ~ p(.|t_<j)} log p(z | t_<j)`` and ``sigma_j``, the standard deviation of
  ``log p(z | t_<j)`` under the same distribution (Min-K%++, Zhang et al. 2024, Eq. 3);
- ``1[argmax p(.|t_<j) = t_j]`` (next-token accuracy: did the model learn at all?);

NaN at padded positions. Training reads :meth:`CausalLM.sample_nll`.

:meth:`CausalLM.conditional` gives the same four numbers for each text's tokens when the text
follows a prefix (ReCaLL, Con-ReCall: the ``prefix`` query of :mod:`miaudit.auditor.text_audit`).

Queries batch texts by length: rows are sorted by their number of real tokens and each
micro-batch is cut to its own longest row, so a pool of mostly short texts padded to one long
maximum costs the tokens it has, not rows x maximum (causal attention and right padding make
the trimmed and the padded computation identical for every real token).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from miaudit.models._base import scaled
from miaudit.queries.signals import TEXT_STATS
from miaudit.registry import MODELS

PAD = -1  # miaudit.data.text.PAD (not imported: the data module need not load with models)
STATS = len(TEXT_STATS)  # log p, mu, sigma, correct: one definition, queries.signals
PICKLED_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl")  # torch.save / pickle formats
#: float32 elements of one micro-batch's (rows x positions x vocabulary) logits; bounds the
#: memory of a query of a large-vocabulary model (GPT-2: 50257 tokens per position)
LOGIT_BUDGET = 1 << 25


class CausalLM(nn.Module):
    """A causal LM whose output is per-token statistics of the input text (see module doc)."""

    def __init__(self, lm: nn.Module, vocab_size: int):
        super().__init__()
        self.lm = lm
        self.vocab_size = vocab_size

    def token_logits(self, x: torch.Tensor) -> torch.Tensor:
        """(N, L - 1, V) next-token logits at positions 0..L-2. No attention mask is needed:
        padding is on the right, and causal attention never lets a real token see it."""
        return self.lm(input_ids=x.clamp_min(0)).logits[:, :-1]

    def sample_nll(self, x: torch.Tensor) -> torch.Tensor:
        """(N,) mean negative log-likelihood per real token (the training loss per sample)."""
        targets = x[:, 1:]
        mask = targets != PAD
        nll = F.cross_entropy(self.token_logits(x).transpose(1, 2).float(),
                              targets.clamp_min(0), reduction="none")
        return (nll * mask).sum(1) / mask.sum(1).clamp_min(1)

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conditional(x, None)

    @torch.no_grad()
    def conditional(self, x: torch.Tensor, prefix: torch.Tensor | None) -> torch.Tensor:
        """(N, 4 * (L - 1)) statistics of each row's tokens t_1..t_T, each given the
        ``prefix`` ids (1-D; None: none) followed by the row's own BOS and t_<j."""
        width = x.shape[1]
        out = torch.full((len(x), STATS * (width - 1)), float("nan"), device=x.device)
        lengths = (x != PAD).sum(1)
        order = torch.argsort(lengths, descending=True, stable=True)
        extra = 0 if prefix is None else len(prefix)
        start = 0
        while start < len(x):  # longest first: each micro-batch's width is its first row's
            longest = max(2, int(lengths[order[start]]))
            rows = max(1, LOGIT_BUDGET // max(1, (longest + extra) * self.vocab_size))
            chosen = order[start : start + rows]
            stats = self._stats(x[chosen, :longest], prefix).view(len(chosen), STATS, -1)
            out.view(len(x), STATS, width - 1)[chosen, :, : longest - 1] = stats
            start += rows
        return out

    def _stats(self, x: torch.Tensor, prefix: torch.Tensor | None = None) -> torch.Tensor:
        targets = x[:, 1:]
        if prefix is None:
            logits = self.token_logits(x)
        else:  # the prefix's own predictions are dropped: only the row's tokens are scored
            joined = torch.cat([prefix.to(x.device).expand(len(x), -1), x], dim=1)
            logits = self.token_logits(joined)[:, len(prefix):]
        log_p = torch.log_softmax(logits.double(), dim=-1)
        p = log_p.exp()
        token = log_p.gather(-1, targets.clamp_min(0)[..., None])[..., 0]
        mu = (p * log_p).sum(-1)
        sigma = ((p * log_p.square()).sum(-1) - mu.square()).clamp_min(0).sqrt()
        correct = (log_p.argmax(-1) == targets).double()
        stats = torch.stack([token, mu, sigma, correct], dim=1)  # (n, 4, L - 1)
        stats[(targets == PAD)[:, None].expand_as(stats)] = float("nan")
        return stats.flatten(1).float()


def tiny_gpt2(vocab_size: int, positions: int, layers: int, dim: int, heads: int,
              dropout: float) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=vocab_size, n_positions=positions, n_embd=dim,
                        n_layer=layers, n_head=heads, resid_pdrop=dropout, embd_pdrop=dropout,
                        attn_pdrop=dropout, bos_token_id=vocab_size - 1,
                        eos_token_id=vocab_size - 1)
    return GPT2LMHeadModel(config)


def pretrained(checkpoint: Path, vocab_size: int, positions: int) -> nn.Module:
    """A local checkpoint (``from_pretrained``, offline), checked against the data."""
    from transformers import AutoModelForCausalLM

    if not (checkpoint / "config.json").is_file():
        raise ValueError(f"checkpoint {checkpoint} is not a transformers model folder (no "
                         "config.json); save one with save_pretrained")
    pickled = sorted(p.name for p in checkpoint.iterdir() if p.suffix in PICKLED_WEIGHTS)
    if pickled and not any(checkpoint.glob("*.safetensors")):
        raise ValueError(
            f"checkpoint {checkpoint} holds pickled weights ({', '.join(pickled[:3])}), which "
            "miaudit never loads (unpickling runs code); where you trust the file, convert it: "
            "python -c \"from transformers import AutoModelForCausalLM as M; "
            f"M.from_pretrained('{checkpoint}').save_pretrained('{checkpoint}', "
            "safe_serialization=True)\", then remove the pickled files")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar per model build would flood the audit's output
    lm = AutoModelForCausalLM.from_pretrained(str(checkpoint), local_files_only=True,
                                              use_safetensors=True)
    model_vocab = lm.get_input_embeddings().num_embeddings
    if model_vocab < vocab_size:
        raise ValueError(f"checkpoint {checkpoint} has {model_vocab} token embeddings but the "
                         f"data's tokenizer has {vocab_size} tokens; tokenize with the "
                         f"model's tokenizer (data.options.tokenizer: {checkpoint})")
    limit = getattr(lm.config, "n_positions", None) or getattr(
        lm.config, "max_position_embeddings", None)
    if limit is not None and limit < positions:
        raise ValueError(f"checkpoint {checkpoint} takes at most {limit} positions, the data "
                         f"has samples of {positions}; lower data.options.max_tokens")
    return lm


def checkpoint_content(options: dict) -> str | None:
    """Digest of the checkpoint folder's files (names and bytes): it enters the identity of
    every model fine-tuned from it, so replacing the checkpoint retrains them."""
    from miaudit._runtime.io import file_digest, text_digest

    checkpoint = options.get("checkpoint")
    if checkpoint is None:
        return None
    folder = Path(checkpoint).expanduser()
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    return text_digest({str(p.relative_to(folder)): file_digest(p) for p in files})


def check_causal_lm(*, dropout: float, layers: int = 2, dim: int = 128, heads: int = 4,
                    positions: int | None = None, **unchecked: object) -> None:
    """causal_lm's option values that need no data (the config checks them early)."""
    if not 0 <= dropout < 1:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    for name, value in (("layers", layers), ("dim", dim), ("heads", heads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if positions is not None and (isinstance(positions, bool) or not isinstance(positions, int)
                                  or positions < 2):
        raise ValueError(f"positions must be an integer >= 2 (the context length), got "
                         f"{positions!r}")


@MODELS.register("causal_lm", check=check_causal_lm, content_digest=checkpoint_content)
def causal_lm(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0,
              checkpoint: str | None = None, layers: int = 2, dim: int = 128, heads: int = 4,
              dropout: float = 0.0, positions: int | None = None) -> CausalLM:
    """HF causal LM on text data: a local checkpoint folder, or a GPT-2 built from a config.
    ``positions``: the context length of a GPT-2 built from a config (default: the data's
    longest sample); longer leaves room for the ``prefix`` query's prefix (ReCaLL)."""
    if len(input_shape) != 1:
        raise ValueError(f"causal_lm takes token-id sequences (data set text), got inputs of "
                         f"shape {input_shape}")
    from miaudit.data.text import require_text_extra

    require_text_extra("transformers")
    positions, context = input_shape[0], positions
    if checkpoint is not None:
        lm = pretrained(Path(checkpoint).expanduser(), num_classes, positions)
        return CausalLM(lm, lm.get_input_embeddings().num_embeddings)
    dim = scaled(dim, width)
    if dim % heads:
        raise ValueError(f"dim {dim} (x width) must be a multiple of heads {heads}")
    check_causal_lm(dropout=dropout, layers=layers, dim=dim, heads=heads, positions=context)
    return CausalLM(tiny_gpt2(num_classes, max(positions, context or 0), layers, dim, heads,
                              dropout), num_classes)

