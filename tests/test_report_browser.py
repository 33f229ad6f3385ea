"""The HTML report and the comparison page rendered by a real headless Chromium.

Skips (with the reason) when no browser can be driven: it needs the chromium and
chromium-driver Debian packages and the selenium Python package (see .ci/run). The screenshot
goes to $MIAUDIT_ARTIFACTS (a CI artefact folder) or to pytest's temporary folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from conftest import tiny_audit
from miaudit.auditor.stages import audit
from miaudit.cli.compare import exposed_from_config
from miaudit.reporting.browser import BrowserUnavailable, check_page, find_binaries
from miaudit.reporting.compare import comparison, write_compare_html
from miaudit.reporting.html import write_html_report
from miaudit.reporting.run_view import RunView

ATTACKS = ["loss", "rmia", "lira", "lira:offline=true"]


@pytest.fixture(scope="module")
def browser() -> None:
    try:
        find_binaries()
    except BrowserUnavailable as reason:
        pytest.skip(f"no headless browser: {reason}")


def _artifacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("MIAUDIT_ARTIFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_report_renders_in_chromium(browser, tmp_path):
    config = tiny_audit(tmp_path, attacks=ATTACKS, train={"epochs": 4, "batch_size": 32,
                                                          "lr": 0.1})
    config["data"]["options"]["shape"] = [1, 8, 8]  # images, so the report has thumbnails
    results = audit(config, show_progress=False)
    exposed_from_config(results.run_dir, results.summary)
    report = write_html_report(results.run_dir, results.summary)
    shot = _artifacts(tmp_path) / "report_tiny.png"
    page = check_page(report, screenshot=shot)
    assert page.console_errors == []
    assert len(page.images) == 16 and all(width > 0 for _, width in page.images), page.images
    # LiRA, RMIA, baselines, the per-record risk distribution
    assert len(page.svg_widths) == 4 and min(page.svg_widths) > 300
    assert page.table_rows == len(ATTACKS)
    assert page.title == "miaudit: tiny"
    # every figure has visible axes whose tick labels are numbers (issue 76: each log-axis
    # label read "$\\mathdefault{10^{-3}}$")
    for ticks in page.svg_ticks:
        assert len(ticks) >= 4 and all(width > 0 for _, width in ticks), ticks
        assert not any("$" in text or "mathdefault" in text for text, _ in ticks), ticks
        assert any(re.fullmatch(r"10−?\d+", text) for text, _ in ticks), ticks
    assert shot.stat().st_size > 10_000  # a real picture of the page, not a blank one

    view = RunView(results.run_dir)
    out = write_compare_html(comparison([view, view], ["lira"]), tmp_path / "compare.html")
    page = check_page(out, row_selector="#compare tbody tr")
    assert page.console_errors == [] and page.table_rows == 2
    assert len(page.svg_widths) == 1 and page.svg_widths[0] > 300
