"""The audit configuration: typed and validated at the boundary (pydantic).

YAML files, dicts and CLI flags parse into :class:`AuditConfig`; unknown keys, bad values and
bad component options (attack, model, recipe, penalty, query, defense specs, checked against
their constructors) fail before any training with an error naming the field. ``audit()`` and
``audit({})`` run the same default audit: the defaults below. Inner code receives explicit
arguments only.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from miaudit.auditor.components import (
    attack_label,
    build_attack,
    build_output_defense,
    build_penalties,
    build_recipe,
    check_queries,
)
from miaudit.auditor.rundir import check_scores_names
from miaudit.auditor.specs import AttackSpec, Component, ComponentSpec, Spec
from miaudit.configtools import format_errors, set_dotted
from miaudit.errors import ConfigError
from miaudit.executors import ExecutorConfig
from miaudit.registry import DATASETS, MAX_OPTION_ITEMS, MODELS, RECIPES, check_size
from miaudit.training.params import TrainParams

MODEL_PROVIDED = ("input_shape", "num_classes", "width")  # arguments miaudit passes to models
# A config file expands to at most this many values: YAML aliases share one object, so a
# "billion laughs" file of a few lines parses instantly but would expand into billions of
# items in every later traversal (validation, dumps, identities). Counted with aliases expanded.
MAX_CONFIG_ITEMS = 10 * MAX_OPTION_ITEMS

# the component builders live in miaudit.auditor.components, the spec types in
# miaudit.auditor.specs;
# re-exported for existing callers
__all__ = ["AuditConfig", "Component", "ConfigError", "Spec", "attack_label", "build_attack",
           "build_output_defense", "build_penalties", "build_recipe", "load_config",
           "validate_config"]


class _Strict(BaseModel):
    # field docstrings are the fields' descriptions (the generated config reference)
    model_config = ConfigDict(extra="forbid", validate_assignment=True,
                              use_attribute_docstrings=True)

    def identity_dump(self) -> dict[str, Any]:
        """The JSON dump that identifies what this section configures."""
        return self.model_dump(mode="json")


class DataConfig(_Strict):
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


class ModelConfig(_Strict):
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


class TrainConfig(_Strict):
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


class RobustEvalConfig(_Strict):
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


class TargetConfig(_Strict):
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


DEFAULT_QUERIES = ["identity", "shift:dx=1", "shift:dx=-1"]
DEFAULT_ATTACKS: list[Spec] = [
    "loss", "correctness", "song_mittal:signal=confidence", "song_mittal:signal=entropy",
    "song_mittal:signal=mentr", "watson", "shokri:folds=2", "attack_p", "attack_r", "rmia_simple",
    "rmia", "rmia:offline=true", "lira", "lira:fixed_variance=true", "lira:offline=true",
    "lira:offline=true,fixed_variance=true",
]


class AuditConfig(_Strict):
    """Everything that defines an audit. See the README's config reference."""

    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]+$", max_length=100)
    """Run name; the run directory is ``output_dir/<name>-<hash>``; None derives
    ``<data>-<model>``."""
    seed: int = Field(default=0, ge=0, lt=2**32)
    """Seeds the split, the memberships and every model (per-model seeds derive from it)."""
    data: DataConfig = Field(default_factory=DataConfig)
    """The data set and the pool (section below)."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The architecture (section below)."""
    train: TrainConfig = Field(default_factory=TrainConfig)
    """The training recipe and hyper-parameters (section below)."""
    reference_model: ModelConfig | None = None
    """``fixed_target``: the attacker's reference architecture, when it differs from the
    target's."""
    reference_train: TrainConfig | None = None
    """``fixed_target``: the attacker's reference training, when it differs from the
    target's."""
    protocol: Literal["rotation", "fixed_target"] = "rotation"
    """``rotation``: every model is the target in turn, the others its references;
    ``fixed_target``: one target plus ``num_models`` reference models."""
    target: TargetConfig | None = None
    """``fixed_target``: a target trained elsewhere (only the references are trained)."""
    num_models: int = Field(default=16, ge=2, le=100_000)
    """Size of the balanced family (even). Rotation: all models, each the target in turn;
    fixed_target: the reference models beside the separate target."""
    num_targets: int | None = Field(default=None, ge=1)
    """Rotation: score the first k models as targets only (None: all)."""
    queries: list[str] = Field(default_factory=lambda: list(DEFAULT_QUERIES), min_length=1)
    """Query augmentations or presets (``augs2``, ``augs18``, ``augs50``,
    ``dropout:p=..,n=..``, label-only ``labels18``, ``boundary:budget=B``)."""
    attacks: list[AttackSpec] = Field(default_factory=lambda: list(DEFAULT_ATTACKS),
                                      min_length=1, validate_default=True)
    """Attack specs ``name:key=value,...`` or ``{name: ..., label: ..., ...}`` (default: the
    16-attack suite)."""
    output_defense: ComponentSpec | None = None
    """A defense applied to released outputs before attacking (``memguard``,
    ``memguard_label_only``)."""
    robust_eval: RobustEvalConfig | None = None
    """Natural and PGD robust accuracy of every target (section below)."""
    memorization_attack: str | None = None
    """Label of the attack whose scores feed the memorization analysis (DeMem Figure 1:
    ``memorization.json`` / ``.png``)."""
    memorization_models: int | None = Field(default=None, ge=2)
    """Rotation: the last K models of the family estimate memorization for that analysis and
    are left out of its target's attack references (an independent estimate); None:
    memorization from every model but the target (the attack's references reused)."""
    output_dir: Path = Path("runs")
    """Where run directories go."""
    share_models: bool = True
    """Copy identical trained models between run directories (``output_dir/model_cache``)."""
    device: str = "auto"
    """``auto``, ``cpu``, ``cuda``, ``cuda:<index>`` or ``mps``."""
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    """Where the per-model train and query jobs run: ``local`` (this process), ``processes``
    (a worker pool here) or ``ray`` (section below)."""
    threads: int | Literal["auto"] | None = Field(default="auto")
    """Torch intra-op threads: ``auto`` (default) one per free core, measured from the load
    (torch's own choice uses every core and spins when another process holds one: on a loaded
    2-core machine 2 threads were 15-57x slower than 1); a number pins it (under ``auto`` the
    thread count, and so the last bits of the weights, may differ between runs); None keeps
    torch's choice."""

    @field_validator("threads")
    @classmethod
    def _threads(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, int) and not 1 <= value <= 1024:
            raise ValueError(f"threads must be 1..1024 or auto, got {value}")
        return value

    @field_validator("queries")
    @classmethod
    def _known_queries(cls, specs: list[str]) -> list[str]:
        return check_queries(specs)

    @field_validator("output_defense")
    @classmethod
    def _known_defense(cls, spec: Component | None) -> Component | None:
        if spec is not None:
            build_output_defense(spec)
        return spec

    @field_validator("device")
    @classmethod
    def _device(cls, device: str) -> str:
        kind, _, index = device.partition(":")
        if device != "auto" and (kind not in ("cpu", "cuda", "mps")
                                 or (index and not (kind == "cuda" and index.isdigit()))):
            raise ValueError(f"device must be auto, cpu, cuda, cuda:<index> or mps, got "
                             f"{device!r}")
        return device

    @model_validator(mode="after")
    def _attacks(self) -> AuditConfig:
        labels = [attack.label for attack in self.attacks]
        if len(set(labels)) != len(labels):
            raise ValueError(f"attack labels must be distinct, got {labels}")
        check_scores_names(labels)
        references = self.num_models - 1 if self.protocol == "rotation" else self.num_models
        for label, spec in zip(labels, self.attacks):
            attack = build_attack(spec, f"attack {label!r}")
            if attack.min_references > references:
                raise ValueError(f"attack {label!r} needs at least {attack.min_references} "
                                 f"reference models, this audit gives {references}; raise "
                                 "num_models")
            if attack.needs_population and not self.data.population_size:
                raise ValueError(f"attack {label!r} needs the attacker's population data: set "
                                 "data.population_size (e.g. 0.1)")
            try:  # before training: an attack reading a query nobody collects
                attack.check_queries(list(self.queries))
            except ValueError as error:
                raise ValueError(f"attack {label!r}: {error}") from None
        if self.memorization_attack is not None and self.memorization_attack not in labels:
            raise ValueError(f"memorization_attack {self.memorization_attack!r} is not one of "
                             f"the attacks {labels}")
        if self.memorization_models is not None:
            self._check_memorization_models(labels)
        return self

    def _check_memorization_models(self, labels: list[str]) -> None:
        """The memorization family needs the analysis, rotation, and enough models left for
        the analysed attack's references."""
        if self.memorization_attack is None or self.protocol != "rotation":
            raise ValueError("memorization_models needs memorization_attack and protocol "
                             "rotation (the last K models of the family estimate memorization)")
        spec = self.attacks[labels.index(self.memorization_attack)]
        left = self.num_models - 1 - self.memorization_models
        needed = build_attack(spec, "memorization_attack").min_references
        if left < max(1, needed):
            raise ValueError(f"memorization_models {self.memorization_models} leaves the "
                             f"memorization attack {left} reference models, it needs "
                             f"{max(1, needed)}; raise num_models or lower memorization_models")

    @model_validator(mode="after")
    def _holdout(self) -> AuditConfig:
        users = []
        for where, train in (("train", self.train), ("reference_train", self.reference_train)):
            if train is not None and build_recipe(train).needs_validation:
                users.append(f"{where}.recipe {train.recipe}")
        if self.output_defense is not None and \
                build_output_defense(self.output_defense).needs_holdout:
            users.append("output_defense")
        if users and not self.data.holdout_size:
            raise ValueError(f"{', '.join(users)} need(s) held-out data that is never "
                             "evaluated: set data.holdout_size (e.g. 0.1)")
        return self

    @model_validator(mode="after")
    def _protocol(self) -> AuditConfig:
        if self.num_models % 2:
            raise ValueError("num_models must be even (every sample IN for half the models)")
        if self.protocol == "rotation":
            if self.reference_model is not None or self.reference_train is not None:
                raise ValueError("reference_model/reference_train need protocol fixed_target")
            if self.num_targets is not None and self.num_targets > self.num_models:
                raise ValueError("num_targets exceeds num_models")
        elif self.num_targets is not None:
            raise ValueError("num_targets applies to protocol rotation only (fixed_target has "
                             "one target)")
        if self.target is not None and self.protocol != "fixed_target":
            raise ValueError("a pre-trained target needs protocol fixed_target")
        return self

    def run_name(self) -> str:
        """The given name, else one derived from the data set and the model."""
        if self.name is not None:
            return self.name
        return f"{self.data.name}-{self.model.name}".replace(":", "_").replace(".", "_")

    def to_yaml(self) -> str:
        """The config as YAML (what ``miaudit config`` prints; loads back unchanged)."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def load_config(path: Path | None = None, overrides: dict[str, Any] | None = None) -> AuditConfig:
    """Read a YAML config (the defaults when ``path`` is None), apply dotted overrides
    (``{"train.epochs": 5}``) and validate."""
    raw: Any = {}
    if path is not None:
        source = Path(path)
        try:
            raw = yaml.safe_load(source.read_text()) or {}
            check_size(raw, f"config file {source}", limit=MAX_CONFIG_ITEMS)
        except FileNotFoundError:
            raise ConfigError(f"config file {source} does not exist") from None
        except IsADirectoryError:
            raise ConfigError(f"config file {source} is a directory; give a YAML file") from None
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"config file {source} cannot be read: {error}") from None
        except yaml.YAMLError as error:
            raise ConfigError(f"config file {source} is not valid YAML: {error}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"config file {source} must hold a mapping, got "
                              f"{type(raw).__name__}")
    for dotted, value in (overrides or {}).items():
        set_dotted(raw, dotted, value)
    return validate_config(raw)


def validate_config(raw: dict[str, Any]) -> AuditConfig:
    """Check a config mapping and build it; a ConfigError names the first bad field."""
    if not isinstance(raw, dict):
        raise ConfigError(f"a config is a mapping, got {type(raw).__name__}")
    try:
        return AuditConfig.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(format_errors(error, AuditConfig)) from None
