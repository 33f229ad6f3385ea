"""The typed results records (miaudit.results): every committed results.json loads, no key is
undeclared, the file on disk does not depend on the models, and the module imports that
formed cycles do not."""

import ast
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from conftest import load_script, tiny_audit
from miaudit._runtime.io import DIGEST_KEY, read_digested_json, text_digest
from miaudit.config import validate_config
from miaudit.results import (
    LAYOUT,
    AttackRecord,
    Results,
    Summary,
    holds_result,
    read_results,
    write_results,
)
from miaudit.stats import metrics

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(ROOT.glob("experiments/**/*.results.json"))


def _record(path):
    record = json.loads(path.read_text())
    record.pop(DIGEST_KEY, None)
    return record


def test_there_are_committed_results_of_both_layouts():
    layouts = {_record(path).get("layout", 1) for path in COMMITTED}
    assert len(COMMITTED) >= 10 and layouts == {1, LAYOUT}


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_results_file_loads_typed(path):
    record = _record(path)
    summary = Summary.model_validate(record)  # extra="forbid": every key is declared
    assert summary.layout == record.get("layout", 1)
    assert set(summary.attacks) == set(record["attacks"])
    for label, attack in summary.attacks.items():
        raw = record["attacks"][label]
        assert attack.auc == raw["pooled"]["auc"] and attack.caveats == raw.get("caveats", [])
        for level in metrics.DEFAULT_FPR_LEVELS:
            key = metrics.tpr_key(level)
            if key not in raw["pooled"]:
                continue
            expected = None if raw["pooled"].get(f"{key}_measurable") is False \
                else raw["pooled"][key]
            assert attack.tpr_at(level) == expected
    assert summary.target_models.test_accuracy == record["target_models"]["test_accuracy"]
    assert summary.timing.device == record["timing"]["device"]


def test_a_sealed_record_is_rewritten_byte_for_byte(tmp_path):
    sealed = [path for path in COMMITTED if DIGEST_KEY in json.loads(path.read_text())]
    assert sealed
    for path in sealed:
        record, problem = read_digested_json(path)
        assert problem is None  # the digest inside the file still verifies
        Summary.model_validate(record)
        write_results(tmp_path / "again.json", read_results(path))
        # committed records are compact JSON (experiments/run.py), run directories' indented:
        # the same content, and so the same digest
        assert json.loads((tmp_path / "again.json").read_text()) == json.loads(path.read_text())
        assert json.loads(path.read_text())[DIGEST_KEY] == text_digest(record)


def test_a_run_directory_holds_a_committed_result_only_while_rescoring_reproduced_it(tmp_path):
    # experiments/run.py and paired.py read scores from a run directory only while it holds
    # the committed result: a rescore that reproduced it (other time, scores folder, place)
    # still does; one at another number of models (other numbers) does not.
    committed = _record(next(p for p in COMMITTED if _record(p).get("layout") == LAYOUT))
    rerun = {**committed, "timing": {**committed["timing"], "attack_seconds": 1.0},
             "scores_dir": "scores-other", "run_dir": "/elsewhere"}
    write_results(tmp_path / "results.json", rerun)
    assert holds_result(tmp_path, committed)
    regrown = {**rerun, "num_models": committed["num_models"] + 8}
    write_results(tmp_path / "results.json", regrown)
    assert not holds_result(tmp_path, committed)
    (tmp_path / "results.json").write_text("{")  # damaged: holds nothing
    assert not holds_result(tmp_path, committed)
    assert not holds_result(tmp_path / "absent", committed)


