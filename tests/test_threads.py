"""Default torch thread count: affinity-bounded, capped, shared among workers, env wins."""

from __future__ import annotations

import os

import pytest

from miaudit._runtime import threads


@pytest.fixture
def cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

    def set_cores(count: int) -> None:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(count)),
                            raising=False)
    return set_cores


@pytest.mark.parametrize(("count", "workers", "expected"), [
    (1, 1, 1), (2, 1, 2), (3, 1, 3), (16, 1, 4), (64, 1, 4),  # capped at MAX_THREADS
    (16, 8, 2), (16, 16, 1), (2, 4, 1),  # cores shared among parallel workers, at least 1
])
def test_default_threads(cores, count, workers, expected):
    cores(count)
    assert threads.available_cores() == count
    assert threads.default_threads(workers, load=0.0) == expected


def test_an_oversubscribed_machine_gets_one_thread(cores):
    cores(8)
    assert threads.default_threads(load=7.9) == 4
    assert threads.default_threads(load=8.0) == 1  # every core already busy


def test_explicit_omp_num_threads_wins(cores, monkeypatch):
    cores(16)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    assert threads.default_threads(load=100.0) == 7
    monkeypatch.setenv("OMP_NUM_THREADS", "not a number")
    assert threads.default_threads(load=0.0) == 4
