"""Human-facing outputs beyond the terminal table: the self-contained HTML report of a run,
the most exposed samples, and the comparison of several runs.

Public functions: :func:`write_html_report`, :func:`write_exposed_samples`,
:func:`compare_markdown`. Only :mod:`miaudit.reporting.run_view` reads results.json.
"""

from miaudit.reporting.exposed import write_exposed_samples
from miaudit.reporting.html import write_html_report

__all__ = ["write_exposed_samples", "write_html_report"]
