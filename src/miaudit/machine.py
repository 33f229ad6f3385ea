"""What the machine offers, asked once in one place: its physical memory (the planners refuse
an audit whose score stage would not fit, before any training)."""

from __future__ import annotations

import os


def physical_memory_bytes() -> int:
    """The machine's physical memory (POSIX sysconf), or 64 GiB where it cannot be asked."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # not POSIX (Windows)
        return 64 << 30