def test_a_resumed_experiment_keeps_the_committed_record_it_reproduced(tmp_path, monkeypatch):
    # experiments/run.py resumed after its last config finished remakes every config's
    # result: the committed record (timing of the run that trained and queried) must stay,
    # and only a result that changed replaces it.
    run = load_script("experiments/run.py")
    committed = _record(next(p for p in COMMITTED if _record(p).get("layout") == LAYOUT))
    folder = tmp_path / "exp"
    (folder / "outputs").mkdir(parents=True)
    (folder / "a.yaml").write_text("name: a\n")
    write_results(folder / "outputs" / "a.results.json", committed)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    monkeypatch.setattr(run, "HERE", tmp_path)
    monkeypatch.setattr(run, "markdown", lambda table, rows: "")
    fp32 = validate_config(tiny_audit(tmp_path))  # run.py checks its precision first
    monkeypatch.setattr(run.miaudit, "load_config", lambda path, overrides, sets=(): fp32)
    monkeypatch.setattr(run.miaudit, "audit", lambda cfg, console: Results(  # what it wrote
        run_dir=run_dir, summary=Summary.model_validate(_record(run_dir / "results.json"))))

    resumed = {**committed, "timing": {**committed["timing"], "train_seconds_this_run": 0.01}}
    write_results(run_dir / "results.json", resumed)
    run.run_experiment("exp", None, "cpu")
    assert _record(folder / "outputs" / "a.results.json") == committed

    changed = {**resumed, "num_models": committed["num_models"] + 8}
    write_results(run_dir / "results.json", changed)
    run.run_experiment("exp", None, "cpu")
    assert _record(folder / "outputs" / "a.results.json") == changed


def test_collect_refuses_in_one_line_a_record_committed_before_records_were_sealed(
        tmp_path, monkeypatch, capsys):
    # Its intervals predate the summary caption's, so rewriting its summary would mislabel
    # them: experiments/run.py --collect names the file, exits 2 and leaves the summary alone.
    run = load_script("experiments/run.py")
    outputs = tmp_path / "exp" / "outputs"
    outputs.mkdir(parents=True)
    (tmp_path / "exp" / "a.yaml").write_text("name: a\n")
    (outputs / "a.results.json").write_text(json.dumps(_record(COMMITTED[0])))  # no digest
    (outputs / "summary.md").write_text("as committed\n")
    monkeypatch.setattr(run, "HERE", tmp_path)
    monkeypatch.setattr("sys.argv", ["run.py", "exp", "--collect"])
    with pytest.raises(SystemExit) as exit_info:
        run.main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "a.results.json predates sealed records" in err
    assert (outputs / "summary.md").read_text() == "as committed\n"


def test_unknown_keys_and_incomplete_layout_2_records_are_refused():
    record = _record(next(p for p in COMMITTED if _record(p).get("layout") == LAYOUT))
    with pytest.raises(ValidationError, match="surprise"):
        Summary.model_validate({**record, "surprise": 1})
    with pytest.raises(ValidationError, match="surprise"):
        Summary.model_validate({**record, "target_models": {**record["target_models"],
                                                            "surprise": 1}})
    without = {key: value for key, value in record.items() if key != "scores_dir"}
    with pytest.raises(ValidationError, match="scores_dir"):
        Summary.model_validate(without)


def test_tpr_at_is_a_fraction_and_none_where_not_measurable():
    # hand-made pooled metrics: TPR 25% at FPR 0.1%, the 0.001% level below 1/non-members
    attack = AttackRecord(
        attack="loss", options={}, per_target=[], per_class={}, min={}, max={},
        pooled={"auc": 0.6, "tpr@0.1%": 0.25, "tpr@0.1%_ci": [0.2, 0.3],
                "tpr@0.001%": 0.5, "tpr@0.001%_measurable": False},
        mean={"auc": 0.61, "tpr@0.1%": 0.24}, std={"auc": 0.01, "tpr@0.1%": 0.02})
    assert attack.tpr_at(1e-3) == 0.25 and attack.tpr_at(1e-3, "mean") == 0.24
    assert attack.tpr_at(1e-5) is None and not attack.measurable("tpr@0.001%")
    assert attack.interval("tpr@0.1%") == [0.2, 0.3]
    assert attack.interval("tpr@0.1%", "simultaneous") is None
    assert attack.value("auc", "std") == 0.01


