"""Human-facing outputs beyond the terminal table: the self-contained HTML report of a run,
the most exposed samples, and the comparison of several runs.

Public functions: :func:`write_html_report`, :func:`write_exposed_samples`,
:func:`compare_markdown`. Only :mod:`miaudit.reporting.run_view` reads results.json.
"""

from typing import Any

__all__ = ["compare_markdown", "write_exposed_samples", "write_html_report"]
_HOMES = {"write_html_report": "html", "write_exposed_samples": "exposed",
          "compare_markdown": "compare"}


def __getattr__(name: str) -> Any:
    # Imported on first use: the CLI mounts `compare` at start-up and should not pay for
    # scikit-learn and matplotlib then.
    if name in _HOMES:
        from importlib import import_module

        return getattr(import_module(f"miaudit.reporting.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'miaudit.reporting' has no attribute {name!r}")
