"""Component specs: how a config names a component, parsed once into a typed :class:`Component`.

Users write a component as a string ``"name:key=value,key=value"`` or a mapping
``{name: ..., key: value}`` (``"lira:offline=true"``, ``"demem:weight=0.2"``,
``{name: lira, offline: true, label: LiRA-offline}``). The config's fields parse each spec at
validation into a :class:`Component` (name, options, label) and keep the spec as written, which
is what dumps, identities and messages show, so the YAML format and every identity are those of
the written spec. This module sits below both the config and the component builders.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import PlainSerializer, ValidatorFunctionWrapHandler, WrapValidator

from miaudit.registry import parse_spec

Spec = str | dict[str, Any]


@dataclass(frozen=True, eq=False)
class Component:
    """A parsed component spec: registry ``name``, constructor ``options``, display ``label``
    (the spec as written, or an attack's ``label`` option) and the spec as ``written``."""

    name: str
    options: dict[str, Any] = field(repr=False)
    label: str
    written: Spec = field(repr=False)

    # a parsed spec stands for the spec as written: equal to it, hashed and printed like it
    # (``"lira" in cfg.attacks`` holds; a mapping spec is unhashable, as a dict is)
    def __eq__(self, other: object) -> bool:
        return self.written == (other.written if isinstance(other, Component) else other)

    def __hash__(self) -> int:
        return hash(self.written)

    def __str__(self) -> str:
        return str(self.written)


def parse_component(spec: Spec | Component) -> Component:
    """A spec as a :class:`Component` whose label is the spec as written."""
    if isinstance(spec, Component):
        return spec
    name, options = parse_spec(spec)
    return Component(name, options, spec if isinstance(spec, str) else _joined(name, options),
                     spec)


def parse_attack(spec: Spec | Component) -> Component:
    """An attack spec: its ``label`` option, when given, names it instead of the spec."""
    if isinstance(spec, Component):
        return spec
    name, options = parse_spec(spec)
    label = options.pop("label", None)
    if label is None:
        label = spec if isinstance(spec, str) else _joined(name, options)
    return Component(name, options, str(label), spec)


def _joined(name: str, options: dict[str, Any]) -> str:
    return ":".join(filter(None, [name, ",".join(f"{k}={v}" for k, v in options.items())]))


def _validator(parse: Any) -> WrapValidator:
    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Component:
        if isinstance(value, Component):
            return value
        return parse(handler(value))  # the written form's own type errors first

    return WrapValidator(validate)


def _written(component: Component) -> Spec:
    return component.written


#: config field types: validated as a written spec, held as a Component, dumped as written
ComponentSpec = Annotated[Spec, _validator(parse_component), PlainSerializer(_written)]
AttackSpec = Annotated[Spec, _validator(parse_attack), PlainSerializer(_written)]
