"""Open an HTML report in a real, headless Chromium and read back what the page shows.

Driven by Selenium through the system chromedriver (Debian: ``apt-get install chromium
chromium-driver``; ``pip install selenium``), which works offline: both binaries are local, and
giving Selenium the driver path keeps its driver manager from going to the network. Used by
the browser test and to take the README screenshot::

    python -m miaudit.reporting.browser RUN/report.html --screenshot docs/report_default.png
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from miaudit._runtime.io import write_bytes

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class BrowserUnavailable(RuntimeError):
    """No headless browser can be driven here; the message says what is missing."""


@dataclass
class PageCheck:
    """What the browser saw: console errors, every <img> with its natural width, the rendered
    width of every inline <svg>, and the number of rows of the attack table."""

    title: str
    console_errors: list[str] = field(default_factory=list)
    images: list[tuple[str, int]] = field(default_factory=list)
    svg_widths: list[float] = field(default_factory=list)
    table_rows: int = 0
    page_height: int = 0
    #: per inline <svg>, its axes' tick labels as drawn: (text, rendered width in px)
    svg_ticks: list[list[tuple[str, float]]] = field(default_factory=list)


def find_binaries() -> tuple[str, str]:
    """(browser, chromedriver) paths; ``MIAUDIT_CHROMIUM`` / ``MIAUDIT_CHROMEDRIVER`` override."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        raise BrowserUnavailable("the selenium package is not installed (pip install "
                                 "selenium)") from None
    browser = os.environ.get("MIAUDIT_CHROMIUM") or next(
        (path for name in BROWSERS if (path := shutil.which(name))), None)
    driver = os.environ.get("MIAUDIT_CHROMEDRIVER") or shutil.which("chromedriver")
    if browser is None:
        raise BrowserUnavailable("no Chromium/Chrome binary on PATH (apt-get install chromium)")
    if driver is None:
        raise BrowserUnavailable("no chromedriver on PATH (apt-get install chromium-driver)")
    return browser, driver


def _driver(width: int, height: int):  # -> selenium WebDriver
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    browser, driver = find_binaries()
    options = Options()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--hide-scrollbars", f"--window-size={width},{height}"):
        options.add_argument(argument)  # no sandbox: CI runs as root
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


_READ_PAGE = r"""
return {
  images: Array.from(document.images).map(i => [i.alt || i.src.slice(0, 40),
                                                 i.complete ? i.naturalWidth : 0]),
  svgs: Array.from(document.querySelectorAll('svg')).map(s => s.getBoundingClientRect().width),
  rows: document.querySelectorAll(arguments[0]).length,
  ticks: Array.from(document.querySelectorAll('svg')).map(s => Array.from(
    s.querySelectorAll('g[id^="xtick_"] text, g[id^="ytick_"] text')).map(t => [
      t.textContent.replace(/\s+/g, ''), t.getBoundingClientRect().width])),
  height: document.documentElement.scrollHeight,
};
"""


def save_screenshot(driver, path: Path, width: int, height: int) -> None:
    """A PNG of the page's top ``height`` CSS pixels, beyond the window if need be (Chrome
    DevTools Protocol ``Page.captureScreenshot``; a window-sized shot would cut the page)."""
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}})
    write_bytes(path, base64.b64decode(shot["data"]))


def check_page(path: Path, *, screenshot: Path | None = None, width: int = 1280,
               shot_height: int | None = None, row_selector: str = "#attacks tbody tr"
               ) -> PageCheck:
    """Load ``path`` (file://) headless and return what the page shows; with ``screenshot``,
    save a PNG of the page (its full height, or the top ``shot_height`` pixels)."""
    driver = _driver(width, 900)
    try:
        driver.get(Path(path).resolve().as_uri())
        seen = driver.execute_script(_READ_PAGE, row_selector)
        errors = [entry["message"] for entry in driver.get_log("browser")
                  if entry.get("level") == "SEVERE"]
        if screenshot is not None:
            save_screenshot(driver, Path(screenshot), width, shot_height or int(seen["height"]))
        return PageCheck(title=driver.title, console_errors=errors,
                         images=[(str(a), int(w)) for a, w in seen["images"]],
                         svg_widths=[float(w) for w in seen["svgs"]], table_rows=int(seen["rows"]),
                         page_height=int(seen["height"]),
                         svg_ticks=[[(str(t), float(w)) for t, w in ticks]
                                    for ticks in seen["ticks"]])
    finally:
        driver.quit()


def main() -> None:  # pragma: no cover - a maintenance tool
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path)
    parser.add_argument("--screenshot", type=Path, default=None)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=None, help="screenshot height (px); "
                        "default: the full page")
    args = parser.parse_args()
    check = check_page(args.page, screenshot=args.screenshot, width=args.width,
                       shot_height=args.height)
    print(check)


if __name__ == "__main__":  # pragma: no cover
    main()
