"""The commands on runs: ``audit``, ``report``, ``score`` and ``config``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from miaudit.cli.errors import errors, user_errors
from miaudit.errors import MiauditError

# Piped output (files, CI logs) gets a wide console so attack labels stay on one line.
console = Console() if sys.stdout.isatty() else Console(width=160)

_FLAG_FIELDS = {
    "dataset": "data.name", "data_dir": "data.data_dir", "pool_size": "data.pool_size",
    "model": "model.name", "width": "model.width", "recipe": "train.recipe",
    "epochs": "train.epochs", "batch_size": "train.batch_size", "lr": "train.lr",
    "num_models": "num_models", "seed": "seed", "device": "device",
    "output_dir": "output_dir", "name": "name", "protocol": "protocol", "threads": "threads",
    "executor": "executor.name",  # beside --set executor.workers=4 etc.
}


def _overrides(flags: dict[str, Any], sets: list[str], attacks: str | None,
               queries: str | None) -> dict[str, Any]:
    from miaudit.config import parse_set_items

    overrides = {_FLAG_FIELDS[k]: (str(v) if isinstance(v, Path) else v)
                 for k, v in flags.items() if v is not None}
    if attacks:
        overrides["attacks"] = [a.strip() for a in attacks.split(";") if a.strip()]
    if queries:
        overrides["queries"] = [q.strip() for q in queries.split(";") if q.strip()]
    overrides.update(parse_set_items(sets))
    return overrides


@user_errors()
def audit(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML config file; "
                      "the embedded default (digits, small CNN, 16 models) when omitted.")] = None,
    dataset: Annotated[str | None, typer.Option(help="data.name")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="data.data_dir")] = None,
    pool_size: Annotated[int | None, typer.Option(help="data.pool_size")] = None,
    model: Annotated[str | None, typer.Option(help="model.name")] = None,
    width: Annotated[float | None, typer.Option(help="model.width")] = None,
    recipe: Annotated[str | None, typer.Option(help="train.recipe")] = None,
    epochs: Annotated[int | None, typer.Option(help="train.epochs")] = None,
    batch_size: Annotated[int | None, typer.Option(help="train.batch_size")] = None,
    lr: Annotated[float | None, typer.Option(help="train.lr")] = None,
    num_models: Annotated[int | None, typer.Option(help="num_models")] = None,
    protocol: Annotated[str | None, typer.Option(help="rotation | fixed_target")] = None,
    seed: Annotated[int | None, typer.Option(help="seed")] = None,
    device: Annotated[str | None, typer.Option(help="auto | cpu | cuda[:i] | mps")] = None,
    output_dir: Annotated[Path | None, typer.Option(help="output_dir")] = None,
    name: Annotated[str | None, typer.Option(help="run name")] = None,
    attacks: Annotated[str | None, typer.Option(help="';'-separated attack specs, e.g. "
                       "'loss;lira:offline=true'")] = None,
    queries: Annotated[str | None,
                       typer.Option(help="';'-separated query specs or presets")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="any field: key.path=value "
                    "(YAML value), repeatable")] = None,
    executor: Annotated[str | None, typer.Option(help="local | processes (a worker pool here) "
                        "| ray (a local Ray cluster); options with --set executor.workers=4, "
                        "executor.address=auto etc.")] = None,
    threads: Annotated[str | None, typer.Option(help="torch intra-op threads; default auto: one "
                       "per core that no other process keeps busy (measured when the audit "
                       "starts); a number pins it")]
    = None,
    quiet: Annotated[bool, typer.Option(help="no progress bars")] = False,
    wait: Annotated[bool, typer.Option(help="wait for another process working in the same "
                    "run directory instead of stopping")] = False,
) -> None:
    """Train the model family, attack every target, print the table, write the run directory.
    Rerunning resumes; raising --num-models or adding queries reuses every finished model."""
    from miaudit.auditor.stages import audit as run_audit
    from miaudit.config import load_config
    from miaudit.reporting.terminal import print_summary

    flags = {k: v for k, v in locals().items() if k in _FLAG_FIELDS}
    cfg = load_config(config, _overrides(flags, set_ or [], attacks, queries))
    results = run_audit(cfg, console=errors, show_progress=not quiet, wait=wait)
    print_summary(results.summary, console)


@user_errors()
def report(run_dir: Annotated[Path, typer.Argument(help="a run directory, or a results.json "
                                                     "record kept without its run directory")],
           plots: Annotated[bool, typer.Option(help="re-render roc.png (and the DP-bound "
                            "plot) from the stored scores")] = False,
           html: Annotated[bool, typer.Option("--html", help="also write RUN/report.html")] = False
           ) -> None:
    """Print the table of a finished run from its directory (read-only unless --plots or
    --html).

    Given a results.json file instead (e.g. ``experiments/.../outputs/X.results.json``), it
    prints the table and, with --html, writes ``X.report.html`` beside it: everything the
    record holds (settings, the attack table with its intervals, accuracy, per-class leakage),
    without the ROC curves and exposed samples, which need the run's per-sample scores.
    """
    from miaudit.reporting.terminal import missing_report_note, print_summary, render_plots
    from miaudit.results import load_summary

    if run_dir.is_file() and run_dir.suffix == ".json":  # a kept record
        _report_record(run_dir, plots=plots, html=html)
        return
    summary = load_summary(run_dir).model_copy(update={"run_dir": str(run_dir)})
    if plots:
        render_plots(run_dir, summary)
    print_summary(summary, console)
    if not (plots or html) and (note := missing_report_note(run_dir, summary)):
        console.print(note, markup=False, soft_wrap=True)
    if html:  # the self-contained HTML report (miaudit.reporting)
        from miaudit.cli.compare import html_report

        written = html_report(run_dir, summary)
        console.print(f"HTML report: {written}", markup=False)


def _report_record(path: Path, *, plots: bool, html: bool) -> None:
    """``miaudit report X.results.json``: the table and the HTML report of a kept record."""
    from miaudit.reporting.html import write_html_report
    from miaudit.reporting.terminal import print_summary
    from miaudit.results import parse_summary, read_results

    if plots:
        raise MiauditError(f"{path} is a record without its run's scores: --plots needs the "
                           "run directory")
    summary = parse_summary(read_results(path), path)
    print_summary(summary, console)
    if html:
        stem = path.name.removesuffix(".json").removesuffix(".results")
        written = write_html_report(path.parent, summary, out=path.with_name(f"{stem}.report.html"))
        console.print(f"HTML report: {written} (no ROC curves or exposed samples: the record "
                      "keeps no per-sample scores)", markup=False)


@user_errors()
def score(
    source: Annotated[Path | None, typer.Argument(help="an official-LiRA experiment folder "
                      "(one folder per model with keep.npy and logits/) or one bundle file "
                      "(.npz / .safetensors with keep, logits, labels)")] = None,
    keep: Annotated[list[Path] | None, typer.Option(help="keep (M, N) bool file, or one (N,) "
                    "file per model (repeat)")] = None,
    logits: Annotated[list[Path] | None, typer.Option(help="logits (M, N, Q, C) / (M, N, C) "
                      "file, or one per model (repeat)")] = None,
    labels: Annotated[Path | None, typer.Option(help="labels (N,) file")] = None,
    population: Annotated[Path | None, typer.Option(help="(P,) indices of samples no model "
                          "trained on: the attacker's population data, never scored")] = None,
    attacks: Annotated[str | None, typer.Option(help="';'-separated attack specs (default: "
                       "the default audit's suite, less the attacks that need population "
                       "data when none is given; for token log-probs the text suite)")] = None,
    query_names: Annotated[str | None, typer.Option(help="';'-separated names of the logits' "
                           "queries, in order (e.g. 'identity;shift:dx=1'): accuracy is "
                           "measured on 'identity'; a bundle may hold them ('queries' array "
                           "in a .npz, 'query_names' metadata in a .safetensors)")] = None,
    out: Annotated[Path, typer.Option(help="run directory to write")] = Path("runs/scored"),
    epoch: Annotated[int | None, typer.Option(help="LiRA layout: logits of this epoch "
                     "(default: the latest)")] = None,
    balance: Annotated[str, typer.Option(help="samples IN for all or no models: error | warn "
                       "| ignore")] = "warn",
) -> None:
    """Score attacks over outputs produced elsewhere (same table, results.json, plots and
    per-sample scores as an audit)."""
    from miaudit.config import DEFAULT_ATTACKS
    from miaudit.reporting.terminal import print_summary
    from miaudit.results.external import read_any, read_outputs, read_population
    from miaudit.results.scoring import score_outputs

    specs = [a.strip() for a in attacks.split(";") if a.strip()] if attacks else None
    names = [q.strip() for q in query_names.split(";") if q.strip()] if query_names else None
    indices = None if population is None else read_population(population)
    if source is not None:
        folder = {**({"epoch": epoch} if epoch is not None else {}),
                  **({"labels": labels} if labels is not None else {})}
        outputs = read_any(source, population=indices, balance=balance,
                           **({"query_names": names} if names else {}),
                           **(folder if source.is_dir() else {}))
    elif keep and logits and labels is not None:
        outputs = read_outputs(keep if len(keep) > 1 else keep[0],
                               logits if len(logits) > 1 else logits[0], labels,
                               balance=balance, population=indices, query_names=names)
    else:
        raise MiauditError("give a LiRA folder or bundle file, or --keep, --logits and "
                           "--labels")
    if specs is None:  # the default suite of the outputs' kind
        from miaudit.auditor.text_audit import default_text_attacks

        specs = default_text_attacks(outputs, indices is not None) \
            if outputs.modality == "text" else without_population(list(DEFAULT_ATTACKS),
                                                                  indices is not None)
    results = score_outputs(outputs, specs, out, population=indices,
                            name=out.name)
    print_summary(results.summary, console)


def without_population(specs: list, has_population: bool) -> list:
    """The default suite less the attacks that need population data when none is given,
    with one line saying which."""
    from miaudit.config import attack_label, build_attack

    if has_population:
        return specs
    needing = [s for s in specs if build_attack(s).needs_population]
    if needing:
        console.print(f"note: skipping {', '.join(attack_label(s)[0] for s in needing)} "
                      "(they need population data: pass --population)", markup=False,
                      highlight=False)
    return [s for s in specs if s not in needing]


@user_errors()
def plan(run_dir: Annotated[Path, typer.Argument(help="a finished audit's directory")]) -> None:
    """How many reference models the audit needs: re-score its reference-based attacks with
    2, 4, 8, ... references (TPR@0.1%/1% with intervals, AUC) and extrapolate where another
    doubling stops mattering; stored in results.json (reference_planner)."""
    from miaudit.analysis.reference_planner import format_plan, plan_run
    from miaudit.reporting.html import REPORT_FILE, write_html_report

    for line in format_plan(plan_run(run_dir)):
        console.print(line, markup=False, highlight=False)
    if (run_dir / REPORT_FILE).exists():  # keep an existing report in step with results.json
        console.print(f"HTML report: {write_html_report(run_dir)}", markup=False)


@user_errors()
def show_config(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML config file")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="key.path=value")] = None,
    check: Annotated[bool, typer.Option(help="also load the data and dry-build every model, "
                                        "as the audit does before training, so that option "
                                        "values the config alone cannot judge are checked")]
    = True,
) -> None:
    """Print the resolved config (the defaults when no file is given) as YAML."""
    from miaudit.config import load_config

    cfg = load_config(config, _overrides({}, set_ or [], None, None))
    if check:  # the audit's own plan stage: it writes nothing
        from miaudit.auditor.stages.plan import plan_audit

        plan_audit(cfg)
    console.print(cfg.to_yaml(), markup=False, highlight=False, soft_wrap=True)
