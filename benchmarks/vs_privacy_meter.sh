#!/usr/bin/env bash
# miaudit vs ML Privacy Meter (privacytrustlab/ml_privacy_meter) on the same audit work:
# CIFAR-10, a 2,000-image pool, the peer's CNN (62,006 parameters), 10 trained models,
# SGD, 20 epochs, alternated A/B runs; wall time, CPU time, peak memory; then both tools'
# trained models scored by `miaudit score` (RMIA, LiRA) on the same pool.
#
#   benchmarks/vs_privacy_meter.sh setup        # peer venv in $PM_VENV, peer code in $PM_WORK
#   benchmarks/vs_privacy_meter.sh run [ROUNDS] # alternated A/B rounds (default 3)
#   benchmarks/vs_privacy_meter.sh score        # both tools' models through `miaudit score`
#
# Nothing of the peer is vendored: `setup` exports the peer's snapshot (a git mirror, e.g. from
# `git clone --mirror https://github.com/privacytrustlab/ml_privacy_meter`) into $PM_WORK,
# outside this repository. Environment: PM_MIRROR (the peer's git dir), PM_WORK (default
# /tmp/pm-work), PM_VENV (/tmp/pm-venv), MIAUDIT_SHARED_DATA (holds cifar10-jpeg/),
# EPOCHS (20), THREADS (1: torch threads of both tools), PYTHON (python3.11).
#
# What `setup` changes in the peer's requirements.txt (pinned for CUDA 11.8, torch 2.4.1,
# which does not install next to a CPU-only torch):
#   * drops the 11 nvidia-*-cu11 pins, triton==3.0.0, the --extra-index-url line (cu118 index)
#     and the torch==2.4.1 / torchvision / torchaudio lines;
#   * installs torch==2.13.0+cpu (the CPU build this project uses) first, then
#     torchvision==0.28.0 (the release paired with torch 2.13), then the remaining pins, all
#     with --no-deps: the file is a full freeze (every transitive dependency pinned), and
#     resolving it pulls a CUDA torch 2.5.1 with its nvidia-*-cu12 wheels back in;
#     torchaudio is not needed by run_mia.py and is left out;
#   * raises three pins to what torch 2.13 requires: typing-extensions 4.9.0 -> >=4.10,
#     sympy 1.13.1 -> >=1.13.3, setuptools 70.0.0 -> >=77.0.3; adds opt-einsum (an opacus
#     dependency missing from the freeze);
#   * every other pin is installed as the peer pins it.
# PyPI's torchvision 0.28.0 is a CUDA build whose C extension does not load with a CPU torch;
# vs_privacy_meter/cpu_torchvision.py, imported before the peer's code, declares the two
# operator schemas torchvision's import needs (see that file). The peer's code is unchanged.
# What the run changes in the peer (configuration only, no code): a YAML config (CPU device,
# model CNN, SGD lr 0.05 momentum 0.9 wd 5e-4 as miaudit's defaults, batch 64, EPOCHS) and its
# data: `cifar10.pkl` / `cifar10_population.pkl` in its data_dir, torchvision CIFAR10 objects
# holding the first 2,000 training / test images of the shared JPEG copy (the peer would
# otherwise download the official archive, which these machines cannot reach).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
PM_MIRROR="${PM_MIRROR:-/work/.mirror/privacytrustlab+ml_privacy_meter/repo}"
PM_WORK="${PM_WORK:-/tmp/pm-work}"
PM_VENV="${PM_VENV:-/tmp/pm-venv}"
PYTHON="${PYTHON:-python3.11}"
EPOCHS="${EPOCHS:-20}"
THREADS="${THREADS:-1}"
DATA="${MIAUDIT_SHARED_DATA:-/work/shared/data}"
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"

