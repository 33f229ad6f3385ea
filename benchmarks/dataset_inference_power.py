"""How many texts dataset inference (Maini et al. 2024) needs to reach p < 0.01 when 5%, 25% or
100% of the suspect collection was trained on, from a finished text audit's stored scores.

For each target model: its members and its audited non-members, the per-text scores of the
chosen attacks as features; suspect collections of n texts (a share f members, the rest
non-members) against n other non-members, 20 draws per n (Welch p-values; the smallest n
whose median p < 0.01). The audit's pool bounds n (suspect and held-out non-members are
disjoint), so each share is also measured in a synthetic world with the audit's own feature
distribution: members and non-members drawn from Gaussians with the target's member and
non-member feature means and covariances, as many texts as needed (labelled as such).

    PYTHONPATH=src python benchmarks/dataset_inference_power.py RUN_DIR --attacks loss,zlib
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

SIZES = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]
FRACTIONS = (0.05, 0.25, 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--attacks", default=None, help="','-separated labels (default: all)")
    parser.add_argument("--targets", type=int, default=8)
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from miaudit import Results
    from miaudit.analysis import run_features, texts_needed

    labels = args.attacks.split(",") if args.attacks else None
    targets = Results.load(args.run_dir).summary.targets[: args.targets]
    record = {"run_dir": str(args.run_dir), "fractions": {}}
    rng = np.random.default_rng(0)
    for fraction in FRACTIONS:
        real, synthetic = [], []
        for target in targets:
            data = run_features(args.run_dir, labels, target)
            members = data["features"][data["members"]]
            nonmembers = data["features"][~data["members"]]
            real.append(texts_needed(members, nonmembers, fraction, SIZES, draws=args.draws,
                                     seed=target)["texts_needed"])
            world = [rng.multivariate_normal(group.mean(0), np.cov(group.T), size)
                     for group, size in ((members, 10_000), (nonmembers, 140_000))]
            synthetic.append(texts_needed(*world, fraction, SIZES, draws=args.draws,
                                          seed=target)["texts_needed"])
        record["attacks"] = data["attacks"]
        record["fractions"][str(fraction)] = {
            "audit_texts_needed_per_target": real, "synthetic_texts_needed_per_target": synthetic,
            "audit_max_texts": int(min(len(members) / max(fraction, 1e-9),
                                       len(nonmembers) / (2 - fraction)))}
        print(fraction, real, synthetic, flush=True)
    text = json.dumps(record, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
