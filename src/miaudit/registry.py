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
import difflib
import importlib
import inspect
import os
from collections.abc import Callable
from pathlib import Path
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
            raise UnknownNameError(f"unknown {self.kind} {name!r}{self.hint(name)}; valid: "
                                   f"{valid} (or an import path 'package.module:name')")
        importlib.import_module(module)
        if name not in self._entries:  # a bug of ours, not the user's: keep the traceback
            raise RuntimeError(f"module {module} did not register {self.kind} {name!r}")
        return self._entries[name]

    def hint(self, name: str) -> str:
        """", did you mean 'lira'?" for a close misspelling; for a comma-separated list of
        names (``--attacks lira,rmia``) the separator to use; else ""."""
        if "," in name and all(part.strip() in self for part in name.split(",")):
            return (f" (attacks are separated by ';', not ',': "
                    f"{';'.join(part.strip() for part in name.split(','))!r})")
        close = difflib.get_close_matches(name, self.names(), n=1, cutoff=0.6)
        return f", did you mean {close[0]!r}?" if close else ""

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

    def build_spec(self, spec: str | dict[str, Any]) -> Any:
        """Build the entry a config spec names: ``"lira"``, ``"lira:offline=true"`` or
        ``{"name": "lira", "offline": True}``, its options read as a config reads them."""
        name, options = parse_spec(spec)
        return self.build(name, **options)

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
        """Name -> first docstring line, for the listing commands. A built-in's docstring is
        read from its module's source (no import: listing attacks loads no torch); plugins
        and entries registered at run time are read from the live object."""
        described = {}
        for name in self.names():
            doc = None if name in self._entries else _static_doc(self._modules.get(name), name)
            if doc is None:
                doc = self.get(name).__doc__ or ""
            described[name] = (doc.strip().splitlines() or [""])[0]
        return described

    def __contains__(self, name: str) -> bool:
        try:
            self.get(name)
        except UnknownNameError:
            return False
        return True


def _import_path(path: str, kind: str) -> Any:
    """'package.module:attribute' -> the callable, with one clear error per failing step."""
    from miaudit._runtime.importpath import ImportPathError, import_callable

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


def _static_doc(module: str | None, name: str) -> str | None:
    """The docstring of the definition in ``module``'s source decorated with
    ``<REGISTRY>.register(name, ...)``, or None when the source does not show one."""
    if not module or not module.startswith("miaudit."):
        return None
    path = Path(__file__).parent.joinpath(*module.split(".")[1:])  # without importing parents
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and any(
                isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)
                and d.func.attr == "register" and d.args
                and isinstance(d.args[0], ast.Constant) and d.args[0].value == name
                for d in node.decorator_list):
            return ast.get_docstring(node) or ""
    return None


def _modules(package: str, table: dict[str, str]) -> dict[str, str]:
    return {name: f"miaudit.{package}.{module}" if module else f"miaudit.{package}"
            for name, module in table.items()}


DATASETS: Registry = Registry("dataset", _modules("data", {
    "cifar10": "cifar", "cifar100": "cifar", "digits": "digits", "imagefolder": "imagefolder",
    "location30": "location", "synthetic": "synthetic", "tabular": "tabular", "text": "text"}))
MODELS: Registry = Registry("model", _modules("models", {
    "small_cnn": "simple", "mlp": "simple", "resnet14": "resnet", "resnet50": "resnet",
    "odenet": "ode",
    "odenet64": "ode", "anode": "ode", "sonode": "ode_second_order",
    "hbnode": "ode_second_order", "sdenet": "sde",
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
    | {name: "miaudit.queries.labels" for name in ("label", "boundary")}
    | {"prefix": "miaudit.auditor.stages.prefix_query"})
ATTACKS: Registry = Registry("attack", _modules("attacks", {
    "loss": "loss", "correctness": "song_mittal", "song_mittal": "song_mittal",
    "watson": "watson", "shokri": "shokri", "lira": "lira", "attack_p": "population",
    "attack_r": "reference", "rmia": "rmia", "rmia_simple": "rmia",
    "dropout_search": "dropout_search", "salem": "salem", "zlib": "text_zlib",
    "min_k": "text_min_k", "min_k_pp": "text_min_k", "ref_model": "text_ref_model",
    "label_augmentation": "label_only", "boundary_distance": "label_only", "qmia": "qmia",
    "recall": "text_recall", "con_recall": "text_recall", "dc_pdd": "text_dc_pdd",
    "ramia": "ramia"}))
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
    for item in filter(None, (part.strip() for part in split_top_level(rest))):
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


def split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside brackets: ``"queries=[identity,shift:dx=1],x=2"``
    -> ``["queries=[identity,shift:dx=1]", "x=2"]``."""
    parts, depth, start = [], 0, 0
    for position, char in enumerate(text):
        depth += {"[": 1, "(": 1, "]": -1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:position])
            start = position + 1
    return [*parts, text[start:]]


def _literal(raw: str) -> Any:
    if raw.startswith("[") and raw.endswith("]"):  # a list, its strings unquoted or not
        try:
            return ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            return [_literal(item.strip()) for item in split_top_level(raw[1:-1]) if item.strip()]
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw
