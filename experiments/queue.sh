#!/usr/bin/env bash
# Run the committed experiments in sequence, then the claims table (CPU scale: about 5 hours on
# one core for all issue-17 experiments; run two queues with different names side by side).
# Usage: bash experiments/queue.sh [NAME ...]   (MIAUDIT_DATA_DIR: the CIFAR-10 copy's folder,
# default ../shared/data). Each experiment's log goes to runs/logs/NAME.log.
set -euo pipefail
cd "$(dirname "$0")/.."
data_dir="${MIAUDIT_DATA_DIR:-../shared/data}"
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(paper_a_headline paper_a_defenses paper_a_replace_finetune
                                  paper_a_seeds paper_a_variants paper_a_blocks_solvers
                                  paper_b_memorization paper_b_demem paper_c_snn snn_study)
mkdir -p runs/logs
for name in "${names[@]}"; do
  echo "== $name start $(date -u +%H:%M:%S)"
  python experiments/run.py "$name" --data-dir "$data_dir" --threads 1 \
    > "runs/logs/$name.log" 2>&1 \
    || echo "!! $name failed: see runs/logs/$name.log"
  echo "== $name end $(date -u +%H:%M:%S)"
done
python experiments/claims.py > runs/logs/claims.log
