"""The audit configuration: typed and validated at the boundary (pydantic).

YAML files, dicts and CLI flags parse into :class:`AuditConfig`; unknown keys, bad values and
bad component options (attack, model, recipe, penalty, query, defense specs, checked against
their constructors) fail before any training with an error naming the field. ``audit()`` and
``audit({})`` run the same default audit: the defaults below. Inner code receives explicit
arguments only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from miaudit.auditor.components import (
    Components,
    attack_label,
    build_attack,
    build_output_defense,
    build_penalties,
    build_recipe,
    check_queries,
    resolve_components,
)
from miaudit.auditor.rundir import check_scores_names
from miaudit.auditor.sections import (
    DataConfig,
    ModelConfig,
    RobustEvalConfig,
    Section,
    TargetConfig,
    TrainConfig,
)
from miaudit.auditor.specs import AttackSpec, Component, ComponentSpec, Spec
from miaudit.configtools import format_errors, set_dotted
from miaudit.errors import ConfigError
from miaudit.executors import ExecutorConfig
from miaudit.registry import MAX_OPTION_ITEMS, check_size

# A config file expands to at most this many values: YAML aliases share one object, so a
# "billion laughs" file of a few lines parses instantly but would expand into billions of
# items in every later traversal (validation, dumps, identities). Counted with aliases expanded.
MAX_CONFIG_ITEMS = 10 * MAX_OPTION_ITEMS

# the component builders live in miaudit.auditor.components, the spec types in
# miaudit.auditor.specs, the sections in miaudit.auditor.sections; re-exported here, the
# config's public face
__all__ = ["AuditConfig", "Component", "ConfigError", "DataConfig", "ModelConfig",
           "RobustEvalConfig", "Spec", "TargetConfig", "TrainConfig", "attack_label",
           "build_attack", "build_output_defense", "build_penalties", "build_recipe",
           "load_config", "validate_config"]


DEFAULT_QUERIES = ["identity", "shift:dx=1", "shift:dx=-1"]
DEFAULT_ATTACKS: list[Spec] = [
    "loss", "correctness", "song_mittal:signal=confidence", "song_mittal:signal=entropy",
    "song_mittal:signal=mentr", "watson", "shokri:folds=2", "attack_p", "attack_r", "rmia_simple",
    "rmia", "rmia:offline=true", "lira", "lira:fixed_variance=true", "lira:offline=true",
    "lira:offline=true,fixed_variance=true",
]


class AuditConfig(Section):
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
    # (the objects it was built from, the built components): see :attr:`components`
    _built: tuple[Any, ...] | None = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        # the fields decide; the built components (a cache of them) do not
        if not isinstance(other, AuditConfig):
            return NotImplemented
        return self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable, as pydantic's models

    @property
    def components(self) -> Components:
        """Every component this config names, built once (when it is validated) with their
        capabilities; rebuilt only when a section it was built from is replaced."""
        sources = (self.attacks, self.train, self.reference_train, self.output_defense)
        if self._built is None or any(a is not b for a, b in zip(self._built, sources)):
            self._built = (*sources, resolve_components(*sources))
        return self._built[-1]

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
        for label, attack in self.components.attacks.items():
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
        left = self.num_models - 1 - self.memorization_models
        needed = self.components.attacks[self.memorization_attack].min_references
        if left < max(1, needed):
            raise ValueError(f"memorization_models {self.memorization_models} leaves the "
                             f"memorization attack {left} reference models, it needs "
                             f"{max(1, needed)}; raise num_models or lower memorization_models")

    @model_validator(mode="after")
    def _holdout(self) -> AuditConfig:
        users = []
        built = self.components
        for where, train, recipe in (("train", self.train, built.recipe),
                                     ("reference_train", self.reference_train,
                                      built.reference_recipe)):
            if recipe is not None and recipe.needs_validation:
                users.append(f"{where}.recipe {train.recipe}")
        if built.output_defense is not None and built.output_defense.needs_holdout:
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

    def slow_bf16_reason(self) -> str | None:
        """Why this audit would train slowly here, as a sentence: a model it trains (target,
        reference, or a parent either starts from) in ``train.precision: bf16`` on a device
        without bfloat16 kernels (~10x slower than fp32). None when every model trains in
        fp32, where bfloat16 has kernels, and on Ray (the workers' hosts decide)."""
        if self.executor.name == "ray" or "bf16" not in self.training_precisions():
            return None
        from miaudit._runtime.machine import resolve_device, slow_bf16

        return slow_bf16(resolve_device(self.device))

    def training_precisions(self) -> set[str]:
        """The ``train.precision`` of every model this audit trains, parents included."""
        found, sections = set(), [(self.model, self.train)]
        if self.reference_train is not None or self.reference_model is not None:
            sections.append((self.reference_model or self.model,
                             self.reference_train or self.train))
        while sections:
            model, train = sections.pop()
            found.add(train.precision)
            sections += [parent] if (parent := parent_configs(model, train)) else []
        return found

    def run_name(self) -> str:
        """The given name, else one derived from the data set and the model."""
        if self.name is not None:
            return self.name
        return f"{self.data.name}-{self.model.name}".replace(":", "_").replace(".", "_")

    def to_yaml(self) -> str:
        """The config as YAML (what ``miaudit config`` prints; loads back unchanged)."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def load_config(path: Path | None = None, overrides: dict[str, Any] | None = None, *,
                sets: list[str] = ()) -> AuditConfig:
    """Read a YAML config (the defaults when ``path`` is None), apply dotted overrides
    (``{"train.epochs": 5}``), then ``sets`` (``"train.epochs=5"`` strings, each value read as
    YAML, as ``miaudit audit --set`` reads them) and validate."""
    overrides = {**(overrides or {}), **parse_set_items(list(sets))}
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
    for dotted, value in overrides.items():
        set_dotted(raw, dotted, value)
    return validate_config(raw)


def parse_set_items(items: list[str]) -> dict[str, Any]:
    """``--set key.path=value`` items as overrides, each value read as YAML."""
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects key.path=value, got {item!r}")
        try:
            overrides[key.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError as error:
            raise ConfigError(f"--set {item!r}: the value is not valid YAML ({error})") from None
        check_size(overrides[key.strip()], f"--set {key.strip()}")  # YAML alias bombs
    return overrides



def validate_config(raw: dict[str, Any]) -> AuditConfig:
    """Check a config mapping and build it; a ConfigError names the first bad field."""
    if not isinstance(raw, dict):
        raise ConfigError(f"a config is a mapping, got {type(raw).__name__}")
    try:
        return AuditConfig.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(format_errors(error, AuditConfig)) from None


def parent_configs(model_cfg: ModelConfig,
                   train_cfg: TrainConfig) -> tuple[ModelConfig, TrainConfig] | None:
    """The parent's architecture and training as audit config sections (validated like any),
    or None when the recipe trains everything itself. A ``same_training`` parent keeps the
    whole train section, so its identity is the one an audit of that model would give it."""
    spec = build_recipe(train_cfg).parent(model_cfg.name, dict(model_cfg.options))
    if spec is None:
        return None
    model = ModelConfig(name=spec.model, width=model_cfg.width,
                        options=dict(spec.model_options))
    if spec.same_training:  # an earlier stage of the same recipe, e.g. the SNN at T - 1
        if model == model_cfg:
            raise ConfigError(f"recipe {train_cfg.recipe!r} names model {model_cfg.name!r} "
                              "with the same options as its own parent")
        return model, train_cfg
    train = TrainConfig.model_validate({
        **train_cfg.model_dump(exclude={"ensemble"}), "recipe": spec.recipe,
        "recipe_options": dict(spec.recipe_options),
        "penalties": list(train_cfg.penalties) if spec.penalties else [],
        "epochs": train_cfg.epochs if spec.epochs is None else spec.epochs})
    return model, train
