"""How every command reports an error the user can fix: one line on stderr, exit code 2."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console

from miaudit.errors import MiauditError

errors = Console(stderr=True)
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
    """Decorate a command so that a ``MiauditError``, an ``OSError`` (unwritable or full
    output directory, unreadable data) or one of ``also`` (the errors a command's own
    library raises for bad input, e.g. ``ValueError`` from the accountants) ends it with
    :func:`fail` instead of a traceback. ``functools.wraps`` keeps the signature typer reads."""
    caught = (MiauditError, *also)

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

        return run  # type: ignore[return-value]

    return decorate
