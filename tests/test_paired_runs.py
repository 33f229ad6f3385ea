"""Cross-run paired differences (issue 26): two audits with the same memberships compared by one
interval of their difference (miaudit.analysis.paired_runs)."""

import numpy as np
import pytest

from miaudit.analysis.paired_runs import NotPaired, check_paired, paired_difference
from miaudit.stats import metrics


def _world(seed: int, targets: int = 6, samples: int = 600, signal: float = 0.5):
    """Rotation-like memberships and two runs' scores: a per-sample difficulty shared by both
    runs (the correlation pairing exploits) plus per-run noise and a membership shift."""
    rng = np.random.default_rng(seed)
    members = rng.random((targets, samples)) < 0.5
    difficulty = rng.normal(size=samples)

    def run(shift: float) -> np.ndarray:
        return difficulty + shift * members + 0.5 * rng.normal(size=(targets, samples))
    return members, run, signal


def test_identical_runs_differ_by_exactly_zero():
    members, run, signal = _world(0)
    scores = run(signal)
    found = paired_difference(scores, scores, members, rounds=200)
    for key in ("tpr@1%", "auc"):
        assert found[key] == {"value": 0.0, "ci": [0.0, 0.0]}


def test_the_value_is_the_difference_of_the_pooled_metrics():
    members, run, signal = _world(1)
    a, b = run(signal), run(0.0)
    found = paired_difference(a, b, members, rounds=200)
    for key in ("tpr@1%", "auc"):
        expected = (metrics.summarize(a.ravel(), members.ravel())[key]
                    - metrics.summarize(b.ravel(), members.ravel())[key])
        assert found[key]["value"] == pytest.approx(expected)


def test_a_leaking_run_is_decided_above_a_non_leaking_one_and_not_the_reverse():
    members, run, signal = _world(2)
    a, b = run(signal), run(0.0)
    assert paired_difference(a, b, members, rounds=300)["auc"]["ci"][0] > 0
    assert paired_difference(b, a, members, rounds=300)["auc"]["ci"][1] < 0


def test_pairing_is_narrower_than_the_overlap_of_two_intervals():
    # Both runs leak a little differently; the shared difficulty makes their AUCs move
    # together across resamples, so the paired interval is narrower than either run's own.
    from miaudit.stats import intervals

    members, run, _ = _world(3, signal=0.3)
    a, b = run(0.35), run(0.3)
    paired = paired_difference(a, b, members, rounds=300)["auc"]["ci"]
    resamples = intervals.Resamples.draw(*members.shape, rounds=300)
    own = intervals.replicate_metrics(a, members, resamples, metrics.DEFAULT_FPR_LEVELS)["auc"]
    own_width = np.diff(intervals.percentile_interval(own))[0]
    assert paired[1] - paired[0] < own_width


def test_null_two_runs_of_one_world_cover_zero():
    # Null check: two independent trainings of the same kind (same leakage): the 95% interval
    # of the difference covers 0 in most worlds (at least 16 of 20 here; an interval that
    # ignored the target randomness would miss far more often).
    covered = 0
    for seed in range(20):
        members, run, signal = _world(100 + seed, targets=4, samples=300)
        ci = paired_difference(run(signal), run(signal), members, keys=("auc",),
                               rounds=200)["auc"]["ci"]
        covered += ci[0] <= 0.0 <= ci[1]
    assert covered >= 16


def test_unmeasurable_levels_are_left_out():
    members, run, signal = _world(4, targets=2, samples=200)  # 0.1% of ~200 non-members < 1
    found = paired_difference(run(signal), run(0.0), members, rounds=100)
    assert "tpr@0.1%" not in found and "auc" in found


@pytest.mark.parametrize(("change", "message"), [
    ({"targets_b": [0, 2]}, "targets differ"),
    ({"audited_b": np.arange(1, 5)}, "different pool samples"),
    ({"members_b": np.ones((2, 4), bool)}, "memberships differ"),
])
def test_audits_that_do_not_share_memberships_are_refused(change, message):
    members = np.array([[True, False, True, False], [False, True, False, True]])
    given = {"targets_a": [0, 1], "targets_b": [0, 1], "audited_a": np.arange(4),
             "audited_b": np.arange(4), "members_a": members, "members_b": members.copy()}
    with pytest.raises(NotPaired, match=message):
        check_paired(**{**given, **change})
    check_paired(**given)  # the unchanged pair passes


def test_the_paired_interval_covers_the_true_difference_of_a_known_world():
    # Coverage against a world whose truth is known by quadrature (analysis/synthetic_world):
    # two audits sharing memberships and samples, one leaking more (effect scale 1.5 vs 1.2).
    # The paired interval covers the true difference and decides a > b at least as often as
    # two separate intervals that must not overlap (benchmarks/interval_coverage.py --paired:
    # the full-size study).
    from miaudit.analysis.synthetic_world import World, paired_coverage_study

    result = paired_coverage_study(World(), World(scale=1.2), audits=30, num_models=8,
                                   num_samples=400, rounds=200)
    assert result.truth["auc"] == pytest.approx(0.0143, abs=5e-4)  # pinned (quadrature)
    for key in ("tpr@0.1%", "tpr@1%", "auc"):
        assert result.covered[key] >= 0.85, key
        assert result.decided_paired[key] >= result.decided_separate[key], key
    assert result.decided_paired["auc"] > result.decided_separate["auc"]


