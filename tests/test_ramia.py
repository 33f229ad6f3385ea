"""RaMIA (miaudit.attacks.ramia): the trimmed average by hand, a range without the exact point
still found when its variants carry the memorization, and a null: ranges whose points carry
none of it (variants far from the training point) are at chance. The rotation null and
positive control of every attack (tests/test_attacks_null.py) include ramia too."""

import numpy as np
import pytest

from miaudit.attacks import AttackInput
from miaudit.attacks.ramia import RaMIA, trimmed_average
from miaudit.stats import metrics

SCORES = np.array([[1.0, 5.0, 3.0, -2.0], [0.0, 0.0, 4.0, 8.0]])


def test_trimmed_average_by_hand():
    # sorted rows: [-2, 1, 3, 5], [0, 0, 4, 8]; ratio 0.5 of 4 points drops 2
    np.testing.assert_allclose(trimmed_average(SCORES, 0.5, "bottom"), [4.0, 6.0])
    np.testing.assert_allclose(trimmed_average(SCORES, 0.5, "top"), [-0.5, 0.0])
    np.testing.assert_allclose(trimmed_average(SCORES, 0.5, "both"), [2.0, 2.0])
    np.testing.assert_allclose(trimmed_average(SCORES, 0.5, "none"), [1.75, 3.0])
    np.testing.assert_allclose(trimmed_average(SCORES, 0.9, "bottom"), [5.0, 8.0])  # keeps one
    np.testing.assert_allclose(trimmed_average(SCORES[:, :3], 0.4, "bottom"), [4.0, 2.0])


@pytest.mark.parametrize("options", [{"trim": "middle"}, {"trim_ratio": 1.0},
                                     {"trim_ratio": True}, {"fixed_variance": "yes"}])
def test_bad_options_are_refused(options):
    with pytest.raises(ValueError):
        RaMIA(**options)


def _auc(variants_memorize: bool, queries, seed=0, models=8, samples=2000):
    """Rotation over ``models``; query 0 is the exact point, queries 1-3 its variants, which
    carry the member's memorization only when ``variants_memorize``."""
    rng = np.random.default_rng(seed)
    keep = np.argsort(rng.uniform(size=(models, samples)), axis=0) < models // 2
    labels = rng.integers(0, 2, samples)
    onehot = np.eye(2)[labels][:, None, :]
    difficulty = 1.5 * rng.normal(size=(samples, 1, 2))
    carried = np.array([1.0, *([1.0 if variants_memorize else 0.0] * 3)])[None, :, None]
    logits = np.stack([
        difficulty + 0.4 * rng.normal(size=(samples, 4, 2))
        + onehot * (1.0 + 1.5 * keep[m][:, None, None] * carried)
        for m in range(models)]).astype(np.float32)
    data = AttackInput(logits, labels, keep, ["identity", "flip", "shift:dx=1", "shift:dx=-1"])
    attack = RaMIA(queries=queries)
    scores = [attack.score(data, t, np.delete(np.arange(models), t)) for t in range(models)]
    return metrics.summarize(np.concatenate(scores), keep.ravel())["auc"]


def test_range_without_the_exact_point_is_found_when_its_variants_leak():
    assert _auc(True, ["flip", "shift:dx=1", "shift:dx=-1"]) > 0.8


def test_range_whose_points_carry_no_memorization_is_at_chance():
    # the member's own point leaks (query 0) but the range queries only its variants, which
    # behave like non-members' variants: range-level AUC at chance
    assert abs(_auc(False, ["flip", "shift:dx=1", "shift:dx=-1"]) - 0.5) < 0.02
    assert _auc(False, None) > 0.6  # with the exact point in the range it is found again
