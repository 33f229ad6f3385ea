"""miaudit: membership-inference privacy audits of neural networks.

Public API: :func:`audit` (config -> :class:`Results`) and :class:`AuditConfig`.
"""

from typing import Any

from miaudit.config import AuditConfig, ConfigError, load_config
from miaudit.version import __version__ as __version__

__all__ = ["AuditConfig", "ConfigError", "Results", "audit", "load_config"]


def __getattr__(name: str) -> Any:
    # The pipeline pulls in every registry plugin; import it only when it is asked for.
    if name in ("audit", "Results"):
        from miaudit import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'miaudit' has no attribute {name!r}")
