"""What storing a language model's per-token statistics as float16 changes in the attacks'
numbers: every attack of a finished text audit scored twice over the same stored outputs,
once as stored (float32 runs) and once rounded to float16, pooled AUC and TPR@1% compared.

    PYTHONPATH=src python benchmarks/text_float16.py RUN_DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    args = parser.parse_args()
    from miaudit import Results
    from miaudit.attacks.suite import run_attack
    from miaudit.auditor.components import attack_label, build_attack
    from miaudit.auditor.rundir import RunDir
    from miaudit.auditor.stages.plan import plan_audit
    from miaudit.auditor.stages.score import attack_input
    from miaudit.stats import metrics

    summary = Results.load(args.run_dir).summary
    from miaudit.config import validate_config

    planned = plan_audit(validate_config(summary.config))
    data = attack_input(RunDir(args.run_dir), planned)
    if data.logits.dtype == np.float16:
        sys.exit("this run stored float16 already: run it on a run stored as float32")
    rounded = replace(data, logits=data.logits.astype(np.float16).astype(np.float32),
                      _signals={})
    targets, audited = list(summary.targets), planned.plan.split.audited
    members = data.keep[targets][:, audited]
    rows = {}
    for spec in summary.config["attacks"]:
        label = attack_label(spec)[0]
        pooled = []
        for outputs in (data, rounded):
            attack = build_attack(spec)
            scores = np.stack([np.asarray(o.scores)[audited] for o in run_attack(
                attack, outputs, targets, planned.plan.references)])
            pooled.append(metrics.summarize(scores.ravel(), members.ravel()))
        rows[label] = {key: [pooled[0][key], pooled[1][key],
                             abs(pooled[0][key] - pooled[1][key])]
                       for key in ("auc", "tpr@1%")}
    worst = {key: max(row[key][2] for row in rows.values()) for key in ("auc", "tpr@1%")}
    record = {"run_dir": str(args.run_dir), "attacks": rows, "max_abs_change": worst,
              "max_abs_value_error": float(np.nanmax(np.abs(
                  data.logits.astype(np.float64) - rounded.logits.astype(np.float64))))}
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
