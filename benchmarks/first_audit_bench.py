"""Time to first result: the default audit (``miaudit audit``, every setting at its default)
against the same audit pinned to one torch thread (``--threads 1``), alternated, each run in a
fresh output directory; wall seconds and CPU seconds (user + system of the child, as
``/usr/bin/time`` counts them), medians over repeats, with the load average around each run.
``--busy`` keeps one core busy with a spinning process meanwhile (the issue-76 case: a 2-core
machine with another job).

    PYTHONPATH=src python benchmarks/first_audit_bench.py --repeats 3 [--busy]

Targets (issue 76): under load the default costs <= 1.3x the CPU seconds of ``--threads 1``;
on an idle 2-core machine <= 40 s wall and <= 40 CPU-s.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from record import recorded

SETTINGS = {"default": [], "--threads 1": ["--threads", "1"]}


def spin() -> None:
    while True:
        pass


@contextmanager
def busy_core(enabled: bool) -> Iterator[None]:
    if not enabled:
        yield
        return
    process = multiprocessing.Process(target=spin, daemon=True)
    process.start()
    try:
        yield
    finally:
        process.terminate()
        process.join()


def one_audit(extra: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, load average at the start) of one audit in a fresh output directory;
    the environment's OMP_NUM_THREADS is removed (it would override the default)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "miaudit.cli", "audit", "--quiet", "--output-dir",
                        out, *extra], env=env, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--busy", action="store_true", help="one spinning process meanwhile")
    args = parser.parse_args()
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in SETTINGS}
    with busy_core(args.busy):
        for _ in range(args.repeats):
            for name, extra in SETTINGS.items():
                runs[name].append(one_audit(extra))
                wall, cpu, load = runs[name][-1]
                print(f"  {name}: {wall:.1f} s wall, {cpu:.1f} CPU-s (load {load:.1f})",
                      flush=True)
    print(f"\n{os.cpu_count()} cores, busy process: {'yes' if args.busy else 'no'}, "
          f"{args.repeats} alternated runs each\n")
    print("| setting | wall s (median) | CPU-s (median) | load at start |")
    print("| --- | ---: | ---: | --- |")
    for name, values in runs.items():
        loads = [v[2] for v in values]
        print(f"| {name} | {statistics.median(v[0] for v in values):.1f} | "
              f"{statistics.median(v[1] for v in values):.1f} | "
              f"{min(loads):.1f}-{max(loads):.1f} |")
    ratio = (statistics.median(v[1] for v in runs["default"])
             / statistics.median(v[1] for v in runs["--threads 1"]))
    print(f"\nCPU-s ratio default / --threads 1: {ratio:.2f} (target <= 1.3)")


if __name__ == "__main__":
    with recorded(__file__):
        main()
