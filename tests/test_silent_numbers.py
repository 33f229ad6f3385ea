"""Numbers that were wrong without a word (issue 22): each test reproduces one and checks
the number against an independent computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import tiny_audit
from miaudit.auditor import stages as pipeline
from miaudit.auditor.modeljob import load_trained
from miaudit.config import validate_config
from miaudit.queries import clean_column, stored_queries


def _image_audit(tmp_path, queries):
    return tiny_audit(tmp_path, data={"name": "synthetic", "options": {
        "n_train": 120, "n_test": 40, "shape": [1, 6, 6], "num_classes": 4,
        "separation": 0.3}}, queries=queries, attacks=["loss"], train={
        "epochs": 6, "batch_size": 32, "lr": 0.1})


def _clean_accuracy(planned, run_dir):
    """Train/test accuracy of every target, evaluated here on the clean inputs."""
    run = pipeline.RunDir(run_dir)
    train, test = [], []
    audited = np.zeros(len(planned.pool.y), dtype=bool)
    audited[planned.plan.split.audited] = True
    for target in planned.plan.targets:
        model = load_trained(run, planned.jobs[target], planned.pool, torch.device("cpu"))
        with torch.no_grad():
            correct = (model(planned.pool.x).argmax(-1) == planned.pool.y).numpy()
        member = planned.plan.keep[target]
        train.append(correct[member].mean())
        test.append(correct[~member & audited].mean())
    return float(np.mean(train)), float(np.mean(test))


def test_clean_query_is_found_in_presets_and_spellings():
    assert clean_column(["shift:dx=-1,dy=-1,flip=False", "shift:dx=0,dy=0,flip=False"]) == 1
    assert clean_column(["flip", "identity"]) == 1
    assert clean_column(["shift:dx=0,dy=0,flip=True", "dropout:p=0.1,n=2", "query0"]) is None
    assert stored_queries(["flip"]) == ["flip", "identity"]
    assert stored_queries(["shift:dx=0", "flip"]) == ["shift:dx=0", "flip"]


@pytest.mark.parametrize("queries", [["shift:dx=-1,dy=-1", "shift:dx=0,dy=0", "flip"],
                                     ["flip", "shift:dx=1"]])
def test_accuracy_comes_from_clean_inputs_whatever_the_queries(tmp_path, queries):
    """Before: accuracy and gap were read from query column 0 (here a shift or a flip)."""
    config = validate_config(_image_audit(tmp_path, queries))
    results = pipeline.audit(config, show_progress=False)
    planned = pipeline.plan_audit(config)
    train, test = _clean_accuracy(planned, results.run_dir)
    stats = results.summary.target_models
    assert stats.train_accuracy == pytest.approx(train, abs=1e-9)
    assert stats.test_accuracy == pytest.approx(test, abs=1e-9)
    assert stats.accuracy_query in ("shift:dx=0,dy=0", "identity")
    assert results.summary.queries == queries  # the extra clean query is not attacked


def test_attack_labels_that_share_a_scores_file_are_refused_by_score(tmp_path):
    """Before: "x y" and "x_y" both wrote x_y.npy; results.json said one AUC while the stored
    scores (and the report built from them) were the other attack's."""
    from miaudit.errors import ConfigError
    from miaudit.results.external import validate_outputs
    from miaudit.results.scoring import score_outputs

    rng = np.random.default_rng(0)
    keep = np.arange(6)[:, None] % 2 == np.arange(20)[None] % 2
    outputs = validate_outputs(keep, rng.normal(size=(6, 20, 1, 3)), rng.integers(0, 3, 20),
                               sources=dict.fromkeys(("keep", "logits", "labels"), "x"))
    specs = [{"name": "lira", "label": "x y"}, {"name": "loss", "label": "X_y"}]
    with pytest.raises(ConfigError, match="both save their scores as X_y.npy"):
        score_outputs(outputs, specs, tmp_path / "scored")
    assert not (tmp_path / "scored").exists()


