"""Executors: the local one's contract, the config section, and the Ray one on a real two-node
Ray cluster started on loopback (skipped when Ray is not installed)."""

from __future__ import annotations

import importlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pydantic
import pytest
import torch

try:
    import ray
except ImportError:  # the Ray tests skip; the rest does not need it
    ray = None

from miaudit.executors import (
    ExecutorConfig,
    Job,
    JobFailedError,
    LocalExecutor,
    LocalRef,
    ProcessExecutor,
    make_executor,
    resolve,
)

REPO = Path(__file__).resolve().parents[1]


# -- a work function both executors run: a tiny seeded MLP trained for a few steps -------------
def tiny_work(job: Job) -> dict[str, Any]:
    """Train a 8-16-3 MLP for ``steps`` full-batch SGD steps from seed ``seed`` on the shared
    data; return its weights and outputs. Side channels for the failure tests: a mark file per
    attempt (``<index>-<pid>-<uuid>``), ``hold`` (first attempt waits to be killed), ``fail``
    ("once": the first attempt raises; "always"), ``after`` (wait until that job has started)."""
    p = job.payload
    attempt = _mark_attempt(p.get("marks"), job.index)
    if p.get("after") is not None:  # start only once job `after` runs (ordering for a test)
        deadline = time.monotonic() + 20
        while not list(Path(p["marks"]).glob(f"{p['after']}-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
    if p.get("fail") == "always" or (p.get("fail") == "once" and attempt == 1):
        raise ValueError(f"job {job.index} failed on attempt {attempt}")
    if p.get("hold") and attempt == 1:
        deadline = time.monotonic() + 30  # the test kills this process well before that
        while time.monotonic() < deadline:
            time.sleep(0.1)
    x, y = (torch.tensor(a) for a in resolve(p["data"]))  # copies: Ray's arrays are read-only
    torch.manual_seed(p["seed"])
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(p.get("steps", 20)):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    with torch.no_grad():
        outputs = model(x).numpy()
    return {"weights": {k: v.numpy() for k, v in model.state_dict().items()},
            "outputs": outputs, "pid": os.getpid(), "node": _ray_node()}


def _mark_attempt(marks: str | None, index: int) -> int:
    """Record this attempt; return its number (1 for the first)."""
    if marks is None:
        return 1
    # unique name: Ray may retry a task in the very process that ran the failed attempt
    Path(marks, f"{index}-{os.getpid()}-{uuid.uuid4().hex}").write_text(str(_ray_node()))
    return len(list(Path(marks).glob(f"{index}-*")))


def _ray_node() -> str | None:
    if "ray" not in sys.modules:
        return None
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


def synthetic_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 1).astype(np.int64)


def run_collect(executor: Any, jobs: list[Job]) -> tuple[dict[int, Any], list[tuple[str, int]]]:
    results: dict[int, Any] = {}
    events: list[tuple[str, int]] = []

    def on_done(job: Job, result: Any, seconds: float) -> None:
        assert seconds >= 0
        results[job.index] = result
        events.append(("done", job.index))

    executor.run(jobs, tiny_work, on_done, lambda job: events.append(("start", job.index)))
    return results, events


def same_model(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (np.array_equal(a["outputs"], b["outputs"])
            and a["weights"].keys() == b["weights"].keys()
            and all(np.array_equal(a["weights"][k], b["weights"][k]) for k in a["weights"]))


# -- LocalExecutor ---------------------------------------------------------------------------
def test_local_runs_in_order_and_reports_in_driver() -> None:
    executor = LocalExecutor()
    data = executor.put(synthetic_data())
    jobs = [Job(i, {"data": data, "seed": 10 + i}) for i in range(3)]
    results, events = run_collect(executor, jobs)
    assert events == [("start", 0), ("done", 0), ("start", 1), ("done", 1), ("start", 2),
                      ("done", 2)]
    assert all(results[i]["pid"] == os.getpid() for i in range(3))  # in-process
    again = tiny_work(jobs[1])
    assert same_model(results[1], again)  # seeded: reruns agree bit for bit ...
    assert not same_model(results[1], results[2])  # ... and seeds matter


def test_local_failure_names_the_job_and_stops(tmp_path: Path) -> None:
    data = LocalRef(synthetic_data())
    jobs = [Job(0, {"data": data, "seed": 0, "marks": str(tmp_path)}),
            Job(1, {"data": data, "seed": 1, "marks": str(tmp_path), "fail": "always"}),
            Job(2, {"data": data, "seed": 2, "marks": str(tmp_path)})]
    done: list[int] = []
    with pytest.raises(JobFailedError, match="job 1 failed") as info:
        LocalExecutor().run(jobs, tiny_work, lambda job, result, s: done.append(job.index))
    assert info.value.index == 1 and isinstance(info.value.cause, ValueError)
    assert info.value.__cause__ is info.value.cause
    assert done == [0]
    assert sorted(p.name.split("-")[0] for p in tmp_path.iterdir()) == ["0", "1"]  # 2 never ran


# -- ProcessExecutor ---------------------------------------------------------------------------
def test_processes_run_in_workers_and_match_local() -> None:
    executor = ProcessExecutor(2)
    data = executor.put(synthetic_data())
    jobs = [Job(i, {"data": data, "seed": 10 + i}) for i in range(3)]
    results, events = run_collect(executor, jobs)
    assert sorted(events) == sorted((kind, i) for i in range(3) for kind in ("start", "done"))
    assert all(events.index(("start", i)) < events.index(("done", i)) for i in range(3))
    assert all(results[i]["pid"] != os.getpid() for i in range(3))  # not in the driver
    local, _ = run_collect(LocalExecutor(), jobs)
    assert all(same_model(results[i], local[i]) for i in range(3))


def test_processes_failure_names_the_job_and_stops_the_rest(tmp_path: Path) -> None:
    # Job 1 holds its worker for 30 s; job 0 fails once job 1 runs; jobs 2-7 wait in the queue.
    # The failure must surface at once, the holding worker be ended, the queue not run.
    data = LocalRef(synthetic_data())
    marks = str(tmp_path)
    jobs = [Job(0, {"data": data, "seed": 0, "marks": marks, "fail": "always", "after": 1}),
            Job(1, {"data": data, "seed": 1, "marks": marks, "hold": True}),
            *(Job(i, {"data": data, "seed": i, "marks": marks}) for i in range(2, 8))]
    started = time.monotonic()
    with pytest.raises(JobFailedError, match="job 0 failed") as info:
        ProcessExecutor(2).run(jobs, tiny_work, lambda job, result, s: None)
    assert time.monotonic() - started < 25  # did not wait for the holding job
    assert isinstance(info.value.cause, ValueError)
    ran = [p.name.split("-") for p in tmp_path.iterdir()]
    indices = sorted(index for index, *_ in ran)
    # the pool hands one job beyond its workers to a worker queue ahead of time (job 2 may
    # start in job 0's freed worker before the driver cancels); the rest never ran
    assert indices in (["0", "1"], ["0", "1", "2"])
    holder = next(int(pid) for index, pid, _ in ran if index == "1")
    deadline = time.monotonic() + 10
    while _alive(holder) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(holder), "the running job's worker still runs"


def test_resolve_passes_plain_values_through() -> None:
    value = [1, 2]
    assert resolve(value) is value
    assert resolve(LocalRef(value)) is value


# -- config section ----------------------------------------------------------------------------
def test_executor_config_accepts_the_documented_forms() -> None:
    assert ExecutorConfig.model_validate("local").name == "local"
    cfg = ExecutorConfig.model_validate({"name": "ray", "address": "ray://head:10001",
                                         "gpus_per_model": 0.25, "cpus_per_model": 2,
                                         "max_retries": 3})
    assert (cfg.address, cfg.gpus_per_model, cfg.cpus_per_model, cfg.max_retries) == (
        "ray://head:10001", 0.25, 2.0, 3)
    assert ExecutorConfig.model_validate({"name": "ray", "address": None}).address is None
    assert isinstance(make_executor(None), LocalExecutor)
    assert isinstance(make_executor("local"), LocalExecutor)
    pool = make_executor({"name": "processes", "workers": 3, "threads_per_model": 2})
    assert isinstance(pool, ProcessExecutor)
    assert (pool.workers, pool.threads_per_model) == (3, 2)


@pytest.mark.parametrize("spec", [
    {"name": "ray", "gpus": 1},                       # unknown key
    {"name": "local", "gpus_per_model": 1},           # cluster option under local
    {"name": "local", "workers": 4},                  # pool option under local
    {"name": "processes", "gpus_per_model": 0.5},     # Ray option under processes
    {"name": "processes", "workers": 0},
    {"name": "ray", "workers": 4},
    {"name": "ray", "gpus_per_model": -1},
    {"name": "ray", "cpus_per_model": 0},
    {"name": "ray", "max_retries": "2"},              # strict: no str -> int coercion
    "dask",
])
def test_executor_config_rejects(spec: Any) -> None:
    with pytest.raises(pydantic.ValidationError):
        ExecutorConfig.model_validate(spec)


def test_missing_ray_gives_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail
    monkeypatch.delitem(sys.modules, "miaudit.executors.ray", raising=False)
    with pytest.raises(ImportError, match=r"miaudit\[ray\]"):
        importlib.import_module("miaudit.executors.ray")
    with pytest.raises(ImportError, match=r"miaudit\[ray\]"):
        make_executor("ray")


# -- RayExecutor on a real two-node cluster -------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _process_tree(roots: list[int]) -> list[int]:
    """``roots`` and all their descendants, from /proc (Ray's workers are children of the
    raylets, which are children of the `ray start --block` launchers)."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path("/proc", entry, "stat").read_text()
            except OSError:
                continue
            children[int(stat.rsplit(")", 1)[1].split()[1])].append(int(entry))
    found, stack = [], list(roots)
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


class LoopbackCluster:
    """A head and a worker node, each one CPU, started with `ray start --block` so that every
    Ray process of the test descends from two launchers this test owns. Teardown kills exactly
    that process tree by pid (not `ray stop --force`, which would kill every Ray process on the
    machine, other users' included)."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="mir", dir="/tmp"))  # short: socket paths
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.launchers: list[subprocess.Popen] = []
        # Recent Ray turns token auth on when a ~/.ray/auth_token exists (a plain ray.init()
        # writes one), and nodes and driver must agree. A driver process reads its auth mode
        # once, at `import ray`, so it cannot take up a per-test token; the throwaway
        # loopback cluster therefore runs with auth explicitly off, whatever ~/.ray holds.
        self.auth = {"RAY_AUTH_MODE": "disabled"}
        self.env = {**os.environ, **self.auth, "RAY_USAGE_STATS_ENABLED": "0",
                    # what "miaudit installed on every node" means here: workers import the
                    # package and this test module (tiny_work is pickled by reference)
                    "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO / "tests")])}

    def start(self) -> None:
        common = ["--num-cpus=1", "--node-ip-address=127.0.0.1", "--object-store-memory=80000000",
                  "--block"]
        self._launch("head", ["--head", f"--port={self.port}", "--include-dashboard=false",
                              f"--dashboard-port={_free_port()}",
                              f"--temp-dir={self.tmp}", *common])
        self._launch("worker", [f"--address={self.address}", *common])

    def _launch(self, name: str, args: list[str]) -> None:
        log = self.tmp / f"{name}.log"
        with open(log, "wb") as out:
            self.launchers.append(subprocess.Popen(
                [sys.executable, "-m", "ray.scripts.scripts", "start", *args], env=self.env,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + 90
        while b"Ray runtime started" not in log.read_bytes():
            if self.launchers[-1].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start ({name}) failed:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

    def stop(self, extra_pids: list[int]) -> None:
        pids = _process_tree([p.pid for p in self.launchers]) + extra_pids
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for launcher in self.launchers:
            launcher.wait(timeout=30)


@pytest.fixture(scope="module")
def cluster() -> Any:
    if ray is None:
        pytest.skip("Ray is not installed (pip install 'miaudit[ray]')")
    if not sys.platform.startswith("linux"):
        pytest.skip("the loopback cluster's cleanup reads /proc")
    from miaudit.executors.ray import RayExecutor

    loopback = LoopbackCluster()
    killed: list[int] = []
    connection = RayExecutor(loopback.address)
    saved = {key: os.environ.get(key) for key in loopback.auth}
    try:
        loopback.start()
        os.environ.update(loopback.auth)  # the driver authenticates like the nodes
        connection.connect()  # the executors below reuse this driver connection
        deadline = time.monotonic() + 60
        while sum(node["Alive"] for node in ray.nodes()) < 2:
            assert time.monotonic() < deadline, "worker node never joined"
            time.sleep(0.2)
        yield loopback, killed
    finally:
        connection.close()
        loopback.stop(killed)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _kill_when_started(marks: Path, index: int, killed: list[int]) -> threading.Thread:
    """Kill (SIGKILL, by pid) the Ray worker process running job ``index``'s first attempt."""
    def kill() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            started = sorted(marks.glob(f"{index}-*"))
            if started:
                pid = int(started[0].name.split("-")[1])
                killed.append(pid)
                os.kill(pid, signal.SIGKILL)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_ray_matches_local_and_survives_a_killed_worker(cluster: Any, tmp_path: Path) -> None:
    from miaudit.executors.ray import RayExecutor

    _, killed = cluster
    data = synthetic_data()
    local = LocalExecutor()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each Ray task does: same kernels, same bits
    try:
        expected, _ = run_collect(local, [Job(i, {"data": local.put(data), "seed": 100 + i})
                                          for i in range(4)])
    finally:
        torch.set_num_threads(threads)

    executor = RayExecutor(cluster[0].address, cpus_per_model=1, max_retries=2)
    shared = executor.put(data)
    assert type(shared).__name__ == "RayRef"
    marks = tmp_path / "marks"
    marks.mkdir()
    jobs = [Job(i, {"data": shared, "seed": 100 + i, "marks": str(marks), "hold": i == 1})
            for i in range(4)]
    killer = _kill_when_started(marks, 1, killed)
    results, events = run_collect(executor, jobs)
    killer.join()

    assert sorted(results) == [0, 1, 2, 3]
    for i in range(4):
        assert same_model(results[i], expected[i]), f"job {i} differs from the local run"
        assert events.index(("start", i)) < events.index(("done", i))
    assert len(killed) == 1 and results[1]["pid"] != killed[0]  # retried in a new process
    assert len(list(marks.glob("1-*"))) == 2
    assert len({p.read_text() for p in marks.iterdir()}) == 2  # both nodes ran jobs
    assert all(results[i]["pid"] != os.getpid() for i in range(4))


@pytest.mark.slow
def test_ray_retries_a_raising_job(cluster: Any, tmp_path: Path) -> None:
    from miaudit.executors.ray import RayExecutor

    executor = RayExecutor(cluster[0].address, max_retries=1)
    data = executor.put(synthetic_data())
    jobs = [Job(i, {"data": data, "seed": i, "marks": str(tmp_path), "fail": "once"})
            for i in range(2)]
    results, _ = run_collect(executor, jobs)
    assert sorted(results) == [0, 1]
    assert sorted(p.name.split("-")[0] for p in tmp_path.iterdir()) == ["0", "0", "1", "1"]


@pytest.mark.slow
def test_ray_failure_cancels_the_rest_and_names_the_job(cluster: Any, tmp_path: Path) -> None:
    from miaudit.executors.ray import RayExecutor

    executor = RayExecutor(cluster[0].address, max_retries=1, max_in_flight=1)
    data = executor.put(synthetic_data())
    jobs = [Job(0, {"data": data, "seed": 0, "marks": str(tmp_path), "fail": "always"})]
    jobs += [Job(i, {"data": data, "seed": i, "marks": str(tmp_path)}) for i in (1, 2)]
    done: list[int] = []
    with pytest.raises(JobFailedError, match="job 0 failed after 2 attempt") as info:
        executor.run(jobs, tiny_work, lambda job, result, s: done.append(job.index))
    assert info.value.index == 0
    assert isinstance(info.value.cause, ValueError)
    assert "attempt 2" in str(info.value.cause)  # the retry ran and failed too
    assert done == []
    assert sorted(p.name.split("-")[0] for p in tmp_path.iterdir()) == ["0", "0"]  # 1, 2 never


def _alive(pid: int) -> bool:
    try:
        return Path("/proc", str(pid), "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_ray_failure_kills_the_running_jobs(cluster: Any, tmp_path: Path) -> None:
    from miaudit.executors.ray import RayExecutor

    _, killed = cluster
    executor = RayExecutor(cluster[0].address, max_retries=0, max_in_flight=2)
    data = executor.put(synthetic_data())
    jobs = [Job(0, {"data": data, "seed": 0, "marks": str(tmp_path), "fail": "always",
                    "after": 1}),
            Job(1, {"data": data, "seed": 1, "marks": str(tmp_path), "hold": True})]
    done: list[int] = []
    started = time.monotonic()
    with pytest.raises(JobFailedError, match="job 0 failed after 1 attempt"):
        executor.run(jobs, tiny_work, lambda job, result, s: done.append(job.index))
    assert time.monotonic() - started < 25  # did not wait for job 1's 30 s hold
    holders = [int(p.name.split("-")[1]) for p in tmp_path.glob("1-*")]
    assert len(holders) == 1  # job 1 was running when job 0 failed
    killed.extend(holders)  # teardown's safety net, should cancellation leave one behind
    deadline = time.monotonic() + 15
    while any(_alive(pid) for pid in holders) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in holders), "the cancelled job's worker still runs"
    assert done == []


def test_an_audit_on_processes_equals_the_local_audit(tmp_path: Path) -> None:
    """The train and query stages through a pool of two worker processes: same models, same
    outputs (a stochastic query too: its seed travels with the job), same numbers."""
    from conftest import tiny_audit
    from miaudit.auditor.stages import audit
    from miaudit.config import validate_config

    queries = ["identity", "dropout:p=0.1,n=2"]
    local = audit(validate_config(tiny_audit(tmp_path / "local", share_models=False,
                                             queries=queries)), show_progress=False)
    pooled = audit(validate_config(tiny_audit(
        tmp_path / "pool", share_models=False, queries=queries,
        executor={"name": "processes", "workers": 2})), show_progress=False)
    for index in range(4):
        name = f"models/{index:04d}/weights.safetensors"
        assert (local.run_dir / name).read_bytes() == (pooled.run_dir / name).read_bytes()
        outputs = sorted((local.run_dir / f"models/{index:04d}/outputs").glob("*.safetensors"))
        assert len(outputs) == 2
        for output in outputs:
            twin = pooled.run_dir / output.relative_to(local.run_dir)
            assert output.read_bytes() == twin.read_bytes()
    for label in ("loss", "lira"):
        assert pooled.attacks[label].pooled == local.attacks[label].pooled


def test_an_audit_on_ray_equals_the_local_audit(cluster: Any, tmp_path: Path) -> None:
    """The train and query stages through a real two-node cluster: same models, same
    numbers."""
    from conftest import tiny_audit
    from miaudit.auditor.stages import audit
    from miaudit.config import validate_config

    local = audit(validate_config(tiny_audit(tmp_path / "local", share_models=False)),
                  show_progress=False)
    on_ray = audit(validate_config(tiny_audit(
        tmp_path / "ray", share_models=False,
        executor={"name": "ray", "address": cluster[0].address, "threads_per_model": 1})),
        show_progress=False)
    for index in range(4):
        for name in (f"models/{index:04d}/weights.safetensors",
                     *(str(path.relative_to(local.run_dir)) for path in
                       (local.run_dir / f"models/{index:04d}/outputs").glob("*.safetensors"))):
            assert (local.run_dir / name).read_bytes() == (on_ray.run_dir / name).read_bytes()
    for label in ("loss", "lira"):
        assert on_ray.attacks[label].pooled == local.attacks[label].pooled


def test_stored_weights_travel_as_their_content(tmp_path: Path) -> None:
    """A query job names its weights file; pickled for a worker it carries the state dict
    itself (workers need not see the run directory), read at that moment, not before."""
    import pickle

    import torch

    from miaudit._runtime.io import write_tensors
    from miaudit.auditor.stages.query import StoredWeights

    path = tmp_path / "weights.safetensors"
    weights = StoredWeights(path)  # no file yet: nothing is read when the job is made
    state = {"layer.weight": torch.arange(6.0).reshape(2, 3), "layer.bias": torch.ones(2)}
    write_tensors(path, state)
    shipped = pickle.loads(pickle.dumps(weights))
    assert isinstance(shipped, dict) and shipped.keys() == state.keys()
    assert all(torch.equal(shipped[name], state[name]) for name in state)
    assert all(torch.equal(weights.load()[name], state[name]) for name in state)
