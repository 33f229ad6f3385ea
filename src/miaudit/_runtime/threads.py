"""How many torch intra-op threads a training process should use by default.

Measured (``benchmarks/threads_bench.py``: small_cnn on digits, engine.fit, batch 64, seconds
per epoch, 7 alternated repeats of 3 epochs) on the 2-core development machine shared with ~6
other busy agents (load average 6.3-7.0): 1 thread 0.376 s/epoch (min 0.255, max 2.22),
2 threads 5.53 s/epoch (min 3.70, max 17.1), i.e. 15x slower; at load 2.0-2.6 (5 repeats):
1 thread 0.070 s/epoch, 2 threads 4.01 s/epoch (57x slower). When cores are oversubscribed the
threads of one operator wait for each other at every barrier (and OpenMP teams spin while they
wait), so a second thread costs far more than it could gain; small models gain little from it
even on an idle machine (their kernels last microseconds, the fork/join per operator is of the
same order). Hence the policy of :func:`default_threads` (the default, ``threads: auto``): one
thread per *free* core (the cores this process may run on, less those other processes keep
busy, measured as the larger of the 1-minute load average and a 0.2 s sample of
``/proc/stat``), at most 4, shared among parallel workers, at least 1: on a 2-core machine with
one busy process that is 1 thread, never 2.

Small models get one thread even on an idle machine (:data:`SMALL_MODEL_FLOPS`): measured on
the idle 2-core machine (2026-12-05, load 0.3-1.0), the default audit (small_cnn on 8x8 digits,
0.6 MFLOPs per sample forward) took 31-34 s wall and 55-61 CPU-s with 2 threads against 36-41 s
and 37-42 CPU-s with 1 (2 threads with ``OMP_WAIT_POLICY=PASSIVE``: 41-43 s, 46-48 CPU-s),
i.e. 15% less wall time for 50% more CPU; a training step of a CIFAR-10 ResNet-14 (90 MFLOPs)
ran 1.92x faster on 2 threads for 1.04x the CPU, small_cnn on CIFAR-10 (11 MFLOPs) 1.53x
for 1.31x.

Reproducibility: CPU kernels may sum in another order with another thread count, so bitwise
equal results across runs need the same ``threads``; set ``threads`` (or ``--threads``) to pin
it, since this default depends on the machine and its load.
"""

from __future__ import annotations

import math
import os
import time

MAX_THREADS = 4
#: forward FLOPs per sample below which a model trains on one thread (thread hand-offs cost
#: about what a second core gives; module docstring)
SMALL_MODEL_FLOPS = 5e6
SAMPLE_SECONDS = 0.2
FREE_SLACK = 0.3  # free = floor(cores - busy + slack): a core busy >= 70% of the time is taken


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


def _cpu_times() -> tuple[float, float] | None:
    """(busy, total) jiffies of all cores from ``/proc/stat``, None where there is none."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = [float(v) for v in handle.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_cores(sample_seconds: float = SAMPLE_SECONDS) -> float:
    """Cores other processes keep busy now: the larger of the 1-minute load average (slow to
    see a job that just started) and the busy share of all cores over ``sample_seconds`` of
    ``/proc/stat`` (this process sleeps meanwhile, so what it sees is the others)."""
    load = machine_load()
    before = _cpu_times()
    if before is None:
        return load
    time.sleep(sample_seconds)
    after = _cpu_times()
    if after is None or after[1] <= before[1]:
        return load
    share = (after[0] - before[0]) / (after[1] - before[1])
    cores = os.cpu_count() or available_cores()
    return max(load, share * cores)


def free_cores(busy: float) -> int:
    """Available cores less ``busy`` ones, rounded so that a core busy 70% or more of the
    time counts as taken (two threads on a 2-core machine with one busy process would wait
    for each other at every operator), at least 1."""
    return max(1, math.floor(available_cores() - busy + FREE_SLACK))


def default_threads(workers: int = 1, load: float | None = None) -> int:
    """torch intra-op threads for ``threads: auto`` (the default): one per free core
    (:func:`free_cores` of ``load``, default :func:`busy_cores` measured now) shared among
    ``workers`` parallel training processes, capped at :data:`MAX_THREADS`, at least 1. An
    explicit ``OMP_NUM_THREADS`` (the user's own choice) wins."""
    explicit = os.environ.get("OMP_NUM_THREADS", "").strip()
    if explicit.isdigit() and int(explicit) > 0:
        return int(explicit)
    free = free_cores(busy_cores() if load is None else load)
    return max(1, min(MAX_THREADS, free // max(1, workers)))


def threads_for_model(threads: int, forward_flops: float) -> int:
    """``threads`` (what :func:`default_threads` chose), or one for a model whose forward pass
    costs less than :data:`SMALL_MODEL_FLOPS` per sample (``forward_flops``; 0: not known,
    ``threads`` kept). An explicit ``OMP_NUM_THREADS`` wins here too."""
    explicit = os.environ.get("OMP_NUM_THREADS", "").strip()
    if explicit.isdigit() and int(explicit) > 0:
        return threads
    return 1 if 0 < forward_flops < SMALL_MODEL_FLOPS else threads