@pytest.mark.parametrize("damage", ["edit", "truncate"])
def test_an_edited_or_truncated_robust_evaluation_record_is_recomputed(tmp_path, damage):
    """Before: 0.1 -> 0.2 in models/0001/eval/<key>.json was reported as 0.2 with rc 0."""
    import json

    config = validate_config(tiny_audit(tmp_path, attacks=["loss"], robust_eval={
        "eps": 0.3, "step": 0.1, "steps": 2, "max_samples": 20}))
    first = pipeline.audit(config, show_progress=False).summary.target_models
    run_dir = pipeline.plan_audit(config).run_dir
    (record,) = run_dir.glob("models/0001/eval/*.json")
    value = json.loads(record.read_text())
    if damage == "edit":
        value["robust"]["test"]["natural_acc"] = 0.123456
        record.write_text(json.dumps(value))
    else:
        record.write_text(record.read_text()[:40])
    with pytest.warns(RuntimeWarning, match=f"{record.name}.*recomputing"):
        again = pipeline.audit(config, show_progress=False).summary.target_models
    assert again.test_natural_acc_per_target == first.test_natural_acc_per_target
    assert pipeline.RunDir(run_dir).eval_record(1, record.stem) is not None  # rewritten intact


def test_report_names_a_damaged_results_file(tmp_path):
    """Before: one changed digit in results.json and `report` showed the wrong AUC, rc 0."""
    import json
    import re

    from typer.testing import CliRunner

    from miaudit.cli import app

    root = pipeline.audit(validate_config(tiny_audit(tmp_path)), show_progress=False).run_dir
    path = root / "results.json"
    text = path.read_text()
    auc = re.search(r'"auc": 0\.(\d)', text)
    digit = str((int(auc.group(1)) + 3) % 10)
    path.write_text(text[: auc.start(1)] + digit + text[auc.end(1):])
    json.loads(path.read_text())  # still valid JSON: only the digest can tell
    for command in (["report", root], ["compare", root]):
        result = CliRunner().invoke(app, [str(a) for a in command])
        assert result.exit_code == 2, result.output
        assert "results.json is damaged" in result.output, result.output


def test_a_kill_before_the_report_stage_leaves_no_stale_report_files(tmp_path, monkeypatch):
    """Before: killed just before roc.png was replaced, results.json listed three attacks while
    report.html, roc.png and exposed.npz still showed the earlier two."""
    from typer.testing import CliRunner

    from miaudit.auditor.runfiles import REPORT_FILES
    from miaudit.cli import app
    from miaudit.reporting import terminal as report

    config = tiny_audit(tmp_path, attacks=["loss", "lira"])
    root = pipeline.audit(validate_config(config), show_progress=False).run_dir
    assert {"roc.png", "report.html", "exposed.npz"} <= {p.name for p in root.iterdir()}

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "render_plots", killed)
    with pytest.raises(KeyboardInterrupt):
        pipeline.audit(validate_config({**config, "attacks": ["loss", "lira", "rmia"]}),
                       show_progress=False)
    assert not [name for name in REPORT_FILES if (root / name).exists()]
    monkeypatch.undo()
    result = CliRunner().invoke(app, ["report", str(root)])
    assert result.exit_code == 0 and "rmia" in result.output
    assert "roc.png and report.html missing" in result.output


def test_a_memorization_table_of_another_scores_generation_is_not_shown(tmp_path):
    import json

    from miaudit._runtime.io import record_digests
    from miaudit.reporting.run_view import RunView

    config = tiny_audit(tmp_path, attacks=["loss", "lira"], memorization_attack="lira")
    root = pipeline.audit(validate_config(config), show_progress=False).run_dir
    view = RunView(root)
    assert view.memorization is not None
    table = json.loads((root / "memorization.json").read_text())
    (root / "memorization.json").write_text(json.dumps({**table, "scores_dir": "scores-old"}))
    record_digests(root, ["memorization.json"])  # as written for that generation, intact
    assert RunView(root).memorization is None


