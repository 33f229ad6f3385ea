"""``miaudit compare`` and the helpers of ``miaudit report --html``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from miaudit.cli.errors import errors, user_errors

if TYPE_CHECKING:
    from miaudit.results import Summary

console = Console() if sys.stdout.isatty() else Console(width=200)


@user_errors()
def compare(
    run_dirs: Annotated[list[Path], typer.Argument(help="run directories (or results.json "
                                                   "files)")],
    html: Annotated[Path | None, typer.Option("--html", help="also write this self-contained "
                                              "HTML page with a privacy-utility plot")] = None,
    attacks: Annotated[str | None, typer.Option(help="';'-separated attack labels as in the "
                                                "runs' tables (labels may hold commas), e.g. "
                                                "'lira;rmia'; default: every attack the runs "
                                                "have in common")] = None,
    paired: Annotated[bool, typer.Option("--paired", help="also each run minus the first with "
                                         "the paired 95% interval of the difference (runs with "
                                         "the same memberships: same data, seed, models, "
                                         "protocol; needs their run directories)")] = False,
) -> None:
    """Compare runs: one row per run (labelled by what differs between their configs), target
    accuracy and gap, and per attack TPR@0.1% FPR [95% CI], TPR@1% FPR and AUC."""
    from miaudit.reporting.compare import comparison, load_views, rich_table, write_compare_html

    chosen = [a.strip() for a in attacks.split(";") if a.strip()] if attacks else None
    table = comparison(load_views(run_dirs), chosen)
    console.print(rich_table(table))
    paired_page = ""
    if paired:
        from miaudit.reporting.paired_table import paired_html, paired_rows, paired_table

        labels = [f"{number}. {label}" for number, label in enumerate(table.labels, start=1)]
        rows = paired_rows(table.views, labels, table.attacks)
        console.print(paired_table(rows))
        paired_page = paired_html(rows)
    if html is not None:
        console.print(f"HTML comparison: {write_compare_html(table, html, paired_page)}",
                      markup=False)


def html_report(run_dir: Path, summary: Summary) -> Path:
    """``miaudit report --html``: the exposed samples when the run lacks them (rebuilt from the
    run's own data, best effort), then the HTML report."""
    from miaudit.auditor.runfiles import EXPOSED_FILE
    from miaudit.reporting.html import write_html_report

    # outputs made elsewhere have no inputs to show
    if not summary.external and not (Path(run_dir) / EXPOSED_FILE).exists():
        try:
            exposed_from_config(Path(run_dir), summary)
        except Exception as error:  # the report is still useful without thumbnails
            errors.print(f"no exposed samples ({type(error).__name__}: {error})", markup=False)
    if not summary.external and not (Path(run_dir) / "records.csv").exists():
        try:
            records_from_config(Path(run_dir), summary)
        except Exception as error:  # the report is still useful without them
            errors.print(f"no per-record risk ({type(error).__name__}: {error})", markup=False)
    return write_html_report(run_dir, summary)


def records_from_config(run_dir: Path, summary: Summary) -> None:
    """records.csv for a run made before the audit wrote it (labels from the run's pool)."""
    from miaudit.auditor.rundir import RunDir
    from miaudit.auditor.stages.plan import load_pool
    from miaudit.auditor.stages.report import write_run_records
    from miaudit.config import validate_config
    from miaudit.reporting.run_view import RunView

    pool = load_pool(validate_config(RunView(run_dir, summary).config))
    audited = RunDir(run_dir).read_split()["audited"]
    write_run_records(run_dir, summary, pool.y.numpy()[audited], list(pool.class_names))


def exposed_from_config(run_dir: Path, summary: Summary) -> Path:
    """Rebuild the run's pool from its config and write exposed.npz for its strongest attack
    (the audit's report stage writes it directly; this serves runs made before it did)."""
    from miaudit.auditor.modality import modality_of
    from miaudit.auditor.rundir import RunDir
    from miaudit.auditor.stages.plan import load_pool
    from miaudit.config import validate_config
    from miaudit.reporting.exposed import write_exposed_samples
    from miaudit.reporting.run_view import RunView

    view = RunView(run_dir, summary)
    pool = load_pool(validate_config(view.config))
    audited = RunDir(run_dir).read_split()["audited"]
    best = view.best_attack().label
    x = pool.x.numpy()[audited] if pool.is_image else None
    return write_exposed_samples(run_dir, view.scores(best), view.members, x,
                                 pool.y.numpy()[audited], pool.class_names, attack=best,
                                 texts=modality_of(pool).texts(pool, audited))
