"""The allocator setting (miaudit._runtime.allocator): freed tensor memory is reused, not faulted in
anew from the kernel; the opt-out is honoured; audits and worker processes apply it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import tiny_audit
from miaudit._runtime import allocator
from miaudit.auditor.stages import plan
from miaudit.config import validate_config

# Allocates, fills and frees a 64 MiB tensor (above glibc's largest adaptive mmap threshold)
# after the process worker initializer ran: ten rounds to let the heap settle (torch's
# 64-byte-aligned blocks do not fit the hole the last one left until a few lie side by side),
# then prints the minor page faults of five more rounds: each fresh 4 KiB page costs one.
ROUNDS = """
import resource, torch
from miaudit.executors.processes import _set_threads
_set_threads(1)
for _ in range(10):
    torch.ones(1 << 24)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    torch.ones(1 << 24)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""
PAGES_PER_ROUND = (64 << 20) // 4096


def _page_faults(opt_out: bool) -> int:
    env = {**os.environ, allocator.OPT_OUT_VARIABLE: "0" if opt_out else "1"}
    done = subprocess.run([sys.executable, "-c", ROUNDS], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    return int(done.stdout.split()[-1])


def _huge_pages_always() -> bool:
    """Transparent huge pages for every mapping: faults then come per 2 MiB, not per page."""
    path = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    return path.exists() and "[always]" in path.read_text()


@pytest.mark.skipif(not allocator.runs_on_glibc(),
                    reason="the setting tunes glibc's malloc (Linux) only")
@pytest.mark.skipif(_huge_pages_always(), reason="transparent huge pages 'always': the fault "
                    "count no longer counts 4 KiB pages")
def test_freed_tensor_memory_is_reused_instead_of_faulted_in_again():
    defaults, kept = _page_faults(opt_out=True), _page_faults(opt_out=False)
    assert defaults >= 4 * PAGES_PER_ROUND  # the C library's defaults: fresh pages each round
    assert kept < PAGES_PER_ROUND // 4  # reused: not even a quarter of one round


def test_opt_out_leaves_the_c_library_alone(monkeypatch):
    monkeypatch.setattr(allocator, "_applied", None)
    monkeypatch.setenv(allocator.OPT_OUT_VARIABLE, "0")
    assert allocator.keep_freed_memory() is False


def test_planning_an_audit_applies_it(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(plan, "keep_freed_memory", lambda: calls.append(True))
    plan.plan_audit(validate_config(tiny_audit(tmp_path)))
    assert calls == [True]
