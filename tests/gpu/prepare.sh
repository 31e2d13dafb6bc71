#!/usr/bin/env bash
# tests/gpu/prepare.sh — run HERE, before a run on a GPU machine (which has no -dev
# packages, no compiler and no package index):
#   1. builds build/ (meson's cuda=auto: nvcc present, so the CUDA executor is in) and
#      copies what run.sh needs into .gpu/: unshardfs, test_cuda_cast, libunshard.so;
#   2. downloads fastsafetensors (the loader benchmark's peer at the limit) and its
#      dependencies as wheels for CPython 3.10-3.13 into .gpu/wheels, which run.sh
#      installs from, offline, into its scratch folder.
# Then on the GPU machine (the device tool: carry .gpu):
#   UNSHARDFS_GPU_PREBUILT=.gpu OUT=$OUT bash tests/gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tools/setup.sh
. tools/setup.sh >/dev/null
ninja -C build >/dev/null
build/fs/unshardfs --version | grep -q "CUDA executor built" ||
    { echo "prepare: build/ has no CUDA executor (is nvcc installed?)" >&2; exit 1; }
rm -rf .gpu
mkdir -p .gpu/wheels
cp build/fs/unshardfs build/tests/gpu/test_cuda_cast build/lib/loader/libunshard.so .gpu/
for v in 3.10 3.11 3.12 3.13; do
    "$UNSHARDFS_VENV/bin/pip" download -q fastsafetensors --only-binary=:all: \
        --python-version "$v" --platform manylinux_2_28_x86_64 \
        --platform manylinux2014_x86_64 -d .gpu/wheels
done
du -sh .gpu
