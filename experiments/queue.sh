#!/usr/bin/env bash
# Run the current experiments in sequence, then the claims table. Which experiments and in what
# order: the `queue` of experiments/claims.yaml (`python experiments/claims.py --plan` says
# what each still has to run and which claims wait for it); the audits resume, so finished
# configs cost only their check. Run two queues with different names side by side.
# Usage: bash experiments/queue.sh [NAME ...]   (MIAUDIT_DATA_DIR: the CIFAR-10 copy's folder,
# default ../shared/data). Each experiment's log goes to runs/logs/<NAME with / as _>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
data_dir="${MIAUDIT_DATA_DIR:-../shared/data}"
names=("$@")
[ ${#names[@]} -gt 0 ] || mapfile -t names < <(python experiments/claims.py --queue)
[ ${#names[@]} -gt 0 ] || { echo "no experiments: experiments/claims.py --queue failed" >&2; exit 2; }
mkdir -p runs/logs
for name in "${names[@]}"; do
  log="runs/logs/${name//\//_}.log"
  echo "== $name start $(date -u +%H:%M:%S)"
  python experiments/run.py "$name" --data-dir "$data_dir" --threads 1 > "$log" 2>&1 \
    || echo "!! $name failed: see $log"
  echo "== $name end $(date -u +%H:%M:%S)"
done
python experiments/claims.py > runs/logs/claims.log
