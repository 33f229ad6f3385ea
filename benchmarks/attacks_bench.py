"""Wall time and peak memory of every attack on synthetic logits.

Full size (issue 3: N = 60,000 samples, M = 64 models, Q = 18 queries, C = 10 classes; needs
about 5 GB of memory and several minutes of CPU):

    nice -n 10 python benchmarks/attacks_bench.py

Quick run (N = 6,000, M = 16):

    python benchmarks/attacks_bench.py --small

For each attack it prints the wall time of one ``score`` call with the signal cache warm (the
per-target cost under the rotation protocol), and the peak memory that call added to what was
already held (logits + the cached signals it reads), also as a multiple of one (M, N, Q)
float64 signal array. Memory is the resident set size sampled every 2 ms by a thread
(/proc/self/statm; tracemalloc made scikit-learn's many small allocations 3x slower). glibc
is told to mmap every block above 128 KiB, so freed arrays leave the resident set at once
and each attack's own peak shows (Linux only). The time to
compute each signal once is printed separately; the process's peak resident memory
(``resource.getrusage``) comes last.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import resource
import sys
import threading
import time

import numpy as np
from record import recorded

from miaudit import ATTACKS
from miaudit.attacks import AttackInput

# attack spec -> the cached signals it reads
ATTACK_SPECS: dict[str, tuple[str, ...]] = {
    "loss": ("log_prob",),
    "lira": ("logit_conf",),
    "lira:offline=true": ("logit_conf",),
    "lira:fixed_variance=true": ("logit_conf",),
    "song_mittal:signal=mentr": ("mentr",),
    "song_mittal:signal=entropy": ("entropy",),
    "song_mittal:signal=confidence": ("log_prob",),
    "correctness": ("correct",),
    "watson": ("log_prob",),
    "attack_p": ("log_prob",),
    "attack_r": ("log_prob",),
    "rmia:reduce=mean": ("log_prob",),
    "rmia:reduce=vote,num_z=2500": ("log_prob",),
    "rmia:offline=true,reduce=vote,num_z=2500": ("log_prob",),
    "rmia:reduce=vote": ("log_prob",),
    "rmia_simple": ("log_prob",),
    "dropout_search:attack=rmia_simple": ("log_prob",),
    "shokri": (),
    "shokri:folds=4": (),
    "salem": (),
    # label-only attacks read labels (argmax) of label-only columns: the view below renames
    # the columns, the logits stay the same array; QMIA adds features and a population
    "label_augmentation": (),
    "label_augmentation:calibrate=true": (),
    "boundary_distance": (),
    "boundary_distance:calibrate=true": (),
    "qmia": (),
    "qmia:loss=gaussian": (),
}
LABEL_ATTACKS = ("label_augmentation", "boundary_distance")


def label_view(data: AttackInput) -> AttackInput:
    """The same logits read as label-only columns: the first half as ``label`` queries, the
    rest as ``boundary`` queries (only the argmax / max is read, so the cost is the real one)."""
    queries = data.logits.shape[2]
    names = [f"label:dx={q}" for q in range(queries // 2)] + \
        [f"boundary:seed={q}" for q in range(queries - queries // 2)]
    return AttackInput(data.logits, data.labels, data.keep, names)


def qmia_view(data: AttackInput, features: int = 192, seed: int = 0) -> AttackInput:
    """10% of the samples as population (no model trained on them) and 192 features per sample
    (CIFAR-10's 8 x 8 x 3 pooled inputs)."""
    rng = np.random.default_rng(seed)
    samples = len(data.labels)
    population = np.arange(samples - samples // 10, samples)
    keep = data.keep.copy()
    keep[:, population] = False
    return AttackInput(data.logits, data.labels, keep, data.query_names, population=population,
                       features=rng.standard_normal((samples, features), dtype=np.float32))


def boundary_query_seconds(samples: int = 32, budget: int = 1000) -> float:
    """CPU seconds per queried sample of the ``boundary`` query (HopSkipJump, ``budget`` label
    queries) on a CIFAR-10-sized small_cnn, one thread."""
    import torch

    from miaudit.models import build_model
    from miaudit.queries import build_query

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model("small_cnn", input_shape=(3, 32, 32), num_classes=10)
    x = torch.rand(samples, 3, 32, 32)
    # fitted to random labels, so that its decisions vary (an untrained net predicts one class
    # everywhere, and HopSkipJump would stop at once for want of an adversarial start)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    labels = torch.randint(0, 10, (samples,))
    for _ in range(100):
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    calls = []

    def forward(batch):
        calls.append(len(batch))
        return model(batch)

    query = build_query(f"boundary:budget={budget}")
    started = time.process_time()
    with torch.no_grad():
        out = query(forward, x, torch.Generator().manual_seed(0))
    seconds = (time.process_time() - started) / samples
    distances = out.max(-1).values - 1
    print(f"boundary query: {len(calls) - 1} label queries per sample (budget {budget}), "
          f"{len(torch.unique(out.argmax(-1)))} distinct labels, median L2 distance "
          f"{float(distances.median()):.3f}")
    return seconds


def synthetic_logits(models: int, samples: int, queries: int, classes: int,
                     seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Balanced keep matrix and float32 logits, generated one model at a time so that no
    float64 copy of the (M, N, Q, C) array ever exists."""
    rng = np.random.default_rng(seed)
    keep = np.argsort(rng.uniform(size=(models, samples)), axis=0) < models // 2
    labels = rng.integers(0, classes, samples)
    difficulty = rng.standard_normal((samples, 1, classes), dtype=np.float32) * 1.5
    logits = np.empty((models, samples, queries, classes), dtype=np.float32)
    rows = np.arange(samples)
    for model in range(models):
        out = logits[model]
        rng.standard_normal(out.shape, dtype=np.float32, out=out)
        out *= 0.3
        out += difficulty + 0.5 * rng.standard_normal((samples, 1, classes), dtype=np.float32)
        out[rows, :, labels] += (1.0 + 1.0 * keep[model]).astype(np.float32)[:, None]
    return logits, labels, keep


def mmap_large_blocks() -> None:
    """mallopt(M_MMAP_THRESHOLD, 128 KiB): fixed, so glibc stops raising it after frees and
    keeping freed arrays of up to 32 MiB in the heap (which would hide later peaks)."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 128 * 1024)
    except OSError:
        print("(not glibc: peaks below 32 MiB may be understated)")


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(call) -> tuple[float, int]:
    """(seconds, peak resident bytes above the level before the call)."""
    gc.collect()
    before = resident_bytes()
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.002):
            peak[0] = max(peak[0], resident_bytes())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.perf_counter()
    try:
        call()
    finally:
        seconds = time.perf_counter() - started
        done.set()
        sampler.join()
    return seconds, max(peak[0], resident_bytes()) - before


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="N=6,000, M=16 quick run")
    parser.add_argument("--samples", type=int, default=60_000)
    parser.add_argument("--models", type=int, default=64)
    parser.add_argument("--queries", type=int, default=18)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--only", nargs="*", help="attack specs to run (default: all)")
    parser.add_argument("--boundary", action="store_true", help="also time the boundary query "
                        "(HopSkipJump) per queried sample on a CIFAR-10-sized small_cnn")
    args = parser.parse_args(argv)
    if args.small:
        args.samples, args.models = 6_000, 16
    specs = args.only or list(ATTACK_SPECS)
    # Columns named as a (p, n) input-dropout grid so that dropout_search has its candidates;
    # the other attacks only count the columns.
    names = [f"dropout:p={p},n={n}" for p in (0.005, 0.01, 0.02, 0.05, 0.1, 0.2)
             for n in (10, 20, 30)][: args.queries]
    if len(names) < args.queries:
        raise SystemExit("--queries above 18 is not supported")

    mmap_large_blocks()
    started = time.perf_counter()
    logits, labels, keep = synthetic_logits(args.models, args.samples, args.queries,
                                            args.classes)
    data = AttackInput(logits=logits, labels=labels, keep=keep, query_names=names)
    signal_bytes = args.models * args.samples * args.queries * 8
    print(f"N={args.samples} M={args.models} Q={args.queries} C={args.classes}: logits "
          f"{logits.nbytes / 2**20:.0f} MiB, one signal array {signal_bytes / 2**20:.0f} MiB "
          f"(generated in {time.perf_counter() - started:.1f} s)", flush=True)
    target, references = 0, np.arange(1, args.models)

    signal_seconds: dict[str, float] = {}
    print(f"{'attack':44s} {'seconds':>8s} {'cpu s':>8s} {'peak MiB':>9s} {'x signal':>8s}  AUC")
    views = {"label": label_view(data), "qmia": qmia_view(data)}
    for spec in specs:
        needed = ATTACK_SPECS.get(spec, ("log_prob", "logit_conf"))
        for name in [n for n in data._signals if n not in needed]:
            del data._signals[name]  # hold only the signals this attack reads
        for name in needed:
            if name not in data._signals:
                signal_seconds[name], _ = measure(lambda name=name: data.signal(name))
        attack, attack_name = ATTACKS.build_spec(spec), spec.split(":")[0]
        view = views["label"] if attack_name in LABEL_ATTACKS else \
            views["qmia"] if attack_name == "qmia" else data
        scores: list[np.ndarray] = []
        cpu = time.process_time()
        seconds, peak = measure(
            lambda attack=attack, scores=scores, view=view: scores.append(
                attack.score(view, target, references)))
        cpu = time.process_time() - cpu
        scored = np.setdiff1d(np.arange(len(view.labels)), view.population)
        auc = _auc(scores[0][scored], view.keep[target][scored])
        print(f"{spec:44s} {seconds:8.2f} {cpu:8.2f} {peak / 2**20:9.0f} "
              f"{peak / signal_bytes:8.2f}  {auc:.3f}", flush=True)
    if args.boundary:
        print(f"boundary query (HopSkipJump, budget 1000, small_cnn 3x32x32, 1 thread): "
              f"{boundary_query_seconds():.2f} CPU s per queried sample", flush=True)
    for name, seconds in signal_seconds.items():
        print(f"signal {name!r}: computed once for all models in {seconds:.1f} s")
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    print(f"process peak resident memory: {peak_rss:.0f} MiB; total "
          f"{time.perf_counter() - started:.0f} s")


def _auc(scores: np.ndarray, members: np.ndarray) -> float:
    from miaudit.stats import metrics

    return metrics.summarize(scores, members, fpr_levels=())["auc"]


if __name__ == "__main__":
    with recorded(__file__):
        main(sys.argv[1:])
