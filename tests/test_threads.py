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
    assert threads.default_threads(load=3.9) == 4
    assert threads.default_threads(load=5.0) == 3  # three free cores
    assert threads.default_threads(load=7.9) == 1  # every core busy but a tenth of one
    assert threads.default_threads(load=8.0) == 1


@pytest.mark.parametrize(("busy", "expected"), [(0.0, 2), (0.2, 2), (0.75, 1), (1.0, 1),
                                                (1.6, 1), (5.0, 1)])
def test_two_cores_one_busy_never_get_two_threads(cores, busy, expected):
    """The issue-76 case: a 2-core machine where another process keeps one core busy got
    torch's 2 threads, which spin and wait for each other (6 minutes instead of 1)."""
    cores(2)
    assert threads.default_threads(load=busy) == expected


def test_busy_cores_sees_a_job_the_load_average_has_not_caught_up_with(monkeypatch):
    """/proc/stat sampled: 150 of 200 jiffies busy on 2 cores = 1.5 busy cores, though the
    1-minute load average still reads 0.1."""
    samples = iter([(1000.0, 5000.0), (1150.0, 5200.0)])
    monkeypatch.setattr(threads, "_cpu_times", lambda: next(samples))
    monkeypatch.setattr(threads, "machine_load", lambda: 0.1)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert threads.busy_cores(sample_seconds=0.0) == pytest.approx(1.5)


def test_busy_cores_falls_back_to_the_load_average_without_proc_stat(monkeypatch):
    monkeypatch.setattr(threads, "_cpu_times", lambda: None)
    monkeypatch.setattr(threads, "machine_load", lambda: 0.7)
    assert threads.busy_cores(sample_seconds=0.0) == 0.7


def test_explicit_omp_num_threads_wins(cores, monkeypatch):
    cores(16)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    assert threads.default_threads(load=100.0) == 7
    assert threads.threads_for_model(7, forward_flops=0.6e6) == 7  # a small model too
    monkeypatch.setenv("OMP_NUM_THREADS", "not a number")
    assert threads.default_threads(load=0.0) == 4


def test_a_small_model_trains_on_one_thread_and_a_large_one_on_the_free_cores(cores):
    cores(4)
    small, large = 0.6e6, 90e6  # forward FLOPs: small_cnn on 8x8 digits, ResNet-14 on CIFAR-10
    chosen = threads.default_threads(load=0.0)
    assert chosen == 4
    assert threads.threads_for_model(chosen, small) == 1
    assert threads.threads_for_model(chosen, large) == 4
    assert threads.threads_for_model(chosen, 0.0) == 4  # size not known


def test_the_forward_flops_of_a_known_layer_are_counted():
    import torch

    from miaudit.auditor.stages.plan import forward_flops
    from miaudit.data import Pool

    pool = Pool(x=torch.zeros(5, 3), y=torch.zeros(5, dtype=torch.long), num_classes=2,
                class_names=["a", "b"])
    # a (3 -> 2) linear layer: 2 * 3 * 2 FLOPs (multiply and add) per sample
    assert forward_flops(torch.nn.Linear(3, 2), pool) == 12


@pytest.mark.parametrize(("overrides", "expected"), [
    ({}, 1),  # the default audit: small_cnn on 8x8 digits, 0.6 MFLOPs per sample
    ({"data": {"name": "synthetic", "options": {"shape": [3, 32, 32], "n_train": 64,
                                                "n_test": 16}}}, 4),  # 11 MFLOPs
])
def test_the_audit_plans_threads_by_its_model_size(tmp_path, monkeypatch, cores, overrides,
                                                     expected):
    import torch

    from miaudit.auditor.stages.plan import plan_audit
    from miaudit.config import validate_config

    cores(4)
    monkeypatch.setattr(threads, "busy_cores", lambda: 0.0)  # an idle 4-core machine
    before = torch.get_num_threads()
    try:
        plan_audit(validate_config({"device": "cpu", "output_dir": str(tmp_path),
                                    **overrides}))
        assert torch.get_num_threads() == expected
    finally:
        torch.set_num_threads(before)
