"""The ``miaudit`` command line (typer): every command is mounted here, once.

Each command lives in its module (:mod:`.commands`: audit, report, score, plan, config;
:mod:`.compare`; :mod:`.check`: the privacy gate; :mod:`.dp_audit`; :mod:`.privacy`: the DP
accounting group; :mod:`.listings`)
and reports user errors through the one decorator of :mod:`.errors`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from miaudit.cli.check import check
from miaudit.cli.commands import audit, plan, report, score, show_config
from miaudit.cli.compare import compare
from miaudit.cli.dataset_inference import dataset_inference_command
from miaudit.cli.dp_audit import audit_command
from miaudit.cli.errors import fail, user_errors
from miaudit.cli.listings import LISTINGS, devices, listing_command
from miaudit.cli.privacy import app as privacy_app
from miaudit.cli.usage import OneLineErrors
from miaudit.cli.usage_inference import usage

__all__ = ["app", "fail", "main", "user_errors"]

app = typer.Typer(help="Membership-inference privacy audits of neural networks.",
                  no_args_is_help=True, pretty_exceptions_enable=False, cls=OneLineErrors)


def _print_version(value: bool) -> None:
    if value:
        from miaudit.version import __version__

        typer.echo(f"miaudit {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="print miaudit's version and exit")] = False) -> None:
    """Membership-inference privacy audits of neural networks."""


app.command()(audit)
app.command()(report)
app.command()(score)
app.command()(plan)
app.command("config")(show_config)
for _command, (_registry, _title) in LISTINGS.items():
    app.command(_command)(listing_command(_registry, _title))
app.command()(devices)
app.command("dp-audit", help="Canary-based empirical epsilon lower bounds: threat models "
            "final_model | all_iterates; analyses fdp, gaussian, steinke, "
            "clopper_pearson.")(audit_command)
app.add_typer(privacy_app, name="privacy", help="Differential-privacy accounting and bounds.")
app.command()(compare)
app.command("dataset-inference", help="Was a collection of texts trained on? (Maini et al. "
            "2024: attack scores aggregated, then a t-test against held-out texts)")(
    dataset_inference_command)
app.command()(check)
app.command()(usage)


def main() -> None:  # pragma: no cover - console-script entry
    app()
