"""Name -> constructor registries for data sets, models, recipes, attacks, queries, ...

Built-in entries are listed explicitly below (name -> module); a module is imported only when
one of its entries is looked up, and the module registers its constructors with the
``register`` decorator::

    @MODELS.register("resnet14")
    def resnet14(*, input_shape, num_classes, width=1.0, norm="batch"): ...

User entries need no edit of miaudit:

* an import path as the name: ``model: {name: "mypkg.nets:make_net"}``;
* an installed package that declares an entry point in the ``miaudit.plugins`` group, whose
  target is a module (imported, so its ``register`` decorators run) or a callable (called
  once), e.g. in its pyproject: ``[project.entry-points."miaudit.plugins"] mypkg = "mypkg.plugin"``.

Unknown names raise :class:`UnknownNameError` listing the valid names; options are checked
against the constructor's signature by :meth:`Registry.check_options` before anything runs.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from miaudit.errors import ConfigError

T = TypeVar("T", bound=Callable[..., Any])
PLUGIN_GROUP = "miaudit.plugins"


class UnknownNameError(ConfigError):
    """A name that no registry entry has (a ValueError, so pydantic reports it against the
    config field that named it)."""


class Registry(Generic[T]):
    """A mapping from names to constructors: built-in entries import their module lazily."""

    def __init__(self, kind: str, builtins: dict[str, str]):
        self.kind = kind
        self._modules = dict(builtins)  # name -> module that registers it
        self._entries: dict[str, T] = {}
        self._checks: dict[str, Callable[..., None]] = {}
        self._digests: dict[str, Callable[[dict[str, Any]], str | None]] = {}

    def register(self, name: str, *, check: Callable[..., None] | None = None,
                 content_digest: Callable[[dict[str, Any]], str | None] | None = None
                 ) -> Callable[[T], T]:
        """Register a constructor. ``check`` validates option *values* without building
        (called with every user option, defaults filled in, by :meth:`check_options`; raises
        ValueError), for entries that cannot be built when the config is validated (models
        need the data's shape, data sets read files). ``content_digest(options)`` digests
        files the entry reads (e.g. a checkpoint): it enters the identity of what is built
        from them."""
        def add(constructor: T) -> T:
            known = self._entries.get(name)
            if known is not None and known is not constructor:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = constructor
            for hooks, hook in ((self._checks, check), (self._digests, content_digest)):
                if hook is not None:
                    hooks[name] = hook
            return constructor

        return add

    def get(self, name: str) -> T:
        """The constructor registered as ``name`` (or at import path ``name``); raises
        UnknownNameError listing the valid names."""
        if name in self._entries:
            return self._entries[name]
        if ":" in name:
            return self._entries.setdefault(name, _import_path(name, self.kind))
        module = self._modules.get(name)
        if module is None:
            _load_entry_points()
            if name in self._entries:
                return self._entries[name]
            valid = ", ".join(self.names()) or "(none)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; valid: {valid} (or an import "
                                   "path 'package.module:name')")
        importlib.import_module(module)
        if name not in self._entries:  # a bug of ours, not the user's: keep the traceback
            raise RuntimeError(f"module {module} did not register {self.kind} {name!r}")
        return self._entries[name]

    def option_default(self, name: str, option: str) -> Any:
        """The default value of keyword ``option`` of entry ``name``'s constructor; None when
        it has no such keyword, no default, or no inspectable signature."""
        try:
            parameter = inspect.signature(self.get(name)).parameters.get(option)
        except (TypeError, ValueError):  # builtins without a signature
            return None
        empty = parameter is None or parameter.default is inspect.Parameter.empty
        return None if empty else parameter.default

    def check_options(self, name: str, options: dict[str, Any], *,
                      provided: tuple[str, ...] = ()) -> None:
        """Raise ConfigError when ``options`` do not fit the constructor's signature (unknown
        or missing keyword), listing the valid options. ``provided`` names arguments the
        caller passes itself (e.g. input_shape for models), which the user may not set."""
        constructor = self.get(name)
        try:
            signature = inspect.signature(constructor)
        except (TypeError, ValueError):  # builtins without a signature: nothing to check
            return
        clash = sorted(set(options) & set(provided))
        if clash:
            raise ConfigError(f"{self.kind} {name!r}: option(s) {clash} are set by miaudit")
        stand_in = dict.fromkeys(provided)
        try:
            bound = signature.bind(**stand_in, **options)
        except TypeError as error:
            valid = [p for p in signature.parameters if p not in provided and p != "self"
                     and signature.parameters[p].kind is not inspect.Parameter.VAR_KEYWORD]
            raise ConfigError(f"bad options for {self.kind} {name!r}: {error}; valid options: "
                              f"{', '.join(valid) or '(none)'}") from None
        check = self._checks.get(name)
        if check is not None:
            bound.apply_defaults()
            values = {k: v for k, v in bound.arguments.items() if k not in provided}
            try:
                check(**values)
            except (ValueError, TypeError) as error:  # a value of the wrong type: the user's
                raise ConfigError(f"{self.kind} {name!r}: {error}") from None

    def content_digest(self, name: str, options: dict[str, Any]) -> str | None:
        """The digest of the files entry ``name`` reads with ``options`` (None: none)."""
        self.get(name)
        digest = self._digests.get(name)
        return None if digest is None else digest(options)

    def build(self, name: str, **options: Any) -> Any:
        """Call the constructor; errors inside it propagate unchanged (they are not option
        errors: :meth:`check_options` tells those apart before anything runs)."""
        return self.get(name)(**options)

    def create(self, name: str, options: dict[str, Any], *, where: str,
               errors: tuple[type[Exception], ...] = (ValueError,)) -> Any:
        """Build a component from the user's options: the one place that turns a constructor's
        ValueError (how constructors reject an option value) into a :class:`ConfigError`
        ``"<where>: <message>"``."""
        try:
            return self.build(name, **options)
        except errors as error:
            raise ConfigError(f"{where}: {error}") from None

    def names(self) -> list[str]:
        """Every registered name, built-in and from installed plugins, sorted."""
        _load_entry_points()
        return sorted(set(self._modules) | {n for n in self._entries if ":" not in n})

    def describe(self) -> dict[str, str]:
        """Name -> first docstring line, for the listing commands (imports every module)."""
        return {
            name: ((self.get(name).__doc__ or "").strip().splitlines() or [""])[0]
            for name in self.names()
        }

    def __contains__(self, name: str) -> bool:
        try:
            self.get(name)
        except UnknownNameError:
            return False
        return True


def _import_path(path: str, kind: str) -> Any:
    """'package.module:attribute' -> the callable, with one clear error per failing step."""
    from miaudit.importpath import ImportPathError, import_callable

    try:  # the current folder too: a console script's sys.path does not hold it
        return import_callable(path, what=kind, search_paths=[os.getcwd()])
    except ImportPathError as error:
        raise UnknownNameError(str(error)) from None


_entry_points_loaded = False


def _load_entry_points() -> None:
    """Import (or call) every installed ``miaudit.plugins`` entry point, once."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    from importlib.metadata import entry_points

    for point in entry_points(group=PLUGIN_GROUP):
        try:
            loaded = point.load()
        except Exception as error:
            raise ConfigError(f"plugin {point.name!r} ({point.value}) failed to load: "
                              f"{error}") from error
        if callable(loaded) and not inspect.ismodule(loaded):
            loaded()


