"""miaudit: membership-inference privacy audits of neural networks.

Public API:

- :func:`audit` (config -> :class:`Results`), with :class:`AuditConfig` / :func:`load_config`;
- :func:`score` (outputs of models trained elsewhere -> :class:`Results`, with or without
  files), what ``miaudit score`` does;
- :meth:`Results.load` (a finished run directory -> :class:`Results`);
- :func:`miaudit.attacks.evaluate` (pure: logits, keep matrix, attack specs -> scores).
"""

import importlib
from typing import Any

from miaudit.config import AuditConfig, ConfigError, load_config
from miaudit.version import __version__ as __version__

__all__ = ["AuditConfig", "ConfigError", "Results", "attacks", "audit", "load_config", "score"]


def __getattr__(name: str) -> Any:
    # The stages pull in every registry plugin; import them only when they are asked for.
    if name in ("audit", "Results"):
        from miaudit.auditor import stages

        return getattr(stages, name)
    if name == "score":
        from miaudit.results.scoring import score

        return score
    if name == "attacks":
        return importlib.import_module("miaudit.attacks")
    raise AttributeError(f"module 'miaudit' has no attribute {name!r}")
