"""User and system (kernel) CPU-seconds of query forwards and training steps with glibc's
malloc defaults and with miaudit's setting (:mod:`miaudit._runtime.allocator`: freed memory kept for
reuse), each case in a fresh process (the setting is process-wide), the two alternated,
median over repeats. Random weights and inputs, CIFAR-10 shape, width 1, 1 thread.

    PYTHONPATH=src python benchmarks/allocator_bench.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from record import recorded

from miaudit._runtime.allocator import OPT_OUT_VARIABLE

# One case in a fresh process: build, warm up once, then time `rounds` calls.
CASE = """
import json, resource, sys, torch
from miaudit._runtime.allocator import keep_freed_memory
keep_freed_memory()
torch.set_num_threads(1)
torch.manual_seed(0)
model_name, mode, batch, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if model_name == "resnet14":
    from miaudit.models.resnet import resnet14 as make
    options = {}
else:
    from miaudit.models.snn import snn_cnn as make
    options = {"T": int(model_name.split("t")[-1])}
model = make(input_shape=(3, 32, 32), num_classes=10, width=1.0, **options)
x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

def call():
    if mode == "query":
        with torch.no_grad():
            model.eval()(x)
        return
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model.train()(x), y).backward()
    optimizer.step()

call()
start = resource.getrusage(resource.RUSAGE_SELF)
for _ in range(rounds):
    call()
end = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"user": end.ru_utime - start.ru_utime, "sys": end.ru_stime - start.ru_stime,
                  "faults": end.ru_minflt - start.ru_minflt, "peak_mib": end.ru_maxrss // 1024}))
"""

CASES = (("snn_t4", "query", 512), ("resnet14", "query", 512), ("snn_t4", "train", 128),
         ("resnet14", "train", 128))


def run_case(model: str, mode: str, batch: int, rounds: int, keep: bool) -> dict[str, float]:
    env = {**os.environ, OPT_OUT_VARIABLE: "1" if keep else "0",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    done = subprocess.run([sys.executable, "-c", CASE, model, mode, str(batch), str(rounds)],
                          env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3, help="timed calls per process")
    args = parser.parse_args()
    print(f"{args.rounds} calls per process, median of {args.repeats} processes per setting "
          f"(alternated), load average {os.getloadavg()[0]:.1f}; CPU-s per call")
    print("| model | stage | batch | user / sys, defaults | user / sys, kept | "
          "CPU-s saved | page faults per call, defaults / kept | peak MiB, defaults / kept |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for model, mode, batch in CASES:
        runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
        for _ in range(args.repeats):
            for keep in (False, True):
                runs[keep].append(run_case(model, mode, batch, args.rounds, keep))
        med = {keep: {key: statistics.median(r[key] for r in rs) / (
            args.rounds if key in ("user", "sys", "faults") else 1) for key in rs[0]}
            for keep, rs in runs.items()}
        before, after = med[False], med[True]
        total = before["user"] + before["sys"]
        saved = 1 - (after["user"] + after["sys"]) / total
        print(f"| {model} | {mode} | {batch} | {before['user']:.2f} / {before['sys']:.2f} | "
              f"{after['user']:.2f} / {after['sys']:.2f} | {100 * saved:.0f}% | "
              f"{before['faults']:,.0f} / {after['faults']:,.0f} | "
              f"{before['peak_mib']:,.0f} / {after['peak_mib']:,.0f} |")


if __name__ == "__main__":
    with recorded(__file__):
        main()