def test_target_nonmembers_population_is_the_evaluated_nonmembers_only():
    """Before: z also took every population and holdout column (digits target 0: 809 audited
    non-members, 989 in z). The documented reading (the research code's) is the target's
    non-members among the evaluated samples."""
    from miaudit.attacks import AttackInput
    from miaudit.registry import ATTACKS

    rng = np.random.default_rng(1)
    models, samples = 4, 40
    evaluated, population = np.arange(30), np.arange(30, 36)  # 36..39: holdout
    keep = np.zeros((models, samples), dtype=bool)
    keep[:, evaluated] = np.arange(models)[:, None] % 2 == (evaluated[None] % 2)
    data = AttackInput(rng.normal(size=(models, samples, 1, 3)).astype(np.float32),
                       rng.integers(0, 3, samples), keep, ["identity"], population=population,
                       evaluated=evaluated)
    result = ATTACKS.build("attack_p", variant="ye", population="target_nonmembers").evaluate(
        data, 0, np.arange(1, models))
    assert result.info["population_size"] == int((~keep[0, evaluated]).sum()) == 15
    confidence = result.scores  # fraction of z at or below x: brute force over the 15
    z = np.flatnonzero(~keep[0] & np.isin(np.arange(samples), evaluated))
    own = ATTACKS.build("attack_p").evaluate(data, 0, np.arange(1, models)).scores
    expected = [(own[z] <= own[i]).mean() for i in range(samples)]
    np.testing.assert_allclose(confidence, expected)


def test_lira_with_per_example_variance_on_few_references_is_flagged(tmp_path):
    """Before: 8-model CIFAR-10 LiRA gave TPR@0.1% 0.03% (below chance) without a word, where a
    global variance gave 0.71%. Carlini et al. 2022 advise a global variance below ~64."""
    from typer.testing import CliRunner

    from miaudit.cli import app
    from miaudit.registry import ATTACKS

    assert ATTACKS.build("lira").caveats(63) and not ATTACKS.build("lira").caveats(64)
    assert not ATTACKS.build("lira", fixed_variance=True).caveats(3)
    config = tiny_audit(tmp_path, attacks=["lira", "lira:fixed_variance=true"])
    results = pipeline.audit(validate_config(config), show_progress=False)
    (caveat,) = results.attacks["lira"].caveats
    assert "3 reference models" in caveat and "fixed_variance=true" in caveat
    assert not results.attacks["lira:fixed_variance=true"].caveats
    printed = CliRunner().invoke(app, ["report", str(results.run_dir)]).output
    assert "lira *" in printed and "* lira: per-example variance" in printed
    assert "* lira: per-example variance" in (results.run_dir / "report.html").read_text()


def test_too_few_non_members_for_any_fpr_level_is_said(tmp_path):
    """Before: --pool-size 5 printed a TPR at 0.001% FPR of "100.00 [63.06, 100.00]" from 8
    pooled non-members, without a word."""
    from miaudit.results.scoring import resolution_caveat

    assert resolution_caveat(100) is None and "99 non-members" in resolution_caveat(99)
    config = tiny_audit(tmp_path, attacks=["loss"], data={
        "name": "synthetic", "options": {"n_train": 8, "n_test": 4, "shape": [16],
                                         "num_classes": 2}})
    results = pipeline.audit(validate_config(config), show_progress=False)
    (caveat,) = results.attacks["loss"].caveats
    audited = results.summary.audited_size  # 4 targets, each on half of them
    assert caveat.startswith(f"only {4 * audited // 2} non-members in all")


def test_an_attack_caveat_keeps_the_too_few_non_members_caveat(tmp_path):
    """Before: LiRA's own caveat (per-example variance under 64 references) replaced the
    too-few-non-members caveat instead of joining it."""
    config = tiny_audit(tmp_path, attacks=["lira"], data={
        "name": "synthetic", "options": {"n_train": 8, "n_test": 4, "shape": [16],
                                         "num_classes": 2}})
    results = pipeline.audit(validate_config(config), show_progress=False)
    resolution, variance = results.attacks["lira"].caveats
    assert resolution.startswith("only ") and "reference models" in variance


@pytest.mark.parametrize("milestones", [[2.0, -1], [0.75, 0.5], [0.5, 1.0]])
def test_milestones_outside_training_are_refused(milestones):
    from miaudit.errors import ConfigError

    with pytest.raises(ConfigError, match="train.milestones: milestones are increasing"):
        validate_config({"train": {"milestones": milestones}})


def test_weights_and_outputs_get_the_same_mode_as_every_other_file(tmp_path):
    """Before: safetensors files were written 0600 while the rest were 0644."""
    import os
    import stat

    from miaudit._runtime.io import write_json, write_tensors

    write_tensors(tmp_path / "w.safetensors", {"x": torch.zeros(2)})
    write_json(tmp_path / "r.json", {})
    mask = os.umask(0)
    os.umask(mask)
    mode = stat.S_IMODE(os.stat(tmp_path / "r.json").st_mode)
    assert mode == 0o666 & ~mask
    assert stat.S_IMODE(os.stat(tmp_path / "w.safetensors").st_mode) == mode