def test_compare_paired_prints_each_run_minus_the_first(tmp_path):
    # Two audits with the same memberships (only the epochs differ) are paired; a third at
    # another seed has other memberships and is said to be unpaired, not compared wrongly.
    import re

    from typer.testing import CliRunner

    from conftest import tiny_audit
    from miaudit.auditor.stages import audit
    from miaudit.cli import app
    from miaudit.config import validate_config
    from miaudit.reporting.run_view import RunView

    runs = [audit(validate_config(tiny_audit(tmp_path, attacks=["loss"], **extra)),
                  show_progress=False).run_dir
            for extra in ({}, {"train": {"epochs": 2, "batch_size": 32, "lr": 0.1}},
                          {"seed": 4})]
    page = tmp_path / "cmp.html"
    result = CliRunner().invoke(app, ["compare", *map(str, runs), "--paired", "--html",
                                      str(page)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = lines.index(next(line for line in lines if "paired differences" in line))
    row_2 = next(line for line in lines[start:] if line.startswith("│ 2."))
    # 40 non-members: TPR@0.1% is not measurable; AUC: the difference with its interval
    cells = [cell.strip() for cell in row_2.split("│")[1:-1]]
    assert cells[1:3] == ["loss", "n/m"]
    # AUC in percentage points, as every table's percent (issue 76: a fraction here)
    assert re.fullmatch(r"[+-]\d+\.\d{2} \[[+-]\d+\.\d{2}, [+-]\d+\.\d{2}\]", cells[4])
    auc = [RunView(run).attacks["loss"].auc for run in runs[:2]]
    assert float(cells[4].split()[0]) == pytest.approx(100 * (auc[1] - auc[0]), abs=6e-2)
    # the paired differences are in the HTML too, the tables scroll with a sticky run column
    html = page.read_text()
    assert "Paired differences (run - run 1)" in html and 'id="paired"' in html
    assert cells[4].split()[0] in html and "not paired: the audits score different" in html
    assert html.count('<div class="scroll">') == 2 and "position:sticky" in html
    assert any(line.startswith("│ 3.") and "not paired: the audits score different pool "
               "samples" in line for line in lines[start:])  # another seed, another split


def _paired_tiny_audits(tmp_path):
    """Two tiny audits with the same memberships (only their epochs differ)."""
    from conftest import tiny_audit
    from miaudit.auditor.stages import audit
    from miaudit.config import validate_config

    return [audit(validate_config(tiny_audit(tmp_path, **extra)), show_progress=False).run_dir
            for extra in ({}, {"train": {"epochs": 2, "batch_size": 32, "lr": 0.1}})]


def test_kept_scores_pair_exactly_as_their_run_directory_did_once_it_is_gone(tmp_path):
    # A run directory rarely outlives its session: the scores kept beside its results.json
    # must give the partner run, made later, the same paired interval the directory would.
    import shutil

    from miaudit.analysis.kept_scores import keep_scores, read_kept_scores
    from miaudit.analysis.paired_runs import paired_run_difference
    from miaudit.reporting.run_view import RunView

    first, second = _paired_tiny_audits(tmp_path)
    expected = paired_run_difference(RunView(first), "lira", RunView(second), "lira")
    assert "auc" in expected
    path = tmp_path / "first.scores.npz"
    keep_scores(path, RunView(first), ["lira", "loss"], "digest-of-first")
    shutil.rmtree(first)
    kept = read_kept_scores(path)
    assert kept.result_digest == "digest-of-first" and sorted(kept.by_label) == ["lira", "loss"]
    assert paired_run_difference(kept, "lira", RunView(second), "lira") == expected
    with pytest.raises(ValueError, match="keeps no scores of attack 'rmia'"):
        kept.scores("rmia")


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_kept_scores_are_refused_naming_the_file(tmp_path, damage):
    from miaudit.analysis.kept_scores import keep_scores, read_kept_scores
    from miaudit.errors import RunDirError
    from miaudit.reporting.run_view import RunView

    path = tmp_path / "run.scores.npz"
    keep_scores(path, RunView(_paired_tiny_audits(tmp_path)[0]), ["lira"], "d")
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF  # inside the compressed scores: zlib or CRC-32 finds it
    else:
        data = data[: len(data) // 2]
    path.write_bytes(bytes(data))
    with pytest.raises(RunDirError, match=r"cannot read kept scores .*run\.scores\.npz"):
        read_kept_scores(path)
