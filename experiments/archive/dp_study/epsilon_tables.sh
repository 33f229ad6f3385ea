#!/usr/bin/env bash
# Epsilon tables of the neural-ODE study's DP settings (CIFAR-10: 25,000 training samples,
# batch 256, 100 epochs, delta 1e-5) with the three Opacus accountants, the noise needed for
# epsilon = 8, epsilon over epochs for several deltas (Figure 4, left) and the NSDE bound.
# Usage: bash experiments/archive/dp_study/epsilon_tables.sh > experiments/archive/dp_study/outputs/epsilon_tables.txt
set -euo pipefail
cd "$(dirname "$0")/../../.."
export COLUMNS=110
run() { echo; echo "\$ miaudit privacy $*"; miaudit privacy "$@" 2>&1; }
run epsilon -z 1.0 -b 256 -n 25000 -e 100
run noise --epsilon 8 -b 256 -n 25000 -e 100
for z in 0.5 1.0 2.0; do
  run table -z "$z" -b 256 -n 25000 -e 1 -e 10 -e 25 -e 50 -e 100 -d 1e-5 -d 1e-4 -d 1e-3 -a prv
done
run plot -z 1.0 -b 256 -n 25000 --max-epochs 100 -d 1e-5 -d 1e-4 -d 1e-3 \
  --out experiments/archive/dp_study/outputs/epsilon_over_epochs.png
# NSDE: sigma = 2 (k = 0.5, s = 16, T = 1 in the study's parameterization) as a noise
# multiplier of 256-sample Poisson batches over 100 epochs; and the per-release bound.
run nsde --sigma 2.0 -T 1 -L 1 -D 1 -b 256 -n 25000 -e 100
run nsde --epsilon 8 -T 1 -L 1 -D 2 -K 1
