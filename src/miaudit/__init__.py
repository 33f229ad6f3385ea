"""miaudit: membership-inference privacy audits of neural networks.

The public API is the names below (``miaudit.__all__``); every other module is internal
(importable, but free to change; see docs/architecture.md):

- :func:`audit` (config -> :class:`Results`), with :class:`AuditConfig` / :func:`load_config`;
- :func:`score` (outputs of models trained elsewhere -> :class:`Results`, with or without
  files), what ``miaudit score`` does;
- :meth:`Results.load` (a finished run directory, or a results.json file -> :class:`Results`),
  :class:`Summary` (the typed results.json), :func:`compare` (runs side by side, what
  ``miaudit compare`` prints);
- :func:`evaluate` (= ``miaudit.attacks.evaluate``; pure: logits, keep matrix, attack specs ->
  scores);
- the registries users add components to (:data:`ATTACKS`, :data:`DATASETS`, :data:`MODELS`,
  :data:`RECIPES`, :data:`PENALTIES`, :data:`QUERIES`, :data:`OUTPUT_DEFENSES`,
  :data:`ACCOUNTANTS`) and the base classes they subclass (:class:`Attack`, :class:`Recipe`,
  :class:`Penalty`, :class:`DataSplits`, :class:`Query`, :class:`OutputDefense`);
- the user errors (:class:`UserError` and its kinds), which the CLI prints on one line.

Every name loads its module at first use, so ``import miaudit`` (and the CLI's ``--help``)
imports neither torch nor the config machinery.
"""

import importlib
from typing import Any

from miaudit.version import __version__ as __version__

#: public name -> the module that defines it
_HOMES = {
    "audit": "miaudit.auditor.stages",
    "Results": "miaudit.results",
    "Summary": "miaudit.results",
    "compare": "miaudit.reporting.compare",
    "score": "miaudit.results.scoring",
    "evaluate": "miaudit.attacks.suite",
    "AuditConfig": "miaudit.config",
    "load_config": "miaudit.config",
    "ATTACKS": "miaudit.registry",
    "DATASETS": "miaudit.registry",
    "MODELS": "miaudit.registry",
    "RECIPES": "miaudit.registry",
    "PENALTIES": "miaudit.registry",
    "QUERIES": "miaudit.registry",
    "OUTPUT_DEFENSES": "miaudit.registry",
    "ACCOUNTANTS": "miaudit.registry",
    "Attack": "miaudit.attacks._base",
    "Recipe": "miaudit.training.engine",
    "Penalty": "miaudit.training.engine",
    "DataSplits": "miaudit.data._base",
    "Query": "miaudit.queries",
    "OutputDefense": "miaudit.output_defenses.memguard",
    "UserError": "miaudit.errors",
    "ConfigError": "miaudit.errors",
    "DataError": "miaudit.errors",
    "InputFileError": "miaudit.errors",
    "ResourceError": "miaudit.errors",
    "RunDirError": "miaudit.errors",
}

__all__ = sorted([*_HOMES, "attacks"])


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
        globals()[name] = value  # later reads skip this function
        return value
    if name == "attacks":
        return importlib.import_module("miaudit.attacks")
    raise AttributeError(f"module 'miaudit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
