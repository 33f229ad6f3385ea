"""Ctrl-C that always stops a command: a SIGINT that lands while a module is being imported
is held until the import has finished.

Why: torch's C initialisation imports numpy and clears any error that import raises, so a
KeyboardInterrupt raised inside it is lost (the command trains on, and the test that presses
Ctrl-C waits forever), and an import cut half-way leaves numpy half-initialised (scipy's import
then fails with a RecursionError). Both were seen with a SIGINT sent in the first second of
``miaudit audit``. The handler below re-sends the signal shortly after, until it lands outside
any import; elsewhere it raises KeyboardInterrupt at once, as Python's default handler does.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

RESEND_AFTER_S = 0.05  # how long a held Ctrl-C waits before it is tried again
IMPORT_MACHINERY = frozenset({"importlib._bootstrap", "importlib._bootstrap_external",
                              "zipimport"})


def importing(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside an import (a frame of the import machinery on its stack)."""
    while frame is not None:
        if frame.f_globals.get("__name__") in IMPORT_MACHINERY:
            return True
        frame = frame.f_back
    return False


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    if importing(frame):
        resend = threading.Timer(RESEND_AFTER_S, os.kill, (os.getpid(), signum))
        resend.daemon = True  # a command that ends first ends as it would have
        resend.start()
        return
    raise KeyboardInterrupt


@contextmanager
def held_during_imports() -> Iterator[None]:
    """Install the handler for the duration (main thread only, and only over Python's default
    handler: a caller's own handler is left alone)."""
    installable = (threading.current_thread() is threading.main_thread()
                   and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    if not installable:
        yield
        return
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
