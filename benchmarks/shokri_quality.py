"""Attack quality and cost of Shokri attack-model variants, rotation protocol.

On a stored run (every model the target in turn, all others its references):

    PYTHONPATH=src nice -n 10 python benchmarks/shokri_quality.py --run-dir RUN

or on synthetic memorizing logits (attacks_bench.synthetic_logits: members get +1 on the
true-class logit), N=1,797, M=16, Q=3, C=10 like the default audit:

    PYTHONPATH=src nice -n 10 python benchmarks/shokri_quality.py --synthetic

Prints, per variant, the pooled AUC, TPR@1% and TPR@0.1% over all targets, the mean
per-target AUC, and the wall and CPU seconds for all targets. Variants: "sorted" uses the
sorted vector (miaudit's Shokri features before the fidelity fix) with per-class models;
"shokri" keeps the class order (the paper's features); gbdt100 is 100 boosting rounds of 0.1
(the former default attack model); "salem" is ML-Leaks (top-3 sorted, one model).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from record import recorded
from sklearn.ensemble import HistGradientBoostingClassifier

from miaudit import ATTACKS
from miaudit.attacks import AttackInput, shokri
from miaudit.attacks.shokri import Shokri, sorted_log_probs
from miaudit.stats import metrics


class SortedShokri(Shokri):
    """Per-class models on the sorted vector (miaudit's Shokri before the fidelity fix)."""

    features = staticmethod(sorted_log_probs)


def gbdt(rounds: int, rate: float, depth: int | None = None):
    """Swap the gbdt attack model of shokri/salem for one with other boosting settings."""
    def make(kind: str, seed: int):
        if kind != "gbdt":
            return default_make(kind, seed)
        return HistGradientBoostingClassifier(max_iter=rounds, learning_rate=rate,
                                              max_depth=depth, early_stopping=False,
                                              random_state=seed)
    return make


default_make = shokri.make_classifier
VARIANTS = {  # name -> (attack factory, attack-model factory)
    "sorted, gbdt100": (lambda: SortedShokri(classifier="gbdt"), gbdt(100, 0.1)),
    "shokri, gbdt100": (lambda: Shokri(classifier="gbdt"), gbdt(100, 0.1)),
    "shokri, gbdt30 depth3": (lambda: Shokri(classifier="gbdt"), gbdt(30, 0.2, 3)),
    "shokri (default gbdt40)": (Shokri, default_make),
    "shokri folds=4": (lambda: Shokri(folds=4), default_make),
    "shokri folds=2": (lambda: Shokri(folds=2), default_make),
    "shokri, logistic": (lambda: Shokri(classifier="logistic"), default_make),
    "shokri, mlp": (lambda: Shokri(classifier="mlp"), default_make),
    "salem top-3, logistic": (lambda: ATTACKS.build("salem", classifier="logistic"),
                              default_make),
    "salem top-3 (default gbdt40)": (lambda: ATTACKS.build("salem"), default_make),
}


def run_variant(data: AttackInput, factory, make,
                targets: list[int]) -> tuple[dict, tuple[float, float]]:
    shokri.make_classifier = make
    try:
        attack = factory()
        started, cpu = time.perf_counter(), time.process_time()
        scores = [attack.score(data, t, np.delete(np.arange(data.num_models), t))
                  for t in targets]
        seconds = (time.perf_counter() - started, time.process_time() - cpu)
    finally:
        shokri.make_classifier = default_make
    members = data.keep[targets]
    pooled = metrics.summarize(np.ravel(scores), members.ravel())
    pooled["mean_auc"] = float(np.mean([metrics.summarize(s, m)["auc"]
                                        for s, m in zip(scores, members)]))
    return pooled, seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run-dir")
    source.add_argument("--synthetic", action="store_true")
    parser.add_argument("--targets", type=int, default=None, help="first k targets only")
    parser.add_argument("--only", nargs="*", help="variant names (default: all)")
    args = parser.parse_args(argv)
    if args.synthetic:
        from attacks_bench import synthetic_logits

        logits, labels, keep = synthetic_logits(16, 1797, 3, 10)
        data = AttackInput(logits, labels, keep, ["identity", "flip", "shift:dx=1"])
    else:
        from stored_run import load_run

        data, _ = load_run(args.run_dir)
    targets = list(range(args.targets or data.num_models))
    print(f"{'variant':32s} {'AUC':>6s} {'meanAUC':>7s} {'TPR@1%':>7s} {'TPR@.1%':>7s} "
          f"{'wall s':>7s} {'cpu s':>7s}")
    for name in args.only or list(VARIANTS):
        result, seconds = run_variant(data, *VARIANTS[name], targets)
        print(f"{name:32s} {result['auc']:6.3f} {result['mean_auc']:7.3f} "
              f"{result['tpr@1%']:7.4f} {result['tpr@0.1%']:7.4f} {seconds[0]:7.2f} "
              f"{seconds[1]:7.2f}", flush=True)


if __name__ == "__main__":
    with recorded(__file__):
        main(sys.argv[1:])