setup() {
  mkdir -p "$PM_WORK/peer"
  git --git-dir="$PM_MIRROR" archive HEAD | tar -x -C "$PM_WORK/peer"
  git --git-dir="$PM_MIRROR" rev-parse HEAD > "$PM_WORK/peer.commit"
  grep -v -E '^(nvidia-|triton==|torch==|torchvision|torchaudio|--extra-index-url)' \
    "$PM_WORK/peer/requirements.txt" > "$PM_WORK/requirements-cpu.txt"
  "$PYTHON" -m venv "$PM_VENV"
  # CPU torch first: accelerate, peft and opacus depend on torch, and pip would otherwise
  # resolve it to the CUDA build (and its nvidia-* wheels) from PyPI.
  "$PM_VENV/bin/pip" install -q "torch==2.13.0+cpu" 2>/dev/null \
    || "$PM_VENV/bin/pip" install -q "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu
  "$PM_VENV/bin/pip" install -q --no-deps "torchvision==0.28.0"
  # --no-deps: requirements.txt is a full freeze (every transitive dependency pinned); with
  # dependency resolution pip still replaces the CPU torch by a CUDA one for some pin.
  "$PM_VENV/bin/pip" install -q --no-deps -r "$PM_WORK/requirements-cpu.txt"
  # torch 2.13 needs newer typing-extensions (4.9.0 pinned), sympy (1.13.1) and setuptools
  # (70.0.0); opacus needs opt-einsum, which the freeze lacks.
  "$PM_VENV/bin/pip" install -q --no-deps "typing-extensions>=4.10" "sympy>=1.13.3" \
    "setuptools>=77.0.3" opt-einsum
  "$PM_VENV/bin/pip" check | grep -v -E '^(nvidia|triton)' || true
  "$PM_VENV/bin/python" "$HERE/vs_privacy_meter/peer_data.py" "$DATA/cifar10-jpeg" \
    "$PM_WORK/data" 2000
}

peer_once() {  # $1: round
  local dir="$PM_WORK/runs/peer-$1"
  rm -rf "$dir"; mkdir -p "$dir"
  "$PM_VENV/bin/python" "$HERE/vs_privacy_meter/peer_config.py" "$dir" "$PM_WORK/data" \
    "$EPOCHS" > "$dir/config.yaml"
  (cd "$PM_WORK/peer" && /usr/bin/time -v "$PM_VENV/bin/python" -c \
    "import sys; sys.path.insert(0, '$HERE/vs_privacy_meter'); import cpu_torchvision; \
     import torch, runpy; torch.set_num_threads($THREADS); \
     sys.argv = ['run_mia.py', '--cf', '$dir/config.yaml']; runpy.run_path('run_mia.py', run_name='__main__')" \
    > "$dir/stdout.log" 2> "$dir/time.log")
  report peer "$1" "$dir/time.log"
}

miaudit_once() {  # $1: round
  local dir="$PM_WORK/runs/miaudit-$1"
  rm -rf "$dir"; mkdir -p "$dir"
  sed -e "s|@OUT@|$dir|" -e "s|@DATA@|$DATA/cifar10-jpeg|" -e "s|@EPOCHS@|$EPOCHS|" \
    -e "s|@THREADS@|$THREADS|" -e "s|@BENCH@|$HERE/vs_privacy_meter|" \
    "$HERE/vs_privacy_meter/miaudit.yaml" > "$dir/config.yaml"
  (cd "$REPO" && PYTHONPATH="$REPO/src:$HERE/vs_privacy_meter" /usr/bin/time -v \
    python -m miaudit.cli audit --config "$dir/config.yaml" > "$dir/stdout.log" 2> "$dir/time.log")
  report miaudit "$1" "$dir/time.log"
}

report() {  # tool round time.log -> one line: wall, CPU (user+sys), peak RSS
  awk -v tool="$1" -v round="$2" -F': ' '
    /Elapsed \(wall clock\)/ {n = split($2, t, ":"); wall = (n == 3) ? t[1]*3600 + t[2]*60 + t[3] : t[1]*60 + t[2]}
    /User time/ {user = $2} /System time/ {sys = $2} /Maximum resident/ {rss = $2}
    END {printf "%-8s round %s  wall %8.1f s  cpu %8.1f s  peak %6.0f MiB  load %s\n",
         tool, round, wall, user + sys, rss / 1024, load}' load="$(cut -d' ' -f1 /proc/loadavg)" "$3" \
    | tee -a "$PM_WORK/results.txt"
}

run() {
  local rounds="${1:-3}"
  echo "# $(date -u +%FT%TZ) epochs $EPOCHS threads $THREADS $(nproc --all) cores" | tee -a "$PM_WORK/results.txt"
  for round in $(seq 1 "$rounds"); do  # A/B alternated, B first on even rounds
    if (( round % 2 )); then peer_once "$round"; miaudit_once "$round"
    else miaudit_once "$round"; peer_once "$round"; fi
  done
}

score() {  # both tools' last models, scored alike on the 2,000-image pool
  PYTHONPATH="$REPO/src:$HERE/vs_privacy_meter" python "$HERE/vs_privacy_meter/score_both.py" "$PM_WORK" "$DATA/cifar10-jpeg"
}

"${1:-run}" "${@:2}"
