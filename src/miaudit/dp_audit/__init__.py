"""The canary training harness of ``miaudit dp-audit`` (torch); the pure bounds it feeds live in
:mod:`miaudit.privacy`. Public: :class:`DPAuditConfig` and :func:`run_dp_audit` (loaded when
first asked for)."""

from typing import Any

__all__ = ["DPAuditConfig", "run_dp_audit"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from miaudit.dp_audit import canary, settings

        return getattr(settings if name == "DPAuditConfig" else canary, name)
    raise AttributeError(f"module 'miaudit.dp_audit' has no attribute {name!r}")
