"""The audit configuration: typed and validated at the boundary (pydantic).

YAML files and CLI flags parse into :class:`AuditConfig`; unknown keys or bad values fail before
any training with an error naming the field. Inner code receives explicit arguments only.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from miaudit.registry import (
    ATTACKS,
    DATASETS,
    MODELS,
    OUTPUT_DEFENSES,
    PENALTIES,
    RECIPES,
    parse_spec,
)

Spec = str | dict[str, Any]
DEFAULT_CONFIG = Path(__file__).parent / "configs" / "default.yaml"


class ConfigError(ValueError):
    """A configuration that cannot be run; the message names the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _check_spec(spec: Spec, registry: Any) -> Spec:
    name, _ = parse_spec(spec)
    registry.get(name)  # raises UnknownNameError listing the valid names
    return spec


class DataConfig(_Strict):
    """Which data set and which part of it forms the audit pool."""

    name: str = "digits"
    data_dir: Path | None = None
    pool: Literal["all", "train", "test"] = "all"
    pool_size: int | None = Field(default=None, gt=1)
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        DATASETS.get(name)
        return name


class ModelConfig(_Strict):
    """A registry model, its width multiplier and model-specific options."""

    name: str = "small_cnn"
    width: float = Field(default=1.0, gt=0)
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        MODELS.get(name)
        return name


class TrainConfig(_Strict):
    """Training recipe (defense) and optimization hyper-parameters."""

    recipe: str = "standard"
    recipe_options: dict[str, Any] = Field(default_factory=dict)
    penalties: list[Spec] = Field(default_factory=list)
    epochs: int = Field(default=30, ge=1)
    batch_size: int = Field(default=64, ge=1)
    optimizer: Literal["sgd", "adam", "adamw"] = "sgd"
    lr: float = Field(default=0.05, gt=0)
    momentum: float = Field(default=0.9, ge=0, lt=1)
    nesterov: bool = False
    weight_decay: float = Field(default=5e-4, ge=0)
    schedule: Literal["cosine", "step", "constant"] = "cosine"
    warmup_epochs: float = Field(default=0.0, ge=0)
    crop_padding: int = Field(default=0, ge=0)
    flip: bool = False

    @field_validator("recipe")
    @classmethod
    def _known_recipe(cls, name: str) -> str:
        RECIPES.get(name)
        return name

    @field_validator("penalties")
    @classmethod
    def _known_penalties(cls, specs: list[Spec]) -> list[Spec]:
        return [_check_spec(spec, PENALTIES) for spec in specs]


class RobustEvalConfig(_Strict):
    """Robust accuracy of every model under L-inf PGD (PGD-20 at 8/255 by default), measured on
    up to ``max_samples`` members and as many non-members after training."""

    eps: float = Field(default=8 / 255, gt=0)
    step: float = Field(default=2 / 255, gt=0)
    steps: int = Field(default=20, ge=1)
    max_samples: int = Field(default=500, ge=1)


def attack_label(spec: Spec) -> tuple[str, str, dict[str, Any]]:
    """(label, registry name, options). The label is the spec as written, or its ``label``
    option when given (e.g. ``{name: lira, offline: true, label: LiRA-offline}``)."""
    name, options = parse_spec(spec)
    label = options.pop("label", None)
    if label is None:
        label = spec if isinstance(spec, str) else ":".join(
            filter(None, [name, ",".join(f"{k}={v}" for k, v in options.items())]))
    return str(label), name, options


DEFAULT_ATTACKS: list[Spec] = [
    "loss",
    "lira",
    "lira:fixed_variance=true",
    "lira:offline=true",
    "lira:offline=true,fixed_variance=true",
]


