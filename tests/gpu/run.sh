#!/usr/bin/env bash
# tests/gpu/run.sh — the GPU check (issue 5): on a machine with an NVIDIA GPU,
#   1. build with the CUDA executor (-Dcuda=enabled, nvcc required),
#   2. CPU-vs-CUDA byte-exact equivalence of every --dtype cast pair over special
#      and random values, with GB/s of each (tests/gpu/test_cuda_cast.c),
#   3. benchmark g: a tensor-parallel Shard(1) DCP checkpoint read through the mount as
#      bf16 (--dtype=bf16), --device=cpu vs --device=cuda: GB/s each, and the bytes equal.
# Prints everything and copies it to ${OUT:-docs}/gpu-results.txt. Takes < 5 minutes.
# Needs meson, ninja, pkg-config, libfuse3-dev, libcjson-dev, libzstd-dev and nvcc; the
# benchmark also needs fuse3 (/dev/fuse), python3 with torch for the generator (skipped
# otherwise).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUTDIR="${OUT:-docs}"
mkdir -p "$OUTDIR"
LOG="$OUTDIR/gpu-results.txt"
exec > >(tee "$LOG") 2>&1
echo "== $(date -u) $(uname -m)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -4
command -v nvcc >/dev/null || PATH="/usr/local/cuda/bin:$PATH"

echo "== build (build-gpu, -Dcuda=enabled)"
if [[ -f build-gpu/build.ninja ]]; then
    meson setup --reconfigure build-gpu -Dcuda=enabled >/dev/null
else
    meson setup build-gpu -Dcuda=enabled --buildtype=release >/dev/null
fi || { echo "FAILED: meson setup"; exit 1; }
ninja -C build-gpu >/dev/null || { echo "FAILED: build"; exit 1; }
./build-gpu/fs/unshardfs --version

echo "== CPU vs CUDA cast equivalence"
./build-gpu/tests/gpu/test_cuda_cast
rc=$?
[[ $rc -eq 77 ]] && { echo "no usable CUDA device: nothing more to check"; exit 0; }
[[ $rc -ne 0 ]] && { echo "FAILED: CPU and CUDA casts differ"; exit 1; }

echo "== benchmark g: Shard(1) DCP read as bf16, CPU vs CUDA executor"
PY="${PYTHON:-python3}"
if ! "$PY" -c "import torch" 2>/dev/null || [[ ! -e /dev/fuse ]]; then
    echo "skipped: needs python3 with torch and /dev/fuse"
    exit 0
fi
WORK=$(mktemp -d)
trap 'fusermount3 -u "$WORK/mnt" 2>/dev/null; rm -rf "$WORK"' EXIT
"$PY" tests/bench/gen.py dcp "$WORK/ckpt" --gb 1 --world 4 --shard 1 >/dev/null || exit 1
mkdir -p "$WORK/mnt"
for dev in cpu cuda cpu cuda; do
    ./build-gpu/fs/unshardfs -q --dtype=bf16 --device=$dev "$WORK/ckpt" "$WORK/mnt" || exit 1
    size=$(stat -c %s "$WORK/mnt/model.safetensors")
    t0=$(date +%s.%N)
    sum=$(sha256sum "$WORK/mnt/model.safetensors" | cut -d' ' -f1)
    t1=$(date +%s.%N)
    fusermount3 -u "$WORK/mnt"
    echo "$dev $(echo "$size / ($t1 - $t0) / 1e9" | bc -l | cut -c1-5) GB/s  sha256 ${sum:0:16}"
done | tee "$WORK/g.txt"
if [[ $(awk '{print $NF}' "$WORK/g.txt" | sort -u | wc -l) -ne 1 ]]; then
    echo "FAILED: the CPU and CUDA mounts served different bytes"
    exit 1
fi
echo "GPU check passed"
