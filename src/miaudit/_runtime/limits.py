"""Bounds on the work a config may ask for before anything starts (forward passes, training
epochs, ...): a default per kind, raised by an environment variable. No torch here: config
validation reads them.
"""

from __future__ import annotations

import os


def work_limit(name: str, default: float) -> float:
    """The bound on an amount of work (forward passes, training epochs, ...) that a config
    may ask for before anything starts: ``default``, or environment variable
    ``MIAUDIT_MAX_<NAME>`` (e.g. ``MIAUDIT_MAX_FORWARD_PASSES=1e13``) for who means it."""
    raw = os.environ.get(f"MIAUDIT_MAX_{name.upper()}")
    if raw is None:
        return float(default)
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"MIAUDIT_MAX_{name.upper()}={raw!r} is not a number") from None
