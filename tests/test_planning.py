import numpy as np
import pytest

from miaudit.auditor.design import balanced_keep, half_split, make_plan, make_split, model_seed
from miaudit.errors import ConfigError


@pytest.mark.parametrize("models", [2, 4, 16, 64])
@pytest.mark.parametrize("samples", [1, 7, 100, 1001])
@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_every_sample_is_in_for_exactly_half_of_the_models(models, samples, seed):
    keep = balanced_keep(models, samples, seed)
    assert keep.shape == (models, samples) and keep.dtype == bool
    assert (keep.sum(axis=0) == models // 2).all()


def test_growing_the_family_keeps_every_existing_row():
    small, large = balanced_keep(8, 500, seed=3), balanced_keep(16, 500, seed=3)
    assert np.array_equal(large[:8], small)
    for m in (2, 4, 6, 10, 12, 14):  # balanced at every even size
        assert (large[:m].sum(axis=0) == m // 2).all()


def test_models_get_about_half_of_the_samples_and_differ():
    keep = balanced_keep(16, 4000, seed=0)
    assert np.allclose(keep.mean(axis=1), 0.5, atol=0.01)
    assert len({row.tobytes() for row in keep}) == 16


def test_split_is_disjoint_complete_and_seeded():
    split = make_split(1000, 0.1, 50, seed=1)
    assert (len(split.population), len(split.holdout), len(split.audited)) == (100, 50, 850)
    joined = np.concatenate([split.audited, split.population, split.holdout])
    assert np.array_equal(np.sort(joined), np.arange(1000))
    assert np.array_equal(make_split(1000, 0.1, 50, seed=1).population, split.population)
    assert not np.array_equal(make_split(1000, 0.1, 50, seed=2).population, split.population)
    with pytest.raises(ConfigError, match="fewer than 2"):
        make_split(10, 5, 4, seed=0)


def test_nobody_trains_on_population_or_holdout_samples():
    split = make_split(300, 30, 20, seed=0)
    for protocol in ("rotation", "fixed_target"):
        keep = make_plan(protocol, 6, split, seed=0).keep
        assert not keep[:, split.population].any() and not keep[:, split.holdout].any()
        assert (keep[-6:][:, split.audited].sum(axis=0) == 3).all()


def test_keep_matrix_is_reproducible_from_the_seed():
    split = make_split(50, 0, 0, seed=7)
    a = make_plan("rotation", 8, split, seed=7).keep
    assert np.array_equal(a, make_plan("rotation", 8, split, seed=7).keep)
    assert not np.array_equal(a, make_plan("rotation", 8, split, seed=8).keep)


def test_odd_model_count_is_refused():
    with pytest.raises(ConfigError, match="even"):
        balanced_keep(3, 10, 0)


def test_rotation_targets_every_model_with_all_others_as_references():
    plan = make_plan("rotation", 6, make_split(30, 0, 0, 0), seed=0)
    assert plan.targets == tuple(range(6))
    assert plan.references(2).tolist() == [0, 1, 3, 4, 5]
    assert make_plan("rotation", 6, make_split(30, 0, 0, 0), seed=0, num_targets=2).targets \
        == (0, 1)


def test_fixed_target_is_a_half_split_plus_balanced_references():
    plan = make_plan("fixed_target", 4, make_split(101, 0, 0, 0), seed=0)
    assert plan.keep.shape == (5, 101) and plan.targets == (0,)
    assert plan.keep[0].sum() == 50
    assert (plan.keep[1:].sum(axis=0) == 2).all()
    assert plan.is_reference_architecture(1) and not plan.is_reference_architecture(0)


def test_half_split_has_exactly_half():
    assert half_split(11, np.random.default_rng(0)).sum() == 5


def test_model_seeds_are_distinct_and_stable():
    seeds = [model_seed(0, m) for m in range(100)]
    assert len(set(seeds)) == 100 and seeds == [model_seed(0, m) for m in range(100)]
