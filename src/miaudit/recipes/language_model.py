"""Language-model recipes for ``causal_lm`` on text data: full fine-tuning (``lm``) and LoRA
through ``peft`` (``lora``). Both minimize each sample's mean next-token negative
log-likelihood (:meth:`miaudit.models.causal_lm.CausalLM.sample_nll`) with the shared training
loop, so optimizers, schedules, penalties and DP-SGD (``recipe: dpsgd`` with ``base: lora``,
Opacus clipping the per-sample gradients of the LoRA matrices) work as for other models.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from miaudit.errors import ConfigError
from miaudit.registry import RECIPES
from miaudit.training.engine import FitState, Penalty, Recipe, make_optimizer


def language_model(model: nn.Module) -> Any:
    """The CausalLM inside ``model`` (Opacus wraps it), or a clear error for other models."""
    inner = getattr(model, "_module", model)
    if not hasattr(inner, "sample_nll"):
        raise ValueError(f"language-model recipes train causal_lm models on text data, got "
                         f"{type(inner).__name__}")
    return inner


@RECIPES.register("lm")
class LanguageModel(Recipe):
    """Full fine-tuning of a causal LM: mean next-token cross-entropy per sample."""

    language_model = True
    resumable = True

    def sample_losses(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return language_model(model).sample_nll(x)


@RECIPES.register("lora")
class LoRA(LanguageModel):
    """LoRA fine-tuning (Hu et al. 2022) through peft: only rank-r adapters train. Options:
    r, alpha, dropout, target_modules (default: peft's choice for the architecture)."""

    resumable = True  # prepare() puts the adapters in before a checkpoint is restored

    def __init__(self, penalties: Sequence[Penalty] = (), r: int = 8, alpha: float = 16.0,
                 dropout: float = 0.0, target_modules: list[str] | None = None):
        super().__init__(penalties)
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise ValueError(f"lora option 'r' must be an integer >= 1, got {r!r}")
        if not 0 <= dropout < 1:
            raise ValueError(f"lora option 'dropout' must be in [0, 1), got {dropout!r}")
        self.r, self.alpha, self.dropout = r, float(alpha), float(dropout)
        self.target_modules = list(target_modules) if target_modules else None

    def architecture(self, model: nn.Module) -> nn.Module:
        from miaudit.data.text import require_text_extra

        require_text_extra("peft")
        from peft import LoraConfig, get_peft_model

        inner = language_model(model)
        if isinstance(inner.lm, _peft_model()):  # idempotent: the pipeline may have applied it
            return model
        config = LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout,
                            target_modules=self.target_modules,
                            fan_in_fan_out=_uses_conv1d(inner.lm))
        try:
            inner.lm = get_peft_model(inner.lm, config)
        except ValueError as error:  # peft: no default target modules for this architecture
            raise ConfigError(f"train.recipe_options: lora: {error}; set recipe option "
                              "target_modules") from None
        return model

    def prepare(self, state: FitState) -> None:
        """Adapters in, before the first step (the shared loop, so dpsgd can wrap it): the
        optimizer is rebuilt over the trainable (adapter) parameters."""
        if not isinstance(language_model(state.model).lm, _peft_model()):
            state.model = self.architecture(state.model).to(state.env.device)
            state.optimizer = make_optimizer(state.model, state.params)


def _peft_model() -> type:
    from peft import PeftModel

    return PeftModel


def _uses_conv1d(lm: nn.Module) -> bool:
    """GPT-2 stores its projections as transformers' Conv1D (weights transposed)."""
    return any(type(m).__name__ == "Conv1D" for m in lm.modules())
