"""How every command reports an error: one the user can fix (:class:`~miaudit.errors.UserError`,
or an ``OSError`` naming a file) as one line on stderr and exit code 2; anything else is a bug
in miaudit: its traceback, one line saying so, exit code 1."""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console

from miaudit.errors import UserError

errors = Console(stderr=True)
BUG_LINE = ("this is a bug in miaudit; please report it to its maintainers with the traceback "
            "above and the command that raised it")
Command = TypeVar("Command", bound=Callable[..., Any])


def fail(error: object) -> typer.Exit:
    """Print a user error on one line (never parsed as markup, never wrapped mid-path) and
    return the exit to raise (code 2)."""
    message = " ".join(str(error).split("\n"))
    # file names that are not UTF-8 (surrogate escapes) print as \xNN, never crash the print
    message = message.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    errors.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(2)


def user_errors(*also: type[Exception]) -> Callable[[Command], Command]:
    """Decorate a command so that a :class:`~miaudit.errors.UserError` (raised where the
    problem is known), an ``OSError`` (unwritable or full output directory, unreadable data)
    or one of ``also`` ends it with :func:`fail` instead of a traceback; any other exception is
    a bug: its traceback, then :data:`BUG_LINE`, exit code 1. ``functools.wraps`` keeps the
    signature typer reads. (``also`` is for plugins' own error types; miaudit's commands pass
    none: a bare ``ValueError`` is not a user error.)"""
    caught = (UserError, *also)

    def decorate(command: Command) -> Command:
        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return command(*args, **kwargs)
            except caught as error:
                raise fail(error) from None
            except OSError as error:
                raise fail(f"{error.strerror or error}: {error.filename or ''}".strip()) \
                    from None
            except (typer.Exit, typer.Abort, KeyboardInterrupt, SystemExit):
                raise
            except Exception as error:
                if _is_click_error(error):  # usage errors: the command group prints them
                    raise
                traceback.print_exc()
                errors.print(BUG_LINE, markup=False, highlight=False, soft_wrap=True)
                raise typer.Exit(1) from None

        return run  # type: ignore[return-value]

    return decorate


def _is_click_error(error: Exception) -> bool:
    return any(cls.__module__.split(".")[0] in ("click", "typer") for cls in type(error).__mro__
               if cls is not Exception)
