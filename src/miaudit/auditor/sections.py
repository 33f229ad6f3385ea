"""The audit config's sections (``data``, ``model``, ``train``, ``robust_eval``, ``target``)
as typed records, validated field by field; :class:`miaudit.config.AuditConfig` holds them
and checks what spans sections (attacks against queries and models, protocols, costs).
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from miaudit.auditor.components import build_recipe
from miaudit.auditor.specs import ComponentSpec
from miaudit.registry import DATASETS, MODELS, RECIPES, check_size
from miaudit.training.params import TrainParams

MODEL_PROVIDED = ("input_shape", "num_classes", "width")  # arguments miaudit passes to models


class Section(BaseModel):
    """A config section: unknown keys refused, assignments validated."""

    # field docstrings are the fields' descriptions (the generated config reference)
    model_config = ConfigDict(extra="forbid", validate_assignment=True,
                              use_attribute_docstrings=True)

    def identity_dump(self) -> dict[str, Any]:
        """The JSON dump that identifies what this section configures."""
        return self.model_dump(mode="json")


class DataConfig(Section):
    """Which data set, which part of it forms the audit pool, and what is set aside."""

    name: str = "digits"
    """A registered data set (see the registries) or an import path ``package.module:loader``."""
    data_dir: Path | None = None
    """Where the data set lives (a folder or file; CIFAR: the pickles, tarball or image folder)."""
    pool: Literal["all", "train", "test"] = "all"
    """The samples that take part: ``all`` (train + test), ``train`` (paper A audits the
    training set) or ``test``."""
    pool_size: int | None = Field(default=None, gt=3)
    """A seeded subset of the pool of this size (None: the whole pool)."""
    population_size: int | float = Field(default=0.1, ge=0)
    """The attacker's population data (RMIA's z, Attack-P): a count, or a fraction of the
    pool; never trained on, never scored."""
    holdout_size: int | float = Field(default=0, ge=0)
    """The defender's held-out data (early stopping, MixupMMD, MemGuard): a count, or a
    fraction of the pool; never scored."""
    options: dict[str, Any] = Field(default_factory=dict)
    """The loader's options (e.g. ``download: true`` for CIFAR); see the registries."""

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        DATASETS.get(name)
        return name

    @field_validator("population_size", "holdout_size")
    @classmethod
    def _size(cls, value: int | float) -> int | float:
        if isinstance(value, float) and not (0 < value < 1 or value == 0):
            raise ValueError(f"a fraction must be in (0, 1), got {value}; give a count as an "
                             "integer")
        return value

    @model_validator(mode="after")
    def _options(self) -> DataConfig:
        check_size(self.options, "data.options")
        DATASETS.check_options(self.name, self.options, provided=("data_dir",))
        return self


class ModelConfig(Section):
    """A registry model, its width multiplier and model-specific options."""

    name: str = "small_cnn"
    """A registered model (see the registries) or an import path ``package.module:factory``."""
    width: float = Field(default=1.0, gt=0, le=64)
    """Width multiplier of the model's channels."""
    options: dict[str, Any] = Field(default_factory=dict)
    """The model's own options (solver, T, k, steps, ...; see the registries)."""

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        MODELS.get(name)
        return name

    @model_validator(mode="after")
    def _options(self) -> ModelConfig:
        check_size(self.options, "model.options")
        MODELS.check_options(self.name, self.options, provided=MODEL_PROVIDED)
        return self


def check_snapshots(snapshots: tuple[int, ...], epochs: int, name: str, recipe: Any,
                    ensemble: int) -> None:
    """``train.snapshots``: sorted, unique epochs before the last (the final epoch is the
    final model), from recipes that train in one :func:`~miaudit.training.engine.fit` loop."""
    if not snapshots:
        return
    if list(snapshots) != sorted(set(snapshots)) or not all(
            1 <= epoch < epochs for epoch in snapshots):
        raise ValueError(f"train.snapshots are increasing epochs, each in 1..{epochs - 1} "
                         f"(the final epoch {epochs} is the final model), got {list(snapshots)}")
    if ensemble > 1:
        raise ValueError("train.snapshots need train.ensemble 1 (the vectorized ensemble keeps "
                         "no snapshots)")
    from miaudit.training.engine import Recipe

    if type(recipe).train is not Recipe.train:
        raise ValueError(f"recipe {name!r} trains outside the shared epoch loop; "
                         "train.snapshots support recipes that use it (standard, with any "
                         "penalties, and recipes that only change the objective)")


def _train_default(name: str) -> Any:
    return getattr(TrainParams, name)


