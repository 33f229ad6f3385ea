"""Helpers of config loading that need no config class: dotted overrides and the one-line
summary of validation errors."""

from __future__ import annotations

import math
from typing import Any

from pydantic import ValidationError

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


def format_errors(error: ValidationError) -> str:
    """Every validation problem as "field: message", on one line."""
    problems = []
    for item in error.errors():
        field = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        value = item.get("input")
        if isinstance(value, float) and not math.isfinite(value):
            message += f" (got {value})"
        problems.append(f"{field}: {message}")
    return "invalid audit config: " + "; ".join(problems)
