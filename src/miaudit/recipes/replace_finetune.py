"""Replace-then-finetune: the neural-ODE study's cheap route to an NSDE.

Pre-train a model (e.g. ``resnet14``) with cross-entropy, replace the blocks of its last
residual group with one freshly initialized SDE block of the same width
(:func:`miaudit.models.sde.sde_block`), then finetune the whole network. The group's
downsampling layer, the stem, the earlier groups and the head keep their pre-trained weights.

Epochs: ``pretrain_epochs`` (default: the TrainParams epochs) for phase 1; the finetuning phase
runs ``finetune_epochs`` (default: the TrainParams epochs), optionally at ``finetune_lr``. The
recipe's penalties apply to the finetuning phase; pre-training is the plain standard objective.

``freeze_backbone`` (default False): keep the reused part (stem, earlier groups, the last
group's downsampling layer) fixed during finetuning: its parameters get no gradient and its
normalization layers stay in eval mode (no running statistics from the finetuning data); only
the SDE block and the head train. Paper A's post-processing argument (Corollary 4.2's proof:
everything computed from the NSDE's noisy output is post-processing) covers the reused part
only if it does not see the private data again; that needs ``freeze_backbone=True`` *and* a
backbone pre-trained on other data (``pretrained``). The default is False because the study's
Fig. 7 experiment fine-tunes the converted network, and an audited backbone pre-trained on the
model's own IN half has seen the private data anyway.

``pretrained``: a safetensors state dict of the base model (or a folder holding
``weights.safetensors``, e.g. ``RUN/models/0003``); pre-training is then skipped. In an audit,
every target and reference model is otherwise pre-trained on its own IN half and then converted,
as the attacker would do. A shared pre-trained model that saw pool samples leaks their
membership into every model: use one trained on disjoint data.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn

from miaudit.models.sde import DEFAULT_CONVENTION, STEPPERS, noise_schedule, sde_block
from miaudit.models.staged import StagedNet
from miaudit.registry import RECIPES
from miaudit.training.engine import ParentSpec, Recipe, TrainEnv, TrainParams, fit


def require_staged(model: nn.Module) -> StagedNet:
    if not isinstance(model, StagedNet):
        raise ValueError("replace_finetune needs a staged model (resnet14, odenet, odenet64, "
                         f"sdenet, ...) with stem/stages/head; got {type(model).__name__}")
    return model


def replace_last_group(model: nn.Module, block: nn.Module) -> StagedNet:
    """Put ``block`` in place of the blocks of the model's last stage (in place)."""
    require_staged(model).stages[-1].blocks = block
    return model


def backbone_modules(model: nn.Module) -> list[nn.Module]:
    """The reused part before the replaced group: stem, earlier stages, last stage's ``down``."""
    staged = require_staged(model)
    return [staged.stem, *staged.stages[:-1], staged.stages[-1].down]


def freeze(modules: list[nn.Module]) -> None:
    for module in modules:
        for parameter in module.parameters():
            parameter.requires_grad_(False)


def load_weights(model: nn.Module, path: str | Path) -> None:
    from safetensors.torch import load_file

    path = Path(path)
    if path.is_dir():
        path = path / "weights.safetensors"
    if not path.is_file():
        raise ValueError(f"option 'pretrained': no weights file at {path}")
    state = load_file(str(path))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"option 'pretrained': {path} does not fit the base model "
                         f"(missing {missing[:5]}, unexpected {unexpected[:5]})")


@RECIPES.register("replace_finetune")
class ReplaceFinetune(Recipe):
    """Pre-train, replace the last residual group by an SDE block, finetune (NODE MI study).

    Options: ``pretrain_epochs``, ``finetune_epochs`` (None: the training epochs),
    ``finetune_lr`` (None: the training lr), ``pretrained`` (weights of the base model; skips
    pre-training), ``freeze_backbone`` (module docstring), and the SDE block's ``k`` or
    ``sigma``, ``T``, ``steps``, ``stepper`` (srk4 | euler_maruyama), ``convention`` (paper |
    oganesyan), ``deterministic_eval``, ``spectral_norm``, ``ode_norm`` (default: the model's
    norm; none with spectral_norm)."""

    resumable = True

    def __init__(self, penalties: Any = (), pretrain_epochs: int | None = None,
                 finetune_epochs: int | None = None, finetune_lr: float | None = None,
                 pretrained: str | None = None, k: float | None = None,
                 sigma: float | None = None, T: float = 1.0, steps: int = 16,
                 stepper: str = "srk4", deterministic_eval: bool = False,
                 spectral_norm: bool = False, ode_norm: str | None = None,
                 convention: str = DEFAULT_CONVENTION, freeze_backbone: bool = False):
        super().__init__(penalties)
        if not isinstance(freeze_backbone, bool):
            raise ValueError(f"option 'freeze_backbone' must be true or false; "
                             f"got {freeze_backbone!r}")
        for option, value in (("pretrain_epochs", pretrain_epochs),
                              ("finetune_epochs", finetune_epochs)):
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ValueError(f"option {option!r} must be a non-negative integer; got {value!r}")
        if finetune_lr is not None and not finetune_lr > 0:
            raise ValueError(f"option 'finetune_lr' must be > 0; got {finetune_lr!r}")
        if stepper not in STEPPERS:
            raise ValueError(f"option 'stepper' must be one of {', '.join(STEPPERS)}; "
                             f"got {stepper!r}")
        self.schedule = noise_schedule(k, sigma, T, steps, stepper, convention)
        self.freeze_backbone = freeze_backbone
        self._frozen: list[nn.Module] = []
        self.pretrain_epochs = pretrain_epochs
        self.finetune_epochs = finetune_epochs
        self.finetune_lr = finetune_lr
        self.pretrained = pretrained
        self.deterministic_eval = deterministic_eval
        self.spectral_norm = spectral_norm
        self.ode_norm = ode_norm

    def new_block(self, model: StagedNet) -> nn.Module:
        norm = self.ode_norm or ("none" if self.spectral_norm else model.norm_kind)
        return sde_block(model.stages[-1].channels, self.schedule, norm, self.spectral_norm,
                         self.deterministic_eval)

    def architecture(self, model: nn.Module) -> nn.Module:
        return replace_last_group(model, self.new_block(require_staged(model)))

    def parent(self, model: str, model_options: dict[str, Any]) -> ParentSpec | None:
        """The pre-trained base model: the registry model trained with the standard recipe
        (no penalties) for ``pretrain_epochs``, the very model a standard audit of it trains
        (so its cached models serve as backbones). None when ``pretrained`` weights are given
        or pre-training is off."""
        if self.pretrained is not None or self.pretrain_epochs == 0:
            return None
        return ParentSpec(model=model, model_options=dict(model_options), recipe="standard",
                          epochs=self.pretrain_epochs)

    def train(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, params: TrainParams,
              env: TrainEnv, x_val: torch.Tensor | None = None,
              y_val: torch.Tensor | None = None) -> tuple[nn.Module, dict[str, list[Any]]]:
        require_staged(model)  # fail before any training
        log: dict[str, list[Any]] = {}
        if self.pretrained is not None:
            load_weights(model, self.pretrained)
        else:
            epochs = params.epochs if self.pretrain_epochs is None else self.pretrain_epochs
            pre = dataclasses.replace(params, epochs=epochs)
            model, pre_log = fit(model, x, y, pre, Recipe(), env)
            log.update({f"pretrain_{key}": values for key, values in pre_log.items()})
        model, fine_log = self.train_from_parent(model, x, y, params, env, x_val, y_val)
        return model, {**fine_log, **log}

    def train_from_parent(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                          params: TrainParams, env: TrainEnv, x_val: torch.Tensor | None = None,
                          y_val: torch.Tensor | None = None
                          ) -> tuple[nn.Module, dict[str, list[Any]]]:
        """Replace the last group of the pre-trained ``model`` and finetune."""
        torch.manual_seed(env.seed + 1)  # the fresh SDE block's initialization
        model = self.architecture(model.to(env.device).eval())
        self._frozen = backbone_modules(model) if self.freeze_backbone else []
        freeze(self._frozen)
        epochs = params.epochs if self.finetune_epochs is None else self.finetune_epochs
        lr = params.lr if self.finetune_lr is None else self.finetune_lr
        model, fine_log = fit(model, x, y, dataclasses.replace(params, epochs=epochs, lr=lr),
                              self, env, x_val, y_val)
        self._frozen = []
        return model, fine_log

    def objective(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        for module in self._frozen:  # fit() puts the whole model in train mode each epoch
            module.eval()
        return super().objective(model, x, y)
