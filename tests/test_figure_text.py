"""Every figure the report draws has readable text: tick labels are numbers (``10^-3`` on a
log axis), never the raw mathtext source ``$\\mathdefault{10^{-3}}$`` that a helper turning off
math rendering for user strings used to print on every log axis (issue 76); user labels that
look like math are drawn as written; a PNG gets SVG and PDF copies beside it."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from miaudit._runtime.io import save_figure  # noqa: E402
from miaudit.analysis.memorization import plot_memorization_analysis  # noqa: E402
from miaudit.privacy.bounds import plot_roc_bounds  # noqa: E402
from miaudit.reporting import figures  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"
POWER_OF_TEN = re.compile(r"10−?\d+")  # "10" then the superscript exponent, U+2212 minus


def tick_labels(svg: str) -> dict[str, list[str]]:
    """Tick label strings per axis ("x", "y") of an SVG figure (text as text): the joined text
    of each ``xtick_*`` / ``ytick_*`` group."""
    root = ET.fromstring(svg)
    labels: dict[str, list[str]] = {"x": [], "y": []}
    for group in root.iter(f"{SVG}g"):
        name = group.get("id", "")
        if re.fullmatch(r"[xy]tick_\d+", name):
            text = "".join(part.strip() for t in group.iter(f"{SVG}text") for part in t.itertext())
            if text:
                labels[name[0]].append(text)
    return labels


def all_text(svg: str) -> str:
    return " ".join("".join(t.itertext()) for t in ET.fromstring(svg).iter(f"{SVG}text"))


def assert_readable(svg: str, log_axes: str = "") -> dict[str, list[str]]:
    assert "mathdefault" not in svg and "$\\" not in svg
    labels = tick_labels(svg)
    for axis, texts in labels.items():
        assert texts, f"no {axis} tick labels drawn"
        for text in texts:
            assert "$" not in text and "mathdefault" not in text, text
            if axis in log_axes:
                assert POWER_OF_TEN.fullmatch(text), f"{axis} tick {text!r} is not 10^k"
    return labels


def curve(label: str, floor: float) -> dict:
    grid = figures.log_grid(floor)
    return {"label": label, "grid": grid, "tpr": np.sqrt(grid)}


def test_html_roc_panel_has_power_of_ten_ticks_and_user_dollars_as_written():
    svg = figures.to_svg(figures.roc_panel("lira", [curve("lira:$x$", 1e-3)], 1e-3), "k")
    labels = assert_readable(svg, log_axes="xy")
    assert labels["x"] == ["10−3", "10−2", "10−1", "100"]
    assert "lira:$x$" in all_text(svg)  # a user label is never parsed as math


def test_dp_bound_panel_and_planner_and_privacy_utility_are_readable():
    bound = {"fpr": figures.log_grid(1e-3), "tpr": np.minimum(1, 3 * figures.log_grid(1e-3)),
             "label": "eps = 1 bound"}
    assert_readable(figures.to_svg(figures.roc_panel("DP", [curve("a", 1e-3)], 1e-3, bound),
                                   "dp"), log_axes="xy")
    planned = {"lira": {"references": [1, 2, 4, 8, 15], "tpr@1%": [0.01, 0.02, 0.03, 0.03, 0.04],
                        "tpr@1%_ci": [[0.0, 0.05]] * 5, "enough_references": 8}}
    labels = assert_readable(figures.to_svg(figures.planner_curves(planned, "tpr@1%"), "p"))
    assert labels["x"] == ["1", "2", "4", "8", "15"]  # the counts planned, as numbers
    points = [{"run": "1", "attack": "lira", "accuracy": 0.9, "accuracy_std": 0.01,
               "tpr": 0.01, "ci": (0.005, 0.02)}]
    assert_readable(figures.to_svg(figures.privacy_utility(points), "pu"))


def test_saved_png_gets_readable_svg_and_pdf_beside_it(tmp_path):
    rng = np.random.default_rng(0)
    fpr, tpr = np.sort(rng.random(200)), np.sort(rng.random(200))
    curves = {"lira": (np.r_[0, fpr, 1], np.r_[0, tpr, 1])}
    members = np.r_[np.ones(100, bool), np.zeros(1000, bool)]
    saved = save_figure(figures.roc_figure(curves, {"lira": 0.5}, members, "t"),
                        tmp_path / "roc.png")
    assert saved.read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "roc.pdf").read_bytes()[:4] == b"%PDF"
    svg = (tmp_path / "roc.svg").read_text()
    assert_readable(svg, log_axes="xy")
    plot_roc_bounds(curves, [1.0], 1e-5, tmp_path / "bound.png")
    assert_readable((tmp_path / "bound.svg").read_text(), log_axes="xy")


def test_memorization_figure_symlog_counts_are_readable(tmp_path):
    rows = [{"high": k / 4, "train_acc": 0.9, "test_acc": 0.8, "tpr@0.1%": 0.01,
             "n_members": 10 ** k, "n_nonmembers": 5} for k in range(5)]
    table = {"bins": rows, "target": 0,
             "spearman_loss_mem": {"train": {"rho": 0.1}, "test": {"rho": 0.2}}}
    plot_memorization_analysis(table, tmp_path / "mem.png")
    svg = (tmp_path / "mem.svg").read_text()
    assert "mathdefault" not in svg and "$" not in all_text(svg)
    assert any(POWER_OF_TEN.fullmatch(t) for t in tick_labels(svg)["y"])
