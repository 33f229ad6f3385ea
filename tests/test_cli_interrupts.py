"""Ctrl-C always stops a command, even when it lands inside an import whose caller clears the
error (torch's C initialisation does so with numpy's import): `miaudit.cli.interrupts`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from conftest import REPO, sigint_as_a_terminal_sends_it, tiny_audit
from miaudit.cli.interrupts import held_during_imports, importing

# Imported, this module interrupts its own process, then finishes importing (a slow import).
INTERRUPTING_MODULE = """
import os, signal, time
os.kill(os.getpid(), signal.SIGINT)
time.sleep(0.3)
FINISHED = True
"""


def _import_swallowing_errors(name: str) -> None:
    """What torch's C initialisation does with numpy's import: any error, even
    KeyboardInterrupt, is cleared and the caller carries on."""
    try:
        __import__(name)
    except BaseException:
        pass


@pytest.fixture
def interrupting_module(tmp_path, monkeypatch):
    name = f"interrupting_{os.getpid()}_{time.monotonic_ns()}"
    (tmp_path / f"{name}.py").write_text(INTERRUPTING_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_without_the_handler_an_interrupt_inside_a_swallowing_import_is_lost(
        interrupting_module, sigint_delivered):
    # the defect itself, with Python's default handler: the import is cut short and the
    # KeyboardInterrupt vanishes (the command would run on)
    _import_swallowing_errors(interrupting_module)
    time.sleep(0.2)
    assert interrupting_module not in sys.modules  # cut half-way, and nothing raised


def test_with_the_handler_it_surfaces_once_the_import_has_finished(interrupting_module,
                                                                   sigint_delivered):
    with held_during_imports(), pytest.raises(KeyboardInterrupt):
        _import_swallowing_errors(interrupting_module)
        assert sys.modules[interrupting_module].FINISHED  # the import ran to its end
        time.sleep(2.0)  # the held Ctrl-C lands here
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored


def test_outside_imports_it_raises_at_once(sigint_delivered):
    started = time.monotonic()
    with held_during_imports(), pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(2.0)
    assert time.monotonic() - started < 1.0


def test_a_callers_own_handler_is_left_alone(sigint_delivered):
    seen = []
    previous = signal.signal(signal.SIGINT, lambda *_: seen.append(1))
    try:
        with held_during_imports():
            assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
        assert seen == [1]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_importing_sees_the_import_machinery_on_the_stack(tmp_path, monkeypatch):
    (tmp_path / "frame_probe.py").write_text("import sys\nFRAME = sys._getframe()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import frame_probe

    try:
        assert importing(frame_probe.FRAME.f_back)  # its caller: importlib's exec_module
        assert not importing(sys._getframe())
    finally:
        sys.modules.pop("frame_probe", None)


def test_ctrl_c_in_the_first_second_of_an_audit_stops_it(tmp_path):
    # Before: a SIGINT ~0.4 s after the start (inside `import torch`) hung the command in about
    # one run in ten, or ended it with a RecursionError from a half-imported numpy.
    config = tiny_audit(tmp_path, train={"epochs": 100000, "batch_size": 32, "lr": 0.01})
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    for delay in (0.3, 0.45, 0.6, 1.0):
        process = subprocess.Popen(
            [sys.executable, "-m", "miaudit.cli", "audit", "--config", str(path), "--quiet"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=sigint_as_a_terminal_sends_it)
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
        # Before the CLI's own code runs (importing typer), Python's default ending applies.
        last = err.strip().splitlines()[-1]
        assert process.returncode in (130, -signal.SIGINT), (delay, process.returncode, err)
        assert last in ("interrupted: rerun the same command to resume", "KeyboardInterrupt"), (
            delay, err)
