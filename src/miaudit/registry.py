"""Name -> constructor registries for data sets, models, recipes, attacks, queries, ...

Every pluggable component is one small module that registers itself with a decorator::

    @MODELS.register("resnet14")
    def build_resnet14(*, num_classes, in_channels, width=1.0): ...

Unknown names raise :class:`UnknownNameError` listing the valid names.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T", bound=Callable[..., Any])


class UnknownNameError(ValueError):
    """Raised for a name that no registry entry has (a ValueError, so pydantic reports it
    against the config field that named it)."""


class Registry(Generic[T]):
    """A mapping from names to constructors, filled by the ``register`` decorator."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(constructor: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = constructor
            return constructor

        return add

    def get(self, name: str) -> T:
        _load_plugins()
        try:
            return self._entries[name]
        except KeyError:
            valid = ", ".join(sorted(self._entries)) or "(none)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; valid: {valid}") from None

    def build(self, name: str, **options: Any) -> Any:
        """Call the constructor, turning a wrong option into an error naming the entry."""
        constructor = self.get(name)
        try:
            return constructor(**options)
        except TypeError as error:
            raise ValueError(f"bad options for {self.kind} {name!r}: {error}") from error

    def names(self) -> list[str]:
        _load_plugins()
        return sorted(self._entries)

    def describe(self) -> dict[str, str]:
        """Name -> first docstring line, for the listing commands."""
        _load_plugins()
        return {
            name: ((self._entries[name].__doc__ or "").strip().splitlines() or [""])[0]
            for name in sorted(self._entries)
        }

    def __contains__(self, name: str) -> bool:
        _load_plugins()
        return name in self._entries


DATASETS: Registry = Registry("dataset")
MODELS: Registry = Registry("model")
RECIPES: Registry = Registry("training recipe")
PENALTIES: Registry = Registry("penalty")
QUERIES: Registry = Registry("query augmentation")
ATTACKS: Registry = Registry("attack")
OUTPUT_DEFENSES: Registry = Registry("output defense")
ACCOUNTANTS: Registry = Registry("accountant")

_PLUGIN_PACKAGES = (
    "miaudit.data",
    "miaudit.models",
    "miaudit.training",
    "miaudit.attacks",
    "miaudit.defenses",
    "miaudit.privacy",
    "miaudit.queries",
)
_loaded = False


def _load_plugins() -> None:
    """Import every module of the plugin packages once, so their decorators run."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    import importlib
    import pkgutil

    for package_name in _PLUGIN_PACKAGES:
        package = importlib.import_module(package_name)
        for module in pkgutil.iter_modules(getattr(package, "__path__", [])):
            if not module.name.startswith("_"):
                importlib.import_module(f"{package_name}.{module.name}")


def parse_spec(spec: str | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Parse ``"name"``, ``"name:key=value,key=value"`` or ``{"name": ..., key: value}``.

    Values are Python/YAML-like literals (numbers, booleans, strings).
    """
    if isinstance(spec, dict):
        options = dict(spec)
        if "name" not in options:
            raise ValueError(f"spec {spec!r} has no 'name'")
        return str(options.pop("name")), options
    name, _, rest = spec.partition(":")
    options: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"spec {spec!r}: option {item!r} is not key=value")
        options[key.strip()] = _literal(raw.strip())
    return name.strip(), options


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