class TrainConfig(Section):
    """Training recipe (defense) and optimization hyper-parameters (defaults: TrainParams)."""

    recipe: str = "standard"
    """The training recipe or defense (``dpsgd``, ``pgd_at``, ``lora``, ...; see the
    registries) or an import path."""
    recipe_options: dict[str, Any] = Field(default_factory=dict)
    """The recipe's options (e.g. ``{target_epsilon: 8}`` for ``dpsgd``)."""
    penalties: list[ComponentSpec] = Field(default_factory=list, validate_default=True)
    """Loss penalties, e.g. ``l2:weight=1e-5``, ``demem:weight=1.0``."""
    epochs: int = Field(default=_train_default("epochs"), ge=1)
    """Training epochs per model."""
    batch_size: int = Field(default=_train_default("batch_size"), ge=1)
    """Mini-batch size."""
    optimizer: Literal["sgd", "adam", "adamw"] = _train_default("optimizer")
    """The optimizer."""
    lr: float = Field(default=_train_default("lr"), gt=0, allow_inf_nan=False)
    """Peak learning rate."""
    momentum: float = Field(default=_train_default("momentum"), ge=0, lt=1)
    """SGD momentum (Adam: beta1)."""
    nesterov: bool = _train_default("nesterov")
    """Nesterov momentum (SGD)."""
    weight_decay: float = Field(default=_train_default("weight_decay"), ge=0,
                                allow_inf_nan=False)
    """Weight decay (decoupled for AdamW)."""
    schedule: Literal["cosine", "step", "constant"] = _train_default("schedule")
    """Learning-rate schedule after the warm-up."""
    warmup_epochs: float = Field(default=_train_default("warmup_epochs"), ge=0,
                                 allow_inf_nan=False)
    """Linear warm-up, in epochs."""
    milestones: tuple[float, ...] = _train_default("milestones")
    """``step`` schedule: fractions of training at which the rate drops tenfold."""
    crop_padding: int = Field(default=_train_default("crop_padding"), ge=0)
    """Random-crop augmentation with this much padding (0: none)."""
    flip: bool = _train_default("flip")
    """Random horizontal flips during training."""
    ensemble: int = Field(default=1, ge=1, le=256)
    """Train up to this many same-architecture models at once as one vectorized ensemble
    (``torch.func``; equal to sequential training within float tolerance; for GPUs)."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """``bf16``: bfloat16 autocast (+ channels_last) on CPU and CUDA, float32 master weights
    and optimizer state; queries always in float32. Needs bfloat16 in hardware (AVX512_BF16,
    AMX, CUDA Ampere+); elsewhere it is several times slower. Not with ``dpsgd``,
    ``user_function`` or ``ensemble`` > 1."""
    snapshots: tuple[int, ...] = ()
    """Epochs (1 .. epochs - 1) at whose end training keeps a copy of the weights, audited like
    the final model (leakage over training; docs/tutorials/leakage-over-training.md)."""

    #: fields added after layout 2 whose default reproduces the earlier behaviour exactly:
    #: left out of identities at that default, so adding them kept existing models valid
    IDENTITY_NEUTRAL: ClassVar[dict[str, Any]] = {"ensemble": 1, "precision": "fp32",
                                                  "snapshots": []}

    @model_validator(mode="before")
    @classmethod
    def _retired_amp(cls, raw: Any) -> Any:
        from miaudit.training.precision import retire_amp  # torch: only when validating

        return retire_amp(raw)

    def identity_dump(self) -> dict[str, Any]:
        """The JSON dump that identifies models trained with this config."""
        dump = self.model_dump(mode="json")
        for name, neutral in self.IDENTITY_NEUTRAL.items():
            if dump.get(name) == neutral:
                dump.pop(name)
        return dump

    @field_validator("recipe")
    @classmethod
    def _known_recipe(cls, name: str) -> str:
        RECIPES.get(name)
        return name

    @field_validator("milestones")
    @classmethod
    def _milestones(cls, milestones: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 < m < 1 for m in milestones) or list(milestones) != sorted(set(milestones)):
            raise ValueError("milestones are increasing fractions of training, each in (0, 1) "
                             f"(e.g. [0.5, 0.75]), got {list(milestones)}")
        return milestones

    @model_validator(mode="after")
    def _components(self) -> TrainConfig:
        check_size(self.recipe_options, "train.recipe_options")
        from miaudit.training.precision import check_precision

        recipe = build_recipe(self)  # option names and values, before any training
        check_precision(self.precision, self.recipe, recipe, self.ensemble)
        check_snapshots(self.snapshots, self.epochs, self.recipe, recipe, self.ensemble)
        return self

    def params(self) -> TrainParams:
        """The optimization hyper-parameters; every field but the recipe's goes there."""
        names = [f.name for f in fields(TrainParams)]
        return TrainParams(**{name: getattr(self, name) for name in names})


_RECIPE_FIELDS = {"recipe", "recipe_options", "penalties", "ensemble", "precision",
                  "snapshots"}
if set(TrainConfig.model_fields) - _RECIPE_FIELDS != {f.name for f in fields(TrainParams)}:
    raise RuntimeError("TrainConfig and TrainParams disagree on the optimization fields")


class RobustEvalConfig(Section):
    """Robust accuracy of every model under L-inf PGD (PGD-20 at 8/255 by default), measured on
    up to ``max_samples`` members and as many non-members after training."""

    eps: float = Field(default=8 / 255, gt=0)
    """L-inf radius of the PGD attack."""
    step: float = Field(default=2 / 255, gt=0)
    """PGD step size."""
    steps: int = Field(default=20, ge=1)
    """PGD iterations."""
    max_samples: int = Field(default=500, ge=1)
    """Members (and as many non-members) evaluated per target."""


class TargetConfig(Section):
    """A target trained elsewhere (fixed_target only): its weights (safetensors, or a torch
    state dict loaded with ``weights_only=True``) for ``model`` (+ the recipe's architecture),
    and its training set as pool indices (.npy int) or a pool-length boolean mask (.npy)."""

    weights: Path
    """The target's weights (safetensors, or a torch state dict)."""
    members: Path
    """Its training set: pool indices (.npy int) or a pool-length boolean mask (.npy)."""

    @field_validator("weights", "members")
    @classmethod
    def _exists(cls, path: Path) -> Path:
        if not path.is_file():
            raise ValueError(f"{path} is not a file")
        return path
