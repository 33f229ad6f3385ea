#!/usr/bin/env bash
# Run committed experiments in sequence (CPU scale; about 90 minutes on 2 cores for all).
# Usage: bash experiments/queue.sh [NAME ...]   (MIAUDIT_DATA_DIR: the CIFAR-10 copy's folder,
# default ../shared/data). Each experiment's log goes to runs/logs/NAME.log.
set -euo pipefail
cd "$(dirname "$0")/.."
data_dir="${MIAUDIT_DATA_DIR:-../shared/data}"
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(digits_default cifar10_small dp_study snn_study ode_study
                                  defenses defenses_cifar10 demem)
mkdir -p runs/logs
for name in "${names[@]}"; do
  echo "== $name start $(date -u +%H:%M:%S)"
  python experiments/run.py "$name" --data-dir "$data_dir" > "runs/logs/$name.log" 2>&1 \
    || echo "!! $name failed: see runs/logs/$name.log"
  echo "== $name end $(date -u +%H:%M:%S)"
done
