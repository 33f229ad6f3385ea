"""Helpers of config loading that need no config class: dotted overrides and the one-line
summary of validation errors."""

from __future__ import annotations

import difflib
import math
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from miaudit.errors import ConfigError


def set_dotted(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``value`` at the dotted path (``"train.epochs"``) of a raw config mapping."""
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


def format_errors(error: ValidationError, model: type[BaseModel] | None = None) -> str:
    """Every validation problem as "field: message", on one line; an unknown key of
    ``model`` (the validated class) gets the closest valid key (``train.epoch``: did you mean
    'epochs'?)."""
    problems = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        value = item.get("input")
        if isinstance(value, float) and not math.isfinite(value):
            message += f" (got {value})"
        if item["type"] == "extra_forbidden" and model is not None:
            message += key_hint(model, item["loc"])
        problems.append(f"{field}: {message}")
    return "invalid audit config: " + "; ".join(problems)


def key_hint(model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """"; did you mean 'epochs'?" for the unknown key at ``loc`` of ``model``, or ""."""
    section: Any = model
    for part in loc[:-1]:
        fields = getattr(section, "model_fields", None)
        if fields is None or part not in fields:
            return ""
        section = _model_in(fields[part].annotation)
    if section is None:
        return ""
    close = difflib.get_close_matches(str(loc[-1]), list(section.model_fields), n=1,
                                      cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model class inside ``annotation`` (``TrainConfig | None`` -> TrainConfig)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        if (found := _model_in(argument)) is not None:
            return found
    return None
