"""Paper A, Fig. 5 at CPU scale: the pooled LiRA ROCs of SDENet (sigma = 2 as the study; and
k = 0.5, sigma = 1 at our 4 steps) and of the non-private NSDE (sigma = 0; here the same model as
ODENet) under the (epsilon = 1, delta = 1e-5) DP bound of Kairouz et al.
(miaudit.privacy.bounds.roc_bound).

Needs the run directories of ``python experiments/run.py papers/A/headline`` (their per-sample
scores are not committed); writes ``outputs/fig5_roc_dp_bound.png`` and
``outputs/fig5.json`` (the TPR at each FPR level with its interval, and the bound there).
The claims table (experiments/claims.py) checks the same direction from the committed
results.json.

    python experiments/papers/A/headline/fig5.py
"""

from __future__ import annotations

import json
from pathlib import Path

from miaudit import Results
from miaudit.privacy import bounds
from miaudit.stats import metrics

HERE = Path(__file__).parent
CURVES = {"SDENet sigma=2": "5_sdenet_sigma2", "SDENet k=0.5 (sigma=1)": "3_sdenet_k0.5",
          "SDENet sigma=0": "4_sdenet_k0", "ResNet-14": "1_resnet14"}
EPSILON, DELTA = 1.0, 1e-5
ATTACK = "lira"


def main() -> None:
    curves, table = {}, {}
    for name, stem in CURVES.items():
        committed = Results.load(HERE / "outputs" / f"{stem}.results.json")
        run_root = Path(committed.summary.run_dir)
        if not run_root.is_dir():
            raise SystemExit(f"{run_root} is missing: run `python experiments/run.py "
                             "papers/A/headline --data-dir DATA` first")
        scores, members = Results.load(run_root).scores(ATTACK)  # pooled over the targets
        curves[name] = metrics.roc_curve(scores.ravel(), members.ravel())[:2]
        record = committed.attacks[ATTACK]
        table[name] = {level: {"tpr": record.pooled[f"tpr@{level}"],
                               "ci": record.interval(f"tpr@{level}"),
                               "bound": float(bounds.roc_bound(float(level[:-1]) / 100,
                                                               EPSILON, DELTA))}
                       for level in ("0.1%", "1%")}
    bounds.plot_roc_bounds(curves, [EPSILON], DELTA, HERE / "outputs" / "fig5_roc_dp_bound.png",
                    title=f"paper A Fig. 5 at CPU scale: LiRA under ({EPSILON:g}, {DELTA:g})-DP")
    (HERE / "outputs" / "fig5.json").write_text(json.dumps(
        {"epsilon": EPSILON, "delta": DELTA, "attack": ATTACK, "levels": table}, indent=1))
    print(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
