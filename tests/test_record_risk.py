"""Per-record risk across retrainings (miaudit.analysis.record_risk): a hand-worked interval, a
hand-worked flag count, a known-truth simulation (planted exposed records found, null records
covered at the nominal rate) and the audit's records.csv / Results.records() / report."""

import numpy as np
import pytest

from conftest import tiny_audit
from miaudit.analysis.record_risk import newcombe_difference, record_risk


def test_newcombe_with_clopper_pearson_by_hand():
    # 4/4 flagged IN, 0/4 OUT: CP(4, 4) = [0.025^(1/4), 1] = [0.39764, 1],
    # CP(0, 4) = [0, 1 - 0.025^(1/4)] = [0, 0.60236];
    # low = 1 - sqrt(0.60236^2 + 0.60236^2) = 0.14813, high = 1 + 0 = 1
    risk, low, high = newcombe_difference([4, 2], [4, 4], [0, 2], [4, 0])
    assert risk[0] == 1.0
    assert low[0] == pytest.approx(1 - np.sqrt(2) * (1 - 0.025 ** 0.25), abs=1e-12)
    assert low[0] == pytest.approx(0.14813, abs=1e-5)
    assert high[0] == 1.0
    assert np.isnan([risk[1], low[1], high[1]]).all()  # never OUT: no risk to rate


def test_flags_at_the_global_threshold_by_hand():
    # 4 targets x 3 records, 6 members and 6 non-members. Pooled, descending:
    # 10 M, 9 M, 8.5 M, 7 N, 6 N, 3 N, 2 N, 1.5 M, 1.2 M, 1 N, 0.5 M, 0 N.
    members = np.array([[1, 0, 1], [0, 1, 0], [1, 0, 0], [0, 1, 1]], dtype=bool)
    scores = np.array([[9.0, 0.0, 1.5], [7.0, 8.5, 1.0], [10.0, 2.0, 3.0], [6.0, 0.5, 1.2]])
    # FPR 10%: only FPR 0 is allowed, threshold 8.5 (TPR 3/6); flagged: 9, 10 (record 0 IN),
    # 8.5 (record 1 IN)
    strict = record_risk(scores, members, level=0.1)
    assert strict.threshold == 8.5
    np.testing.assert_array_equal(strict.flagged_in, [2, 1, 0])
    np.testing.assert_array_equal(strict.flagged_out, [0, 0, 0])
    np.testing.assert_allclose(strict.risk, [1.0, 0.5, 0.0])
    # FPR 70%: threshold 1.2 (FPR 4/6, TPR 5/6). Record 0: IN 9, 10; OUT 7, 6 -> 2/2 - 2/2;
    # record 1: IN 8.5, 0.5; OUT 0, 2 -> 1/2 - 1/2; record 2: IN 1.5, 1.2; OUT 1, 3 -> 1 - 1/2
    loose = record_risk(scores, members, level=0.7)
    assert loose.threshold == 1.2
    np.testing.assert_array_equal(loose.flagged_in, [2, 1, 2])
    np.testing.assert_array_equal(loose.flagged_out, [2, 1, 1])
    np.testing.assert_allclose(loose.risk, [0.0, 0.0, 0.5])
    np.testing.assert_array_equal(loose.n_in, [2, 2, 2])


def test_known_truth_planted_records_found_null_records_covered():
    rng = np.random.default_rng(0)
    targets, records, planted = 16, 3000, 100
    members = rng.random((targets, records)) < 0.5
    scores = rng.normal(size=(targets, records))
    scores[:, :planted] += np.where(members[:, :planted], 3.0, 0.0)  # memorized when IN
    for level in (0.01, 0.1):
        r = record_risk(scores, members, level=level)
        assert r.significant[:planted].mean() > 0.8
        null = slice(planted, None)
        covered = (r.low[null] <= 0) & (r.high[null] >= 0)
        assert covered.mean() >= 0.95  # exact components: at least nominal
        assert abs(np.nanmean(r.risk[null])) < 0.01


def test_null_scores_give_no_significant_record():
    rng = np.random.default_rng(1)
    members = rng.random((8, 2000)) < 0.5
    r = record_risk(rng.normal(size=(8, 2000)), members, level=0.05)
    assert r.share_significant() <= 0.025


def test_bad_shapes_and_levels_are_refused():
    with pytest.raises(ValueError, match="equal"):
        record_risk(np.zeros((2, 3)), np.zeros((2, 4), dtype=bool))
    with pytest.raises(ValueError, match="level"):
        record_risk(np.zeros((2, 2)), np.array([[1, 0], [0, 1]], dtype=bool), level=0)


def test_audit_writes_records_and_results_reads_them(tmp_path):
    pytest.importorskip("pandas")
    from miaudit import audit

    results = audit(tiny_audit(tmp_path), show_progress=False)
    table = results.records()
    keep = np.load(results.run_dir / "keep.npy")[results.summary.targets]
    audited = np.load(results.run_dir / "split.npz")["audited"]
    assert list(table["index"]) == list(audited)
    np.testing.assert_array_equal(table["n_in"], keep[:, audited].sum(0))
    assert {"loss:mean_in", "lira:mean_out", "risk_low", "class"} <= set(table.columns)
    assert (table["label"] >= 0).all() and (table["class"] != "").all()
    again = results.records(attack="loss", level=0.2)  # recomputed, labels kept
    scores, members = results.scores("loss")
    expected = record_risk(scores, members, level=0.2)
    np.testing.assert_allclose(again["risk"], expected.risk)
    np.testing.assert_array_equal(again["label"], table["label"])
    assert "Per-record risk across retrainings" in (results.run_dir / "report.html").read_text()
