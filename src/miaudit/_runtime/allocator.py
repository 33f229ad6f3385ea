"""Keep the memory of freed tensors in the process instead of handing it back to the kernel
after every batch (glibc's malloc on Linux; elsewhere nothing changes).

torch allocates CPU tensors with the C library's malloc. glibc serves a request above its
mmap threshold (at most 32 MiB however much it adapts) with a fresh mmap and unmaps it on
free, and trims the top of its heap once 128 KiB lie free there; so every batch's large
activations arrive as new pages, each zero-filled by the kernel on its first touch. A spiking
net's query batch (T = 4 steps folded into 512 images) makes ~270 MB activations: measured
(``benchmarks/allocator_bench.py``, 2-core AMD EPYC, 1 thread) the kernel spent 2.5x the
CPU time of the forward itself on page faults. Raising both thresholds with ``mallopt`` keeps
freed blocks for the next batch: the numbers are bit-identical, the process keeps its peak
heap until it exits. jemalloc or tcmalloc (``LD_PRELOAD``) would do the same, but need a
system library and an environment set before Python starts; this needs neither.
"""

from __future__ import annotations

import ctypes
import os
import platform

#: glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: blocks below this come from the reusable heap (larger ones are rare one-off arrays, which
#: mmap hands back at once); mallopt takes an int, so at most 2 GiB
KEEP_BELOW_BYTES = 1 << 30
#: free heap kept before trimming (mallopt's int maximum)
TRIM_ABOVE_BYTES = (1 << 31) - 1
#: set to 0 to leave the C library's defaults alone
OPT_OUT_VARIABLE = "MIAUDIT_KEEP_FREED_MEMORY"

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process (once); True where they are
    raised, False where the C library is not glibc, mallopt refuses, or the user opted out
    (``MIAUDIT_KEEP_FREED_MEMORY=0``)."""
    global _applied
    if _applied is None:
        _applied = _apply()
    return _applied


def kept() -> bool:
    """Whether this process raised the thresholds (what its timings were measured with)."""
    return _applied is True


def runs_on_glibc() -> bool:
    """Whether this process's C library is glibc on Linux (the only one the setting tunes)."""
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def _apply() -> bool:
    if os.environ.get(OPT_OUT_VARIABLE, "").strip() == "0" or not runs_on_glibc():
        return False
    try:
        libc = ctypes.CDLL(None)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, KEEP_BELOW_BYTES)
                    and libc.mallopt(M_TRIM_THRESHOLD, TRIM_ABOVE_BYTES))
    except (OSError, AttributeError):
        return False