def _modules(package: str, table: dict[str, str]) -> dict[str, str]:
    return {name: f"miaudit.{package}.{module}" if module else f"miaudit.{package}"
            for name, module in table.items()}


DATASETS: Registry = Registry("dataset", _modules("data", {
    "cifar10": "cifar", "cifar100": "cifar", "digits": "digits", "imagefolder": "imagefolder",
    "location30": "location", "synthetic": "synthetic", "tabular": "tabular", "text": "text"}))
MODELS: Registry = Registry("model", _modules("models", {
    "small_cnn": "simple", "mlp": "simple", "resnet14": "resnet", "odenet": "ode",
    "odenet64": "ode", "anode": "ode", "sonode": "ode", "hbnode": "ode", "sdenet": "sde",
    "snn_cnn": "snn", "snn_resnet18": "snn", "ann_cnn": "snn", "ann_resnet18": "snn",
    "causal_lm": "causal_lm"}))
RECIPES: Registry = Registry("training recipe", _modules("recipes", {
    "standard": "standard", "dpsgd": "dpsgd", "replace_finetune": "replace_finetune",
    "ann2snn": "snn", "snn_direct": "snn", "user_function": "user_function",
    "pgd_at": "adversarial", "trades": "adversarial", "mixup_mmd": "mixup_mmd",
    "early_stopping": "early_stopping", "lm": "language_model", "lora": "language_model"}))
