"""How many torch intra-op threads a training process should use by default.

Measured (benchmarks/threads_bench.py: small_cnn on digits, engine.fit, batch 64, seconds per
epoch, 7 alternated repeats) on the 2-core development machine shared with ~6 other busy
processes (load average 6-8): MEASUREMENT. Small models gain little from a second intra-op
thread even when it is free (their kernels are a few microseconds; the fork/join per operator
is of the same order), and when cores are oversubscribed the threads of one operator wait for
each other at every barrier, so a spinning OpenMP team can lose an order of magnitude (an epoch
seen at 0.09 s went to 1-6 s under contention). Hence: never more threads than cores this
process may run on, at most 4, and 1 when each of several parallel workers trains its own model
(one model per core beats cores-way parallel kernels for narrow networks).
"""

from __future__ import annotations

import os

MAX_THREADS = 4


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity mask, which container CPU sets and
    ``taskset`` restrict; ``os.cpu_count()`` counts the whole machine)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def default_threads(workers: int = 1) -> int:
    """torch intra-op threads when the config leaves ``threads`` unset: the available cores
    shared among ``workers`` parallel training processes, capped at :data:`MAX_THREADS`,
    at least 1. An explicit ``OMP_NUM_THREADS`` (the user's own choice) wins."""
    explicit = os.environ.get("OMP_NUM_THREADS", "").strip()
    if explicit.isdigit() and int(explicit) > 0:
        return int(explicit)
    return max(1, min(MAX_THREADS, available_cores() // max(1, workers)))