def _import_cycles(src: Path) -> list[set[str]]:
    """Strongly connected components (more than one module) of miaudit's import graph, every
    import counted (function-level ones too)."""
    modules = {}
    for path in src.rglob("*.py"):
        parts = list(path.relative_to(src).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    edges = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [f"{node.module}.{alias.name}"
                           if f"{node.module}.{alias.name}" in modules else node.module
                           for alias in node.names]
            else:
                continue
            edges[name] |= {t for t in targets if t in modules and t != name}

    def reach(start):
        seen, todo = set(), [start]
        while todo:
            for nxt in edges[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    reachable = {name: reach(name) for name in modules}
    cycles = {frozenset({b for b in reachable[a] if a in reachable[b]} | {a})
              for a in modules if a in reachable[a]}
    return [set(cycle) for cycle in cycles]


@pytest.mark.parametrize("pair", [("miaudit.results.external", "miaudit.results.external_text"),
                                  ("miaudit.reporting.terminal", "miaudit.results"),
                                  ("miaudit.auditor.stages.plan", "miaudit.auditor.text_audit")])
def test_modules_that_imported_each_other_are_in_no_cycle(pair):
    cycles = _import_cycles(ROOT / "src")
    assert not [cycle for cycle in cycles if set(pair) & cycle], cycles


def test_terminal_and_html_name_the_same_strongest_attack():
    """One rule (Summary.strongest): the terminal line and the HTML report's RunView agree on
    every committed run; the terminal names none when no attack measures TPR@0.1%."""
    from miaudit.reporting.run_view import RunView
    from miaudit.reporting.terminal import strongest

    agreed = 0
    for path in COMMITTED:
        summary = Summary.model_validate(_record(path))
        if not summary.attacks:
            continue
        html = RunView(path, summary).best_attack().label
        terminal = strongest(summary)
        assert terminal in (html, None), path
        if terminal is None:
            assert not any(a.measurable("tpr@0.1%") for a in summary.attacks.values())
        else:  # hand check: no measurable attack has a larger pooled TPR@0.1%
            best = summary.attacks[terminal].pooled["tpr@0.1%"]
            assert all(a.pooled["tpr@0.1%"] <= best for a in summary.attacks.values()
                       if a.measurable("tpr@0.1%"))
            agreed += 1
    assert agreed >= 5


def test_an_unmeasurable_attack_ranks_last_whatever_its_value():
    path = next(p for p in COMMITTED if len(_record(p)["attacks"]) >= 2)
    record = _record(path)
    first, second = list(record["attacks"])[:2]
    for label, value, measurable in ((first, 0.9, False), (second, 0.01, True)):
        record["attacks"][label]["pooled"]["tpr@0.1%"] = value
        record["attacks"][label]["pooled"]["tpr@0.1%_measurable"] = measurable
    for label in list(record["attacks"])[2:]:
        del record["attacks"][label]
    summary = Summary.model_validate(record)
    assert summary.strongest() == second
    record["attacks"][second]["pooled"]["tpr@0.1%_measurable"] = False
    summary = Summary.model_validate(record)
    assert summary.strongest(measurable_only=True) is None
    assert summary.strongest() in (first, second)


def test_one_layout_1_detection_for_manifests_and_results():
    from miaudit.auditor.runfiles import record_layout

    assert record_layout({"layout": 2, "attacks": {}}, "results.json") == 2
    assert record_layout({"attacks": {}}, "results.json") == 1  # layout 1 wrote no key
    assert record_layout({"training_hash": "abc"}, "manifest.json") == 1
    assert record_layout({"training_hash": "abc"}, "results.json") is None  # not its marker
    assert record_layout({}, "manifest.json") is None  # hand-cut: neither
    for path in COMMITTED:  # every committed result says which layout wrote it
        assert record_layout(_record(path), "results.json") in (1, LAYOUT)