def test_an_attack_label_with_matplotlib_math_is_plotted_as_written(tmp_path):
    """Before: a label "$\\foo$" crashed plotting after results.json was written."""
    label = "$\\foo$ [x]"
    results = pipeline.audit(validate_config(tiny_audit(
        tmp_path, attacks=["loss", {"name": "lira", "label": label}])), show_progress=False)
    assert label in results.attacks
    assert (results.run_dir / "roc.png").exists()
    assert "\\foo" in (results.run_dir / "report.html").read_text()


def test_html_report_of_a_score_run_says_what_it_knows(tmp_path):
    """Before: `report --html` of a `miaudit score` run showed `?` settings and printed a
    ConfigError as "no exposed samples"."""
    import re

    from typer.testing import CliRunner

    from miaudit.cli import app

    rng = np.random.default_rng(0)
    np.save(tmp_path / "keep.npy", np.arange(6)[:, None] % 2 == np.arange(40)[None] % 2)
    np.save(tmp_path / "logits.npy", rng.normal(size=(6, 40, 1, 3)).astype(np.float32))
    np.save(tmp_path / "labels.npy", rng.integers(0, 3, 40))
    out = tmp_path / "scored"
    runner = CliRunner()
    assert runner.invoke(app, ["score", "--keep", str(tmp_path / "keep.npy"), "--logits",
                               str(tmp_path / "logits.npy"), "--labels",
                               str(tmp_path / "labels.npy"), "--attacks", "loss",
                               "--out", str(out)]).exit_code == 0
    result = runner.invoke(app, ["report", str(out), "--html"])
    assert result.exit_code == 0 and "no exposed samples" not in result.output, result.output
    page = (out / "report.html").read_text()
    settings = page[page.index('id="settings"'):page.index("</section>",
                                                          page.index('id="settings"'))]
    cells = re.findall(r"<td>(.*?)</td>", settings)
    assert cells and not [cell for cell in cells if "?" in cell], cells
    assert "outputs made elsewhere: 40 samples" in settings


def test_roc_png_draws_tied_scores_as_the_html_panels_do(tmp_path, monkeypatch):
    """Before: roc.png joined ROC points by slanted lines while the HTML panels (and TPR@FPR)
    read the ROC as steps; a tie group looked different in the two."""
    from pathlib import Path

    from miaudit.reporting import terminal as report

    drawn = {}
    monkeypatch.setattr(report, "save_figure",
                        lambda figure, path, dpi=120: drawn.setdefault(Path(path).name, figure))
    monkeypatch.setattr(report, "audited_members",
                        lambda root, summary: np.array([True, True, False, False]))
    from miaudit.results import AttackRecord, Summary

    # only what plot_roc reads (model_construct: no validation of the rest)
    summary = Summary.model_construct(name="t", targets=[0], attacks={
        "a": AttackRecord.model_construct(pooled={"auc": 0.75})})
    report.plot_roc(tmp_path, summary, {"a": (np.array([0, 0, 0.5, 1.0]),
                                              np.array([0, 0.5, 1.0, 1.0]))})
    lines = [line for line in drawn["roc.png"].axes[0].get_lines()
             if line.get_label().startswith("a (")]
    assert lines and all(line.get_drawstyle() == "steps-post" for line in lines)


def test_a_saturated_attack_is_said_to_be_saturated():
    """Issue 26: RMIA with gamma = 2 on fast-AT + DeMem models scored 0 for 99% of the samples
    (2 distinct values), printing AUC 0.500 and TPR@1% 0.02% (below chance) without a word."""
    from miaudit.results.scoring import saturation_caveat

    rng = np.random.default_rng(0)
    tied = np.where(rng.random((8, 1000)) < 0.99, 0.0, 1 / 120)
    caveat = saturation_caveat(tied)
    assert caveat.startswith("saturated: 99% of the scores share one value (0;")
    assert "2 distinct values" in caveat
    assert saturation_caveat(rng.normal(size=(8, 1000))) is None
    half = np.r_[np.zeros(499), rng.normal(size=501)]  # under half tied: ranks enough
    assert saturation_caveat(half) is None