class AuditConfig(_Strict):
    """Everything that defines an audit. See the README's config reference."""

    name: str = Field(default="audit", pattern=r"^[A-Za-z0-9_.-]+$")
    seed: int = 0
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    # fixed_target protocol: the attacker's reference models may differ from the target
    reference_model: ModelConfig | None = None
    reference_train: TrainConfig | None = None
    protocol: Literal["rotation", "fixed_target"] = "rotation"
    num_models: int = Field(default=16, ge=2)  # rotation: all models; fixed_target: references
    num_targets: int | None = Field(default=None, ge=1)  # rotation: evaluate the first k only
    queries: list[str] = Field(default_factory=lambda: ["identity", "flip"], min_length=1)
    attacks: list[Spec] = Field(default_factory=lambda: list(DEFAULT_ATTACKS), min_length=1)
    output_defense: Spec | None = None
    robust_eval: RobustEvalConfig | None = None
    # label of the attack whose scores feed the memorization analysis (DeMem Figure 1)
    memorization_attack: str | None = None
    validation_fraction: float = Field(default=0.1, gt=0, lt=1)
    output_dir: Path = Path("runs")
    # reuse identical trained models across run directories (output_dir/model_cache)
    share_models: bool = True
    device: str = "auto"

    @field_validator("attacks")
    @classmethod
    def _known_attacks(cls, specs: list[Spec]) -> list[Spec]:
        return [_check_spec(spec, ATTACKS) for spec in specs]

    @field_validator("output_defense")
    @classmethod
    def _known_defense(cls, spec: Spec | None) -> Spec | None:
        return None if spec is None else _check_spec(spec, OUTPUT_DEFENSES)

    @field_validator("queries")
    @classmethod
    def _known_queries(cls, specs: list[str]) -> list[str]:
        from miaudit.queries import build_query, expand_queries

        expanded = expand_queries(specs)
        for spec in expanded:
            build_query(spec)
        return expanded

    @field_validator("device")
    @classmethod
    def _device(cls, device: str) -> str:
        if device != "auto" and device.split(":")[0] not in ("cpu", "cuda", "mps"):
            raise ValueError(f"device must be auto, cpu, cuda[:i] or mps, got {device!r}")
        return device

    @model_validator(mode="after")
    def _memorization_attack(self) -> AuditConfig:
        labels = [attack_label(spec)[0] for spec in self.attacks]
        if len(set(labels)) != len(labels):
            raise ValueError(f"attack labels must be distinct, got {labels}")
        if self.memorization_attack is not None and self.memorization_attack not in labels:
            raise ValueError(f"memorization_attack {self.memorization_attack!r} is not one of "
                             f"the attacks {labels}")
        return self

    @model_validator(mode="after")
    def _protocol(self) -> AuditConfig:
        if self.protocol == "rotation":
            if self.num_models % 2:
                raise ValueError("rotation needs an even num_models (each sample IN for half)")
            if self.reference_model is not None or self.reference_train is not None:
                raise ValueError("reference_model/reference_train need protocol fixed_target")
            if self.num_targets is not None and self.num_targets > self.num_models:
                raise ValueError("num_targets exceeds num_models")
        elif self.num_models % 2:
            raise ValueError("fixed_target needs an even number of reference models (2n)")
        return self

    # -- identity of the artefacts -------------------------------------------------------------
    def training_fingerprint(self) -> dict[str, Any]:
        """The fields that determine the trained models and their stored outputs."""
        return self.model_dump(
            mode="json",
            include={"seed", "data", "model", "train", "reference_model", "reference_train",
                     "protocol", "num_models", "queries", "validation_fraction",
                     "robust_eval"},
        )

    def training_hash(self) -> str:
        text = json.dumps(self.training_fingerprint(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def run_dir(self) -> Path:
        return self.output_dir / f"{self.name}-{self.training_hash()[:12]}"

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def load_config(path: Path | None = None, overrides: dict[str, Any] | None = None) -> AuditConfig:
    """Read a YAML config (the embedded default when ``path`` is None), apply dotted overrides
    (``{"train.epochs": 5}``) and validate."""
    source = DEFAULT_CONFIG if path is None else Path(path)
    try:
        raw = yaml.safe_load(source.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file {source} does not exist") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"config file {source} is not valid YAML: {error}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {source} must hold a mapping, got {type(raw).__name__}")
    for dotted, value in (overrides or {}).items():
        _set_dotted(raw, dotted, value)
    return validate_config(raw)


def validate_config(raw: dict[str, Any]) -> AuditConfig:
    try:
        return AuditConfig.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(_format_errors(error)) from None


def _set_dotted(raw: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = raw
    for key in parents:
        child = node.setdefault(key, {})
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set {dotted}: {key} is not a section")
        node = child
    node[leaf] = value


def _format_errors(error: ValidationError) -> str:
    lines = ["invalid audit config:"]
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"  {field}: {message}")
    return "\n".join(lines)
