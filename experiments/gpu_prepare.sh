#!/bin/bash
# Prepare what experiments/gpu_batch.sh carries to an offline GPU machine (the device tool's
# `run` copies the work tree plus the ignored paths named in `carry`, 64 MiB in all):
#   .whl/*.whl          the wheels that machine lacks (measured 2026-11-27 on the lent H200, Python
#                       3.12: pydantic, pydantic_core, opacus and their small dependencies),
#                       at this machine's versions, for CPython PY_VERSION on x86-64 Linux
#   .gpudata/cifar.txz  the CIFAR-10 image folder (~19 MB as xz; a .tgz put the tree over 64 MiB)
# and keeps both out of git (.git/info/exclude). Then, on the GPU session:
#   git ls-files -z '*.html' | xargs -0 rm     # the tracked reports: else the tree tops 64 MiB
#   run(command="bash experiments/gpu_batch.sh 470 8 ...", carry=[".whl", ".gpudata"])
#   git checkout -- $(git ls-files -d)          # the reports back
#
# usage: bash experiments/gpu_prepare.sh [PY_VERSION (3.12)] [DATA_DIR (../shared/data)]
set -eu
PY=${1:-3.12}; DATA=${2:-../shared/data}
cd "$(git rev-parse --show-toplevel)"
version() { python3 -c "import importlib.metadata as m; print(m.version('$1'))"; }
mkdir -p .whl .gpudata
pins=()
for package in pydantic pydantic_core opacus annotated_types typing_inspection typing_extensions; do
  pins+=("$package==$(version "$package")")
done
python3 -m pip download -q --dest .whl --only-binary=:all: --no-deps --python-version "$PY" \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 "${pins[@]}"
[ -f .gpudata/cifar.txz ] || tar cJf .gpudata/cifar.txz -C "$DATA" cifar10-jpeg
for path in .whl/ .gpudata/; do
  grep -qxF "$path" .git/info/exclude 2>/dev/null || echo "$path" >> .git/info/exclude
done
ls -l .whl; du -h .gpudata/cifar.txz
git status --short .whl .gpudata  # nothing: both ignored
