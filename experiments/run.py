"""Run the committed experiments and collect their outputs.

    python experiments/run.py papers/C/rotation          # one experiment (or C/rotation)
    python experiments/run.py --list
    python experiments/run.py papers/A/headline --data-dir DATA --set model.width=1  # GPU scale
    python experiments/run.py A/headline --only 5_sdenet_sigma2  # one config, same summary

Each experiment is a folder with one or more ``*.yaml`` audit configs, named by its path under
``experiments/`` (``papers/<paper>/<study>``, ``archive/<name>``; ``papers/`` may be left
out). The audits run with the
normal pipeline (run directories under ``runs/experiments``, resumable), then ``results.json``
(written compactly), the plots and a ``summary.md`` table are copied into the experiment's
``outputs/`` folder. Committed: results.json, summary.md, kept scores and figures; the per-run
``roc.png`` and the HTML pages are not (``.gitignore``): ``miaudit report
outputs/X.results.json --html`` renders a record's report again. Pass ``--data-dir`` for data
sets that need one (CIFAR-10 copy).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

import miaudit
from miaudit import Summary
from miaudit.errors import ConfigError, MiauditError, RunDirError

HERE = Path(__file__).resolve().parent
#: The flat names before experiments/ was laid out by paper (issue 24): where each went.
MOVED = {
    "cifar10_small": "archive/cifar10_small", "defenses": "archive/defenses",
    "defenses_cifar10": "archive/defenses_cifar10", "demem": "archive/demem",
    "digits_default": "archive/digits_default", "dp_study": "archive/dp_study",
    "fidelity_before_after": "archive/fidelity_before_after", "ode_study": "archive/ode_study",
    "paper_a_blocks_solvers": "papers/A/blocks_solvers", "paper_a_defenses": "papers/A/defenses",
    "paper_a_floor": "papers/A/floor", "paper_a_headline": "papers/A/headline",
    "paper_a_replace_finetune": "papers/A/replace_finetune", "paper_a_seeds": "papers/A/seeds",
    "paper_a_variants": "papers/A/variants", "paper_b_demem": "papers/B/pgd_at_demem",
    "paper_b_fast_at": "papers/B/fast_at", "paper_b_memorization": "papers/B/memorization",
    "paper_c_rotation": "papers/C/rotation", "paper_c_snn": "archive/paper_c_snn",
    "snn_study": "archive/snn_study"}


def run_experiment(name: str, data_dir: Path | None, device: str,
                   threads: int | None = None, sets: list[str] = (),
                   only: list[str] | None = None, collect: bool = False,
                   allow_slow_bf16: bool = False) -> Path:
    """Run the experiment's configs (``only``: those stems; the others' rows come from their
    committed outputs) and write ``outputs/``; ``collect``: run none, only rewrite the summary
    and comparison page from the committed outputs (e.g. results made on another machine);
    ``allow_slow_bf16``: run bf16 configs where bfloat16 has no kernels too."""
    folder = HERE / name
    outputs = folder / "outputs"
    overrides = {"output_dir": str(HERE.parent / "runs" / "experiments"), "device": device,
                 **({"threads": threads} if threads else {})}
    if data_dir is not None:
        overrides["data.data_dir"] = str(data_dir)
    configs = sorted(folder.glob("*.yaml"))
    to_run = {} if collect else {path: miaudit.load_config(path, overrides, sets=sets)
                                 for path in configs if not only or path.stem in only}
    for cfg in to_run.values():  # all refused before the first one trains
        check_bf16_kernels(cfg, allow_slow_bf16)
    outputs.mkdir(exist_ok=True)
    rows = []
    for config_file in configs:
        if config_file not in to_run:
            if (row := committed_row(outputs, config_file.stem)) is not None:
                rows.append(row)
            continue
        results = miaudit.audit(to_run[config_file], console=Console(stderr=True))
        stem = config_file.stem
        if reproduces_committed(outputs, stem, results):
            # a resumed run that remade the committed result: keep the record of the run that
            # made it (its timing says what training and querying cost, not this resume's);
            # the analyses results.json does not hold are refreshed (a newer miaudit's)
            copy_artefacts(results.run_dir, outputs, stem, ANALYSES)
            rows.append(committed_row(outputs, stem))
            continue
        copy_artefacts(results.run_dir, outputs, stem,
                       ("results.json", "roc.png", "roc_dp_bound.png", *ANALYSES, "report.html"))
        compact_json(outputs / f"{stem}.results.json")
        rows.append((stem, results.run_dir, results.summary))
    # each row from its run directory (read and verified there) or its committed record; with
    # several rows, the papers' kind of table across the configs as a page too
    table = miaudit.compare([source for _, source, _ in rows],
                            html=outputs / "compare.html" if len(rows) > 1 else None)
    (outputs / "summary.md").write_text(markdown(table, rows))
    return outputs


ANALYSES = ("memorization.json", "memorization.png")  # derived from a run, not in results.json


def copy_artefacts(run_dir: Path, outputs: Path, stem: str, names: tuple[str, ...]) -> None:
    for artefact in names:
        if (run_dir / artefact).exists():
            shutil.copy(run_dir / artefact, outputs / f"{stem}.{artefact}")


def compact_json(path: Path) -> None:
    """Rewrite a JSON record without indentation (a third of the bytes; the digest covers the
    parsed content, so the record still verifies)."""
    path.write_text(json.dumps(json.loads(path.read_text()), separators=(",", ":")) + "\n")


def reproduces_committed(outputs: Path, stem: str, results: miaudit.Results) -> bool:
    """Whether ``results`` hold the same result as the committed ``stem.results.json`` (all
    but when, where and how fast it was made)."""
    path = outputs / f"{stem}.results.json"
    return path.exists() and results.reproduces(miaudit.Results.load(path))


def committed_row(outputs: Path, stem: str) -> tuple[str, Path, Summary] | None:
    """(stem, source, summary) of a config not rerun: its committed results.json, read from
    its run directory when that still holds this result, else from the committed file itself
    (a run made on another machine, e.g. a GPU, or a run directory rescored since)."""
    path = outputs / f"{stem}.results.json"
    if not path.exists():
        return None
    committed = miaudit.Results.load(path)  # schema and digest checked
    if committed.digest is None:
        # Written by an older miaudit whose intervals the summary's caption no longer
        # describes: rewriting its summary would mislabel them.
        raise RunDirError(f"{path} predates sealed records (no digest), so its summary stays "
                          "as committed; rerun the whole experiment (no --only, no --collect) "
                          "to remake both")
    run_dir = Path(committed.summary.run_dir)
    return stem, (run_dir if holds(run_dir, committed) else path), committed.summary


def holds(run_dir: Path, committed: miaudit.Results) -> bool:
    """Whether ``run_dir`` still holds the ``committed`` result (not rescored since)."""
    try:
        return miaudit.Results.load(run_dir).reproduces(committed)
    except RunDirError:  # gone, damaged or of an older layout
        return False


def markdown(table: str, rows: list[tuple[str, Path, Summary]]) -> str:
    """The comparison ``table`` of the experiment's runs (:func:`miaudit.compare`: every
    attack they share; TPR@0.1% with its 95% CI), then a line per config: accuracy, size,
    time, robust accuracy, DP guarantee."""
    notes = [f"- {stem}: {summary.model_line()}; {len(summary.targets)} target(s), "
             f"{summary.num_models} models, pool {summary.pool_size}, "
             f"{summary.target_models.train_seconds_mean:.1f} s/model, this run "
             f"{_seconds_this_run(summary)} s{_on_device(summary)}" + extra_note(summary)
             for stem, _, summary in rows]
    return table + "\n" + "\n".join(notes) + "\n"


def _seconds_this_run(summary: Summary) -> float | str:
    return "n/a" if summary.timing is None else summary.timing.total_seconds_this_run


def _on_device(summary: Summary) -> str:
    """' on cuda' for a run timed on an accelerator (the times are not CPU times)."""
    device = None if summary.timing is None else summary.timing.device
    return "" if device in (None, "cpu") else f" on {device}"


def extra_note(summary: Summary) -> str:
    """Robust accuracy (adversarial training) and the DP guarantee, when the audit has them."""
    stats, parts = summary.target_models, []
    if stats.test_robust_acc is not None:
        parts.append(f"natural/robust (PGD) acc: train {100 * stats.train_natural_acc:.1f}/"
                     f"{100 * stats.train_robust_acc:.1f}%, test "
                     f"{100 * stats.test_natural_acc:.1f}/{100 * stats.test_robust_acc:.1f}%")
    if summary.privacy is not None:
        parts.append(summary.privacy_line())
    return "".join(f"; {part}" for part in parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads per process (1 is fastest on a loaded machine)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field in every config of the experiment (YAML "
                             "value), e.g. --set model.width=1 for the papers' scale")
    parser.add_argument("--only", action="append", default=[], metavar="STEM",
                        help="run only this config (repeatable); the summary keeps the others' "
                             "committed rows")
    parser.add_argument("--slow-bf16", action="store_true",
                        help="run bf16 configs even where bfloat16 has no kernels (~10x slower)")
    parser.add_argument("--collect", action="store_true",
                        help="run nothing: rewrite outputs/summary.md and compare.html from the "
                             "committed results.json files")
    args = parser.parse_args()
    available = experiments()
    if args.list or not args.names:
        print("\n".join(available))
        return
    for given in args.names:
        name = resolve(given, available)
        try:
            outputs = run_experiment(name, args.data_dir, args.device, args.threads,
                                     args.sets, args.only, args.collect,
                                     args.slow_bf16)
        except MiauditError as error:  # bad input or a damaged record: one line, exit 2
            print(f"{name}: {error}", file=sys.stderr)
            raise SystemExit(2) from None
        print(json.dumps({"experiment": name, "outputs": str(outputs)}))


def check_bf16_kernels(cfg: Any, allow_slow: bool) -> None:
    """Refuse a config that trains a model (target, reference or a parent either starts from)
    in bf16 where bfloat16 has no kernels (``miaudit._runtime.machine.slow_bf16``): ~10x slower than
    fp32, and ~30x slower than the costs experiments/README.md plans with (2026-12-01: an AVX2
    CPU, 20 minutes lost before a model finished)."""
    if not allow_slow and (reason := cfg.slow_bf16_reason()) is not None:
        raise ConfigError(f"{reason}; or pass --slow-bf16")


def experiments() -> list[str]:
    """Every experiment: the folders under ``experiments/`` that hold audit configs."""
    return sorted({str(path.parent.relative_to(HERE)) for path in HERE.glob("**/*.yaml")
                   if "outputs" not in path.parts and path.parent != HERE})


def resolve(given: str, available: list[str]) -> str:
    """An experiment's name as given (``papers/C/rotation``, ``C/rotation``, a trailing slash
    or an ``experiments/`` prefix allowed), or exit naming the available ones."""
    name = given.strip("/").removeprefix("experiments/")
    for candidate in (name, f"papers/{name}"):
        if candidate in available:
            return candidate
    if name in MOVED:
        raise SystemExit(f"experiment {given!r} moved to {MOVED[name]!r}: run.py {MOVED[name]}")
    raise SystemExit(f"unknown experiment {given!r}; available: {', '.join(available)}")



if __name__ == "__main__":
    main()
