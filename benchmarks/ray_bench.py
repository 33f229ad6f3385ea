"""Wall time of the default audit's training stage (16 small_cnn models on the 8x8 digits, the
default config's recipe) under the LocalExecutor and the RayExecutor.

    nice -n 10 python benchmarks/ray_bench.py --repeats 3

Local: in-process, one model after another, torch's default thread count (today's pipeline)
or ``--local-threads``.
Ray: a Ray instance started on this machine with ``--workers`` CPUs, one CPU and
``threads_per_model`` (1) torch thread per model, the pool put into the object store once.
Each model is trained as pipeline.train_one does (seeded architecture, standard recipe on the
model's IN half of the rotation keep matrix, then its identity-query logits on the whole pool).
Reported: median and all wall times of ``run`` (Ray start-up listed apart), and the largest
logit difference between the two executors (bitwise equal only at equal thread counts).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import torch
from record import recorded

from miaudit import DATASETS, RECIPES
from miaudit.auditor.design import make_plan, model_seed
from miaudit.data import make_pool
from miaudit.executors import Job, LocalExecutor, resolve
from miaudit.models import build_model
from miaudit.queries import query_outputs
from miaudit.training import TrainEnv, TrainParams

# the embedded default config's train section (src/miaudit/configs/default.yaml)
PARAMS = dict(batch_size=64, optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=5e-4,
              schedule="cosine")


def train_model(job: Job) -> dict[str, Any]:
    """One model of the plan: train on its IN half, return weights and pool logits."""
    p = job.payload
    x, y = (torch.from_numpy(np.array(a)) for a in resolve(p["pool"]))  # writable copies
    member = torch.from_numpy(np.array(p["keep"]))
    torch.manual_seed(p["seed"])
    model = build_model("small_cnn", input_shape=tuple(x.shape[1:]), num_classes=10, width=1.0)
    recipe = RECIPES.build("standard", penalties=[])
    params = TrainParams(epochs=p["epochs"], **PARAMS)
    model, _ = recipe.train(model, x[member], y[member], params, TrainEnv(seed=p["seed"]))
    logits = query_outputs(model, x, ["identity"], torch.device("cpu"), p["seed"])
    return {"state": {k: v.numpy() for k, v in model.state_dict().items()},
            "logits": logits.numpy()}


def timed_run(executor: Any, pool: tuple[np.ndarray, np.ndarray], keep: np.ndarray,
              epochs: int) -> tuple[float, dict[int, Any]]:
    results: dict[int, Any] = {}
    started = time.perf_counter()
    shared = executor.put(pool)
    jobs = [Job(i, {"pool": shared, "keep": keep[i], "seed": model_seed(0, i),
                    "epochs": epochs}) for i in range(len(keep))]
    executor.run(jobs, train_model, lambda job, result, s: results.__setitem__(job.index, result))
    return time.perf_counter() - started, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--local-threads", type=int, default=None,
                        help="torch threads of the local run (default: torch's default)")
    args = parser.parse_args()
    if args.local_threads is not None:
        torch.set_num_threads(args.local_threads)
    pool = make_pool(DATASETS.build("digits"), "all", None, 0)
    arrays = (pool.x.numpy(), pool.y.numpy())
    keep = make_plan("rotation", args.models, len(pool), 0).keep

    local_times = []
    for _ in range(args.repeats):
        seconds, local = timed_run(LocalExecutor(), arrays, keep, args.epochs)
        local_times.append(seconds)
        print(f"local ({torch.get_num_threads()} threads): {seconds:.1f} s", flush=True)

    import ray

    from miaudit.executors.ray import RayExecutor

    started = time.perf_counter()
    ray.init(num_cpus=args.workers, include_dashboard=False, logging_level="warning")
    print(f"ray start-up: {time.perf_counter() - started:.1f} s")
    ray_times = []
    with RayExecutor(cpus_per_model=1, threads_per_model=1) as executor:
        for _ in range(args.repeats):
            seconds, remote = timed_run(executor, arrays, keep, args.epochs)
            ray_times.append(seconds)
            print(f"ray ({args.workers} workers x 1 thread): {seconds:.1f} s", flush=True)
    ray.shutdown()
    diff = max(float(np.abs(local[i]["logits"] - remote[i]["logits"]).max()) for i in local)
    print(f"{args.models} models x {args.epochs} epochs: local median "
          f"{statistics.median(local_times):.1f} s {[round(t, 1) for t in local_times]}, ray "
          f"median {statistics.median(ray_times):.1f} s {[round(t, 1) for t in ray_times]}; "
          f"max |logit difference| {diff:.2e}")


if __name__ == "__main__":
    with recorded(__file__):
        main()
