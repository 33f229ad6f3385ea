"""The HTML report, the exposed samples and the run comparison (no browser; see
test_report_browser.py for the rendering check)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from conftest import tiny_audit
from miaudit.auditor.stages import audit
from miaudit.cli import app
from miaudit.cli.compare import exposed_from_config
from miaudit.reporting.compare import (
    CompareError,
    Comparison,
    choose_attacks,
    compare_markdown,
    comparison,
    markdown,
    render_compare_html,
    rich_table,
    run_labels,
)
from miaudit.reporting.exposed import flagged_counts, member_exposure, write_exposed_samples
from miaudit.reporting.figures import distinct_colors, resample_roc
from miaudit.reporting.html import write_html_report
from miaudit.reporting.run_view import RunView
from miaudit.results import read_results, write_results
from miaudit.stats import metrics

ATTACKS = ["loss", "lira", "lira:offline=true"]


def image_audit(root, **overrides):
    """4 MLPs on 8x8 synthetic images (so the report has thumbnails), with the memorization
    analysis; about two seconds."""
    config = tiny_audit(root, attacks=ATTACKS, memorization_attack="lira", **overrides)
    config["data"]["options"]["shape"] = [1, 8, 8]
    return audit(config, show_progress=False)


@pytest.fixture(scope="module")
def dp_run(tmp_path_factory):
    """A DP-SGD run (privacy section) with memorization.json and exposed.npz."""
    root = tmp_path_factory.mktemp("dp")
    results = image_audit(root, train={"epochs": 2, "batch_size": 32, "lr": 0.1,
                                       "recipe": "dpsgd", "recipe_options": {
                                           "noise_multiplier": 1.0, "accountant": "rdp"}})
    exposed_from_config(results.run_dir, results.summary)
    return results


# -- figures and exposure: hand-worked and brute-force references ----------------------------
def test_distinct_colors_never_repeat():
    for n in range(1, 41):
        colors = distinct_colors(n)
        assert len(colors) == n and len(set(colors)) == n, n
    assert distinct_colors(16)[10] != distinct_colors(16)[0]  # no tab10 cycle after ten


def test_resampled_roc_is_tpr_at_fpr_at_every_level():
    rng = np.random.default_rng(0)
    members = rng.random(500) < 0.5
    scores = rng.normal(size=500) + members  # ties too: rounded
    scores = np.round(scores, 1)
    fpr, tpr, _ = metrics.roc_curve(scores, members)
    grid = np.r_[0.0, np.logspace(-3, 0, 50), 0.37]
    expected = [metrics.tpr_at_fpr(fpr, tpr, level) for level in grid]
    np.testing.assert_allclose(resample_roc(fpr, tpr, grid), expected)


def test_member_exposure_and_flagged_counts_hand_worked():
    scores = np.array([[3.0, 1.0, 0.0, 5.0],
                       [1.0, 2.0, 4.0, 0.5]])
    members = np.array([[True, False, True, False],
                        [True, True, False, False]])
    exposure, count = member_exposure(scores, members)
    np.testing.assert_allclose(exposure[:3], [2.0, 2.0, 0.0])
    assert np.isnan(exposure[3]) and count.tolist() == [2, 1, 1, 0]
    # Pooled ROC, members 3, 0, 1, 2 and non-members 1, 5, 4, 0.5 (descending thresholds):
    # 5 -> (FPR .25, TPR 0), 4 -> (.5, 0), 3 -> (.5, .25), 2 -> (.5, .5), 1 -> (.75, .75).
    # FPR <= 0.1% or 25%: TPR 0 at best, the threshold flags no one.
    assert flagged_counts(scores, members).tolist() == [0, 0, 0, 0]
    assert flagged_counts(scores, members, level=0.25).tolist() == [0, 0, 0, 0]
    # FPR <= 50%: threshold 2 flags sample 0 in target 0 (3) and sample 1 in target 1 (2).
    assert flagged_counts(scores, members, level=0.5).tolist() == [1, 1, 0, 0]
    # FPR <= 75%: threshold 1 also flags sample 0 in target 1.
    assert flagged_counts(scores, members, level=0.75).tolist() == [2, 1, 0, 0]


def test_exposed_samples_are_the_top_members_with_thumbnails(tmp_path):
    scores = np.array([[0.1, 0.9, 0.5, 0.7, 0.7, 0.2]])
    members = np.array([[True, False, True, True, True, True]])
    x = np.linspace(0, 1, 6 * 4).reshape(6, 1, 2, 2)
    path = write_exposed_samples(tmp_path, scores, members, x, np.arange(6) % 3,
                                 ["a", "b", "c"], k=3, attack="loss")
    stored = np.load(path)
    # Sample 1 scores highest but is no member; 3 and 4 tie at 0.7 -> lower index first.
    assert stored["indices"].tolist() == [3, 4, 2]
    np.testing.assert_allclose(stored["scores"], [0.7, 0.7, 0.5])
    assert stored["labels"].tolist() == [0, 1, 2] and str(stored["attack"]) == "loss"
    thumbs = stored["thumbnails"]
    assert thumbs.shape == (3, 2, 2, 1) and thumbs.dtype == np.uint8
    np.testing.assert_array_equal(thumbs[0, :, :, 0], np.round(x[3, 0] * 255))
    # no temporary file left; digests.json records exposed.npz's digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["digests.json", "exposed.npz"]
    tabular = write_exposed_samples(tmp_path, scores, members, None, np.zeros(6, int), ["a"])
    assert "thumbnails" not in np.load(tabular).files


# -- the HTML report --------------------------------------------------------------------------
class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.attack_rows, self.images, self.sections, self.external = 0, 0, [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "tr" and "attack" in (attrs.get("class") or "").split():
            self.attack_rows += 1
        if tag == "img":
            self.images += 1
            assert attrs["src"].startswith("data:image/png;base64,")
        if tag == "section":
            self.sections.append(attrs["id"])
        if tag in ("script", "link", "iframe") or any(
                re.match(r"\s*(https?:)?//", attrs.get(k) or "") for k in ("src", "href")):
            self.external.append((tag, attrs))


def test_html_report_is_self_contained_and_has_every_section(dp_run):
    path = write_html_report(dp_run.run_dir, dp_run.summary)
    text = path.read_text()
    page = _Page()
    page.feed(text)
    assert page.external == []
    assert page.attack_rows == len(ATTACKS)
    assert page.sections == ["headline", "settings", "roc", "table", "models", "classes",
                             "privacy", "memorization", "records", "usage", "exposed"]
    assert page.images == 16 + 1  # thumbnails + the memorization figure
    # LiRA panel, baselines panel, the DP-bound panel, the per-record risk histogram
    assert text.count("<svg") == 4
    pooled = {a: dp_run.attacks[a].pooled for a in ATTACKS}
    # ranked at 0.1% FPR when some attack measures it, else at 1% FPR, and said (issue 76)
    level = next(key for key in ("tpr@0.1%", "tpr@1%")
                 if any(pooled[a][f"{key}_measurable"] for a in ATTACKS))
    best = max(ATTACKS, key=lambda a: (pooled[a][f"{level}_measurable"], pooled[a][level],
                                       pooled[a]["auc"]))
    ranked = ("TPR at 0.1% FPR" if level == "tpr@0.1%" else
              "TPR at 1% FPR; TPR at 0.1% FPR is not measurable for any attack")
    assert f"Strongest attack (largest {ranked}, of {len(ATTACKS)}): <b>{best}</b>" in text
    assert "simultaneous over all 3 attacks" in text and "two-way (crossed) bootstrap" in text
    claimed = dp_run.summary.privacy.epsilon
    assert f"{claimed:.3g}" in text and "consistent" in text
    assert path.stat().st_size < 1_000_000


def test_html_report_of_a_results_file_alone_omits_what_needs_the_run_directory(dp_run,
                                                                                 tmp_path):
    (tmp_path / "results.json").write_bytes((dp_run.run_dir / "results.json").read_bytes())
    path = write_html_report(tmp_path, None)
    text = path.read_text()
    assert path == tmp_path / "report.html" and "per-sample scores are absent" in text
    assert "<svg" not in text and 'id="exposed"' not in text
    assert text.count('<tr class="attack') == len(ATTACKS) and 'id="privacy"' in text


def test_run_view_reads_a_results_file_as_well_as_a_run_directory(dp_run):
    by_dir = RunView(dp_run.run_dir)
    by_file = RunView(dp_run.run_dir / "results.json")
    assert by_file.root == by_dir.root and list(by_file.attacks) == ATTACKS
    assert by_dir.scores("lira").shape == by_dir.members.shape


# -- comparison -------------------------------------------------------------------------------
def test_run_labels_name_what_differs_and_ignore_bookkeeping():
    base = {"name": "x", "output_dir": "/a", "model": {"name": "mlp", "width": 1.0},
            "train": {"recipe": "standard", "epochs": 5}}
    other = {**base, "name": "y", "output_dir": "/b", "model": {"name": "cnn", "width": 1.0},
             "train": {"recipe": "dpsgd", "epochs": 5}}
    assert run_labels([base, other], ["x", "y"]) == ["model=mlp, recipe=standard",
                                                     "model=cnn, recipe=dpsgd"]
    assert run_labels([base, {**base, "name": "z"}], ["x", "z"]) == ["x", "z"]


def test_attack_choice_is_the_common_set_or_an_error(dp_run, tmp_path):
    view = RunView(dp_run.run_dir)
    assert choose_attacks([view, view], None) == ATTACKS
    assert choose_attacks([view], ["lira"]) == ["lira"]
    with pytest.raises(CompareError, match="no attack rmia"):
        choose_attacks([view], ["rmia"])


def test_compare_table_markdown_and_escaped_rich_output(dp_run, tmp_path):
    # A second run as a results file whose config differs in the recipe (compare reads only
    # results.json), instead of a second audit.
    plain = read_results(dp_run.run_dir / "results.json")
    plain["config"]["train"]["recipe"] = "standard"
    write_results(tmp_path / "plain.json", plain)  # sealed: an unsealed edit is refused
    runs = [dp_run.run_dir, tmp_path / "plain.json"]
    table = comparison([RunView(p) for p in runs], ["lira", "loss"])
    assert table.wide and len(table.rows) == 2
    assert table.rows[0][0].startswith("1. ") and "recipe=dpsgd" in table.rows[0][0]
    lira = dp_run.attacks["lira"].pooled
    # a level the run cannot measure is n/m in compare, not a TPR at zero FPR (issue 23)
    assert table.rows[0][4] == (f"{100 * lira['tpr@0.1%']:.2f} [{100 * lira['tpr@0.1%_ci'][0]:.2f}"
                                f", {100 * lira['tpr@0.1%_ci'][1]:.2f}]"
                                if lira["tpr@0.1%_measurable"] else "n/m")
    assert comparison([RunView(p) for p in runs], None).wide  # 3 attacks: one row per run
    plain["attacks"]["lira"]["pooled"]["tpr@0.1%_measurable"] = True
    plain["attacks"]["loss"]["pooled"]["tpr@0.1%_measurable"] = False
    write_results(tmp_path / "plain.json", plain)
    table = comparison([RunView(p) for p in runs], ["lira", "loss"])
    assert table.rows[1][4] == (f"{100 * lira['tpr@0.1%']:.2f} [{100 * lira['tpr@0.1%_ci'][0]:.2f}"
                                f", {100 * lira['tpr@0.1%_ci'][1]:.2f}]")
    assert table.rows[1][7] == "n/m"
    text = compare_markdown(runs, ATTACKS)
    assert text.count("\n| 1. ") == 1 and text.count("\n| 2. ") == 1
    # A fourth common attack switches to one row per (run, attack).
    plain["attacks"]["lira copy"] = plain["attacks"]["lira"]
    write_results(tmp_path / "plain.json", plain)
    write_results(tmp_path / "again.json", {**plain, "config": dp_run.summary.config})
    long = comparison([RunView(tmp_path / "plain.json"), RunView(tmp_path / "again.json")])
    assert not long.wide and "attack" in long.header and len(long.rows) == 2 * 4
    assert [row[4] for row in long.rows[:4]] == [*ATTACKS, "lira copy"]


def test_compare_notes_runs_that_differ_in_reference_models(dp_run, tmp_path):
    # LiRA calibrated on more reference models is stronger: a comparison of runs with different
    # num_models says so for every attack that uses references, and not for LOSS (none).
    record = read_results(dp_run.run_dir / "results.json")
    models = record["num_models"]
    write_results(tmp_path / "grown.json", {**record, "num_models": models + 2})
    views = [RunView(dp_run.run_dir), RunView(tmp_path / "grown.json")]
    table = comparison(views, ["loss", "lira"])
    assert table.notes == [f"lira: the runs differ in reference models per target (1. "
                           f"{models - 1}, 2. {models + 1}); an attack calibrated on more is "
                           "stronger, so compare runs with equal num_models"]
    assert f"Note: {table.notes[0]}." in markdown(table)
    assert "<b>Note</b>: lira: the runs differ" in render_compare_html(table)
    assert comparison([views[0], views[0]], ["loss", "lira"]).notes == []


def test_default_compare_names_the_attacks_only_some_runs_have(dp_run, tmp_path):
    # The default table keeps the common attacks; an attack one run alone has (paper C's
    # "+input_dropout" attacks) is named in a note, not dropped silently.
    record = read_results(dp_run.run_dir / "results.json")
    record["attacks"]["lira+input_dropout"] = record["attacks"]["lira"]
    write_results(tmp_path / "dropout.json", record)
    views = [RunView(dp_run.run_dir), RunView(tmp_path / "dropout.json")]
    table = comparison(views)
    assert table.attacks == ATTACKS
    assert table.notes == ["not in every run, so not in this table: lira+input_dropout (run 2); "
                           "each run's own report and results.json have them"]
    assert comparison(views, ["lira"]).notes == []  # a chosen subset is the user's choice
    assert comparison([views[1], views[1]]).notes == []


def test_rich_table_prints_user_text_verbatim():
    table = Comparison(header=["run", "[b]x"], rows=[["1. norm=[bold]", "0.1 [0.0, 0.2]"]],
                       views=[], labels=[], attacks=[], notes=[])
    console = Console(width=200, record=True)
    console.print(rich_table(table))
    text = console.export_text()
    # Unescaped, rich would read [bold] and [b] as markup and drop them.
    assert "norm=[bold]" in text and "[b]x" in text and "0.1 [0.0, 0.2]" in text


def test_report_html_and_compare_commands(dp_run, tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["report", str(dp_run.run_dir), "--html"])
    assert result.exit_code == 0, result.output
    assert (dp_run.run_dir / "report.html").exists() and "HTML report:" in result.output
    out = tmp_path / "cmp.html"
    result = runner.invoke(app, ["compare", str(dp_run.run_dir), str(dp_run.run_dir),
                                 "--attacks", "lira;lira:offline=true", "--html", str(out)])
    assert result.exit_code == 0, result.output
    assert out.exists() and out.read_text().count("<svg") == 1
    result = runner.invoke(app, ["compare", str(dp_run.run_dir), "--attacks", "nope"])
    assert result.exit_code == 2 and "no attack nope" in result.output


def test_the_public_compare_is_the_cli_comparison_as_markdown_and_page(dp_run, tmp_path):
    import miaudit
    from miaudit.reporting.compare import compare_markdown

    sources = [dp_run.run_dir, dp_run.run_dir / "results.json"]  # a directory and a record
    page = tmp_path / "compare.html"
    table = miaudit.compare(sources, html=page)
    assert table == compare_markdown(sources)
    assert table.count("\n| 1. ") + table.count("\n| 2. ") >= 2 and "TPR@0.1%" in table
    assert page.exists() and "<svg" in page.read_text()