PENALTIES: Registry = Registry("penalty", _modules("penalties", {
    "l1": "norms", "l2": "norms", "demem": "demem"}))
QUERIES: Registry = Registry("query augmentation", {
    name: "miaudit.queries" for name in ("identity", "flip", "shift", "dropout")}
    | {name: "miaudit.label_queries" for name in ("label", "boundary")})
ATTACKS: Registry = Registry("attack", _modules("attacks", {
    "loss": "loss", "correctness": "song_mittal", "song_mittal": "song_mittal",
    "watson": "watson", "shokri": "shokri", "lira": "lira", "attack_p": "population",
    "attack_r": "reference", "rmia": "rmia", "rmia_simple": "rmia",
    "dropout_search": "dropout_search", "salem": "salem", "zlib": "text_zlib",
    "min_k": "text_min_k", "min_k_pp": "text_min_k", "ref_model": "text_ref_model",
    "label_augmentation": "label_only", "boundary_distance": "label_only", "qmia": "qmia"}))
OUTPUT_DEFENSES: Registry = Registry("output defense", _modules("output_defenses", {
    "memguard": "memguard", "memguard_label_only": "memguard"}))
ACCOUNTANTS: Registry = Registry("accountant", _modules("privacy", {
    "rdp": "accounting", "gdp": "accounting", "prv": "accounting"}))
ALL_REGISTRIES = (DATASETS, MODELS, RECIPES, PENALTIES, QUERIES, ATTACKS, OUTPUT_DEFENSES,
                  ACCOUNTANTS)

#: bounds for option dicts written in YAML (alias bombs expand into huge structures)
MAX_OPTION_ITEMS = 10_000


def parse_spec(spec: str | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Parse ``"name"``, ``"name:key=value,key=value"`` or ``{"name": ..., key: value}``.

    Values are Python/YAML-like literals (numbers, booleans, strings). An import path name
    (``"pkg.mod:attr"``) has no options in the string form; use the dict form for options.
    """
    if isinstance(spec, dict):
        options = dict(spec)
        if "name" not in options:
            raise ConfigError(f"spec {spec!r} has no 'name'")
        check_size(options)
        return str(options.pop("name")), options
    if not isinstance(spec, str):
        raise ConfigError(f"a spec is a string 'name:key=value' or a mapping, got {spec!r}")
    name, sep, rest = spec.partition(":")
    if sep and rest.strip() and "=" not in rest:  # an import path "package.module:attribute"
        return spec.strip(), {}
    options: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"spec {spec!r}: option {item!r} is not key=value")
        options[key.strip()] = _literal(raw.strip())
    return name.strip(), options


def check_size(value: Any, where: str = "options", limit: int = MAX_OPTION_ITEMS) -> None:
    """Refuse structures that expand beyond ``limit`` items, aliases counted once per use
    (YAML alias bombs); the walk stops at the limit, so a bomb costs ``limit`` steps."""
    stack, seen = [value], 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > limit:
            raise ConfigError(f"{where}: more than {limit} items once YAML aliases are "
                              "expanded (an alias bomb?); simplify them")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def _literal(raw: str) -> Any:
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw
