"""The public face: miaudit.audit, miaudit.score, Results.load, miaudit.attacks.evaluate."""

import json
import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

import miaudit
from miaudit.errors import ConfigError, RunDirError
from miaudit.results.external import validate_outputs


def _outputs(models=16, samples=400, classes=3, target_learns=True, seed=0):
    """Balanced keep (each sample IN for half the models); a model that learns puts +3 on the
    true class of its members. Model 0 is the target of the null check."""
    rng = np.random.default_rng(seed)
    keep = np.zeros((models, samples), dtype=bool)
    for i in range(samples):
        keep[rng.permutation(models)[: models // 2], i] = True
    labels = rng.integers(0, classes, samples)
    logits = rng.normal(0, 1, (models, samples, 1, classes)).astype(np.float32)
    learns = np.ones(models, dtype=bool)
    learns[0] = target_learns
    boost = 3.0 * (keep & learns[:, None])
    logits[np.arange(models)[:, None], np.arange(samples)[None, :], 0, labels[None, :]] += boost
    return logits, keep, labels


def test_public_names_resolve():
    from miaudit.attacks.suite import evaluate
    from miaudit.auditor.stages import Results, audit
    from miaudit.results.scoring import score

    assert miaudit.audit is audit and miaudit.Results is Results
    assert miaudit.score is score and miaudit.attacks.evaluate is evaluate


def test_evaluate_loss_is_the_log_probability_of_the_label():
    # Yeom et al. 2018, Sec. 3.2: score = -loss = log softmax(z)_y; worked by hand for z = (2, 0)
    logits = np.array([[[2.0, 0.0], [0.0, 2.0]], [[0.0, 0.0], [1.0, 1.0]]], np.float32)
    keep = np.array([[True, False], [False, True]])
    scores = miaudit.attacks.evaluate(logits, keep, ["loss"], labels=np.array([0, 0]))
    expected = [[math.log(math.e**2 / (math.e**2 + 1)), math.log(1 / (1 + math.e**2))],
                [math.log(0.5), math.log(0.5)]]
    assert scores["loss"].shape == (2, 2)
    np.testing.assert_allclose(scores["loss"], expected, rtol=1e-6)


def test_evaluate_separates_members_and_gives_chance_for_a_target_that_learned_nothing():
    logits, keep, labels = _outputs()
    found = miaudit.attacks.evaluate(logits, keep, ["lira", "loss"], labels=labels,
                                     targets=[0])
    assert roc_auc_score(keep[0], found["lira"][0]) > 0.9
    # rotation null: the references memorize, the target does not
    logits, keep, labels = _outputs(target_learns=False)
    null = miaudit.attacks.evaluate(logits, keep, ["lira", "loss"], labels=labels, targets=[0])
    for label in ("lira", "loss"):
        assert 0.43 < roc_auc_score(keep[0], null[label][0]) < 0.57


def test_evaluate_leaves_population_unscored_and_names_bad_specs():
    logits, keep, labels = _outputs(models=4, samples=20)
    keep[:, :5] = False
    scores = miaudit.attacks.evaluate(logits, keep, ["rmia_simple"], labels=labels,
                                      population=np.arange(5))["rmia_simple"]
    assert np.isnan(scores[:, :5]).all() and np.isfinite(scores[:, 5:]).all()
    with pytest.raises(ConfigError, match=r"attacks\[1\]"):
        miaudit.attacks.evaluate(logits, keep, ["loss", "lira:no_such_option=1"],
                                 labels=labels)


def test_score_in_memory_equals_score_to_files_and_results_load(tmp_path):
    logits, keep, labels = _outputs(models=6, samples=60)
    outputs = validate_outputs(keep, logits, labels, sources=dict.fromkeys(
        ("keep", "logits", "labels"), "memory"), query_names=["identity"])
    attacks = ["loss", "lira:offline=true"]
    memory = miaudit.score(outputs, attacks)
    written = miaudit.score(outputs, attacks, out_dir=tmp_path / "scored")
    assert memory.run_dir is None and written.run_dir == tmp_path / "scored"
    loaded = miaudit.Results.load(tmp_path / "scored")
    assert loaded.summary.attacks.keys() == written.summary.attacks.keys()
    pure = miaudit.attacks.evaluate(logits, keep, attacks, labels=labels)
    for label in ("loss", "lira:offline=true"):
        assert memory.attacks[label].pooled == written.attacks[label].pooled
        assert json.dumps(loaded.attacks[label].pooled) == json.dumps(
            written.attacks[label].pooled)
        in_memory, members = memory.scores(label)
        on_disk, disk_members = loaded.scores(label)
        np.testing.assert_array_equal(in_memory, on_disk)
        np.testing.assert_array_equal(members, keep)
        np.testing.assert_array_equal(disk_members, keep)
        np.testing.assert_allclose(in_memory, pure[label], rtol=0, atol=0)


def test_results_load_refuses_a_folder_without_results(tmp_path):
    with pytest.raises(RunDirError, match="results.json does not exist"):
        miaudit.Results.load(tmp_path)


def _scored_twice(tmp_path):
    logits, keep, labels = _outputs(models=6, samples=60)
    outputs = validate_outputs(keep, logits, labels, sources=dict.fromkeys(
        ("keep", "logits", "labels"), "memory"), query_names=["identity"])
    attacks = ["loss", "lira:offline=true"]
    return attacks, (miaudit.score(outputs, attacks),
                     miaudit.score(outputs, attacks, out_dir=tmp_path / "scored"))


def test_results_table_holds_the_pooled_fractions(tmp_path):
    pd = pytest.importorskip("pandas")
    attacks, both = _scored_twice(tmp_path)
    for results in both:
        table = results.table()
        assert isinstance(table, pd.DataFrame) and list(table.index) == attacks
        assert table.loc["lira:offline=true", "attack"] == "lira"
        for label in attacks:  # fractions, as in results.json; None (NaN) where not measurable
            for key, view in (("tpr@1%", "pooled"), ("tpr@0.001%", "pooled"),
                              ("auc", "mean")):
                column = key if view == "pooled" else f"{key}_{view}"
                expected = results.metric(label, key, view)
                cell = table.loc[label, column]
                assert pd.isna(cell) if expected is None else cell == expected
            low, high = results.attacks[label].pooled["tpr@1%_ci"]
            assert (table.loc[label, "tpr@1%_ci_low"],
                    table.loc[label, "tpr@1%_ci_high"]) == (low, high)
        assert 0 <= table["tpr@1%"].min() and table["auc"].max() <= 1


def test_results_plot_roc_draws_every_attack_and_chance(tmp_path):
    import matplotlib.pyplot as plt

    attacks, both = _scored_twice(tmp_path)
    for results in both:
        figure = results.plot_roc()
        lines = figure.axes[0].get_lines()
        assert [line.get_label() for line in lines] == [
            f"{label} (AUC {results.metric(label, 'auc'):.3f})" for label in attacks] + ["chance"]
        plt.close(figure)
