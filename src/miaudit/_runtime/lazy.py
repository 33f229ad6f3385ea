"""A module loaded at its first attribute access, for command-line modules whose ``--help``
must not import torch (the accountants and NSDE bounds import opacus and torch)."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands for the module ``name``; imports it when an attribute is first read."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attribute)
