#!/bin/bash
# Run several experiment configs side by side on one GPU machine and pack what they made.
#
# usage: bash experiments/gpu_batch.sh TRAIN_BUDGET_S WORKERS EXPERIMENT:STEM[+STEM...] ...
#
# Each EXPERIMENT:STEM runs as its own process (`experiments/run.py ... --device cuda`); A+B
# runs configs A and B in one process, in the folder's order, for configs that share models
# through the model cache (papers/C/rotation16:1_snn_t1+2_snn_t2+4_snn_t4: the ANN -> T1 -> T2
# chain is trained once, not once per process). Each process trains
# WORKERS models at once on the `processes` executor; all of them share the one GPU, with CUDA
# MPS started when the machine allows it (kernels of different processes then run at the same
# time). A run still going after TRAIN_BUDGET_S seconds is stopped (rerunning resumes it from
# its finished models, while the run directory lasts). At the end everything the runs wrote
# (experiments/*/outputs and runs/experiments, without weights and query outputs) is packed
# into $OUT/back.tgz.* in 15 MiB parts; bring them back, `cat back.tgz.* | tar xz`, copy the
# outputs in, then `python experiments/run.py EXPERIMENT --collect` and
# `python experiments/paired.py --runs <unpacked>/runs/experiments`.
#
# Optional, for a machine without the package's dependencies or data (an offline GPU box;
# `bash experiments/gpu_prepare.sh` makes both):
#   .whl/*.whl   wheels installed first into /tmp/site (pydantic, pydantic_core, opacus, ...)
#   .gpudata/cifar.txz  the CIFAR-10 image folder (`tar cJf cifar.txz cifar10-jpeg`), unpacked to
#                /tmp/data; otherwise DATA_DIR (default ../shared/data) is used.
# Measured (2026-11-27, one H200, 20 workers: five configs x 4) with a local copy of these same
# steps: `papers/A/floor_variants`'s five cheaper configs in 127-138 s of training each (see
# experiments/README.md). Files: at most ~8 parts come back through a 16 MiB-per-file channel.
set -u
T0=$(date +%s); BUDGET=$1; W=$2; shift 2
OUT=${OUT:-$PWD/gpu_out}; DATA_DIR=${DATA_DIR:-../shared/data}; LOGS=/tmp/gpu_batch_logs
mkdir -p "$OUT" "$LOGS"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
if [ -f .gpudata/cifar.txz ]; then
  mkdir -p /tmp/data && tar xJf .gpudata/cifar.txz -C /tmp/data && DATA_DIR=/tmp/data
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
python3 -c "from miaudit.data.cifar import load_cifar10; load_cifar10(data_dir='$DATA_DIR')" \
  || exit 1  # decode and cache once, not in every run at the same time
if nvidia-cuda-mps-control -d 2> "$LOGS/mps.err"; then
  if timeout 60 python3 -c "import torch; torch.ones(1, device='cuda').sum().item()"; then
    echo "MPS on"
  else echo quit | nvidia-cuda-mps-control; echo "MPS off: a client failed"; fi
else echo "MPS not started: $(cat "$LOGS/mps.err")"; fi
left=$(( BUDGET - ($(date +%s) - T0) ))
pids=()
for spec in "$@"; do
  experiment=${spec%%:*}; stems=${spec##*:}
  only=(); for stem in ${stems//+/ }; do only+=(--only "$stem"); done
  log=$LOGS/$(echo "$experiment-$stems" | tr /+ __).log
  timeout "$left" python3 experiments/run.py "$experiment" "${only[@]}" --data-dir "$DATA_DIR" \
    --device cuda --threads 1 --set executor.name=processes --set executor.workers="$W" \
    > "$log" 2>&1 &
  pids+=($!)
done
( while sleep 60; do echo "t=$(( $(date +%s) - T0 )) s: GPU $(nvidia-smi \
    --query-gpu=utilization.gpu,memory.used --format=csv,noheader), load $(cut -d' ' -f1 \
    /proc/loadavg)"; done ) &
monitor=$!
wait "${pids[@]}"
kill $monitor 2> /dev/null
echo "runs done at $(( $(date +%s) - T0 )) s"
for log in "$LOGS"/*.log; do echo "== $log"; grep -v "━" "$log" | tail -4; done
tar czf /tmp/back.tgz --exclude='*/models' --exclude='*/model_cache' \
  experiments/papers/*/*/outputs runs/experiments "$LOGS" 2> /dev/null
split -b 15M /tmp/back.tgz "$OUT/back.tgz."
echo "packed $(du -h /tmp/back.tgz | cut -f1) in $(ls "$OUT"/back.tgz.* | wc -l) part(s); total $(( $(date +%s) - T0 )) s"
