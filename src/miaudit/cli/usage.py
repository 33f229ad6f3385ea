"""Command-line usage errors (a bad option type, an unknown flag) on one line.

Typer prints click's usage errors in a box that rich wraps to the terminal's width, or, without
rich, as three lines (usage, hint, error). miaudit promises one ``error:`` line and exit code 2
for every error a user can fix, whatever the terminal width, so the command group runs click in
non-standalone mode and prints those errors itself."""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import typer
import typer.core
from typer.core import TyperGroup

from miaudit.cli.errors import fail
from miaudit.cli.interrupts import held_during_imports

# the click that typer runs on: recent typer vendors it as typer._click, earlier ones import it
_click = getattr(typer.core, "_click", None) or importlib.import_module("click")
_ClickException = _click.exceptions.ClickException
_NoArgsIsHelp = getattr(_click.exceptions, "NoArgsIsHelpError", ())  # click >= 8.2
INTERRUPTED = 130  # the exit code of a process ended by SIGINT, as shells report it
_Abort = (getattr(_click.exceptions, "Abort", typer.Abort), typer.Abort)


class OneLineErrors(TyperGroup):
    """The top-level command group: usage errors as ``error: <message>``, exit code 2."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        shown = warnings.showwarning
        if not recording_warnings():  # a caller that records warnings keeps them
            warnings.showwarning = one_line_warning
        try:
            with held_during_imports():
                self._main_standalone(*args, **kwargs)
        finally:
            warnings.showwarning = shown

    def _main_standalone(self, *args: Any, **kwargs: Any) -> None:
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except _NoArgsIsHelp as error:
            error.show()  # the help text, as click prints it
            sys.exit(error.exit_code)
        except _ClickException as error:
            fail(error.format_message())
            sys.exit(error.exit_code)
        except KeyboardInterrupt:
            interrupted()
        except _Abort as error:
            if isinstance(error.__cause__, KeyboardInterrupt):
                interrupted()
            print("Aborted!", file=sys.stderr)
            sys.exit(1)
        if code == INTERRUPTED:  # typer turns Ctrl-C into Exit(130), returned here
            interrupted()
        sys.exit(code if isinstance(code, int) else 0)


def interrupted() -> None:
    """Ctrl-C: one line (the run directories keep what each stage finished, so the same
    command resumes), exit code 130 as a shell reports SIGINT."""
    print("interrupted: rerun the same command to resume", file=sys.stderr)
    sys.exit(INTERRUPTED)


PACKAGE = str(Path(__file__).resolve().parents[1])
_PRINTING = getattr(warnings, "_showwarnmsg_impl", None)  # how Python prints, unrecorded


def recording_warnings() -> bool:
    """True inside ``warnings.catch_warnings(record=True)`` (a test, a library user)."""
    return getattr(warnings, "_showwarnmsg_impl", None) is not _PRINTING


def one_line_warning(message: Warning | str, category: type[Warning], filename: str,
                     lineno: int, file: Any = None, line: str | None = None) -> None:
    """How the command line shows a warning: miaudit's own as one ``warning:`` line (no
    source line); a library's internal ones (torch, opacus, transformers...: nothing a user
    of miaudit can act on) not at all, unless ``MIAUDIT_WARNINGS=all``."""
    ours = str(Path(filename).resolve()).startswith(PACKAGE)
    if not ours and os.environ.get("MIAUDIT_WARNINGS", "") != "all":
        return
    where = "" if ours else f" ({Path(filename).name}:{lineno})"
    print(f"warning: {' '.join(str(message).split())}{where}", file=file or sys.stderr)
