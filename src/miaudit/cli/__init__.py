"""The ``miaudit`` command line (typer): every command is mounted here, once.

Each command lives in its module (:mod:`.commands`: audit, report, score, plan, config;
:mod:`.compare`; :mod:`.dp_audit`; :mod:`.privacy`: the DP accounting group; :mod:`.listings`)
and reports user errors through the one decorator of :mod:`.errors`.
"""

from __future__ import annotations

import typer

from miaudit.cli.commands import audit, parse_set_items, plan, report, score, show_config
from miaudit.cli.compare import compare
from miaudit.cli.dp_audit import audit_command
from miaudit.cli.errors import fail, user_errors
from miaudit.cli.listings import LISTINGS, devices, listing_command
from miaudit.cli.privacy import app as privacy_app
from miaudit.cli.usage import OneLineErrors

__all__ = ["app", "fail", "main", "parse_set_items", "user_errors"]

app = typer.Typer(help="Membership-inference privacy audits of neural networks.",
                  no_args_is_help=True, pretty_exceptions_enable=False, cls=OneLineErrors)


def _version(value: bool) -> None:
    if value:
        from miaudit.version import __version__

        typer.echo(f"miaudit {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_version,
                                          is_eager=True, help="print the version and exit")
             ) -> None:
    """Membership-inference privacy audits of neural networks."""


app.command()(audit)
app.command()(report)
app.command()(score)
app.command()(plan)
app.command("config")(show_config)
for _command, (_registry, _title) in LISTINGS.items():
    app.command(_command)(listing_command(_registry, _title))
app.command()(devices)
app.command("dp-audit", help="Canary-based empirical epsilon lower bounds (Steinke et al. 2023 "
            "one run, or Jagielski et al. 2020 with R runs).")(audit_command)
app.add_typer(privacy_app, name="privacy", help="Differential-privacy accounting and bounds.")
app.command()(compare)


def main() -> None:  # pragma: no cover - console-script entry
    app()
