"""miaudit: membership-inference privacy audits of neural networks.

Public API: :func:`audit` (config -> :class:`Results`) and :class:`AuditConfig`.
"""

from typing import Any

from miaudit.config import AuditConfig, ConfigError, load_config
from miaudit.version import __version__ as __version__

__all__ = ["AuditConfig", "ConfigError", "Results", "audit", "load_config"]


def __getattr__(name: str) -> Any:
    # The stages pull in every registry plugin; import them only when they are asked for.
    if name in ("audit", "Results"):
        from miaudit import stages

        return getattr(stages, name)
    raise AttributeError(f"module 'miaudit' has no attribute {name!r}")
