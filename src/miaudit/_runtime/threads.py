"""How many torch intra-op threads a training process should use by default.

Measured (``benchmarks/threads_bench.py``: small_cnn on digits, engine.fit, batch 64, seconds
per epoch, 7 alternated repeats of 3 epochs) on the 2-core development machine shared with ~6
other busy agents (load average 6.3-7.0): 1 thread 0.376 s/epoch (min 0.255, max 2.22),
2 threads 5.53 s/epoch (min 3.70, max 17.1), i.e. 15x slower; at load 2.0-2.6 (5 repeats):
1 thread 0.070 s/epoch, 2 threads 4.01 s/epoch (57x slower). When cores are oversubscribed the
threads of one operator wait for each other at every barrier (and OpenMP teams spin while they
wait), so a second thread costs far more than it could gain; small models gain little from it
even on an idle machine (their kernels last microseconds, the fork/join per operator is of the
same order). Hence the policy of :func:`default_threads`: never more threads than cores this
process may run on, at most 4, shared among parallel workers, and 1 when other processes
already keep every core busy.

Reproducibility: CPU kernels may sum in another order with another thread count, so bitwise
equal results across runs need the same ``threads``; set ``threads`` (or ``--threads``) to pin
it, since this default depends on the machine and its load.
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


def machine_load() -> float:
    """1-minute load average (runnable processes), 0 where the platform has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def default_threads(workers: int = 1, load: float | None = None) -> int:
    """torch intra-op threads when the config leaves ``threads`` unset: 1 when the machine is
    already oversubscribed (``load``, default the 1-minute load average, at least the number of
    cores), else the available cores shared among ``workers`` parallel training processes,
    capped at :data:`MAX_THREADS`, at least 1. An explicit ``OMP_NUM_THREADS`` (the user's
    own choice) wins."""
    explicit = os.environ.get("OMP_NUM_THREADS", "").strip()
    if explicit.isdigit() and int(explicit) > 0:
        return int(explicit)
    cores = available_cores()
    if (machine_load() if load is None else load) >= cores:
        return 1
    return max(1, min(MAX_THREADS, cores // max(1, workers)))
