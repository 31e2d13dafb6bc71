#!/usr/bin/env bash
# tests/gpu/run.sh — the GPU check (issue 5), on a machine with an NVIDIA GPU:
#   1. build with the CUDA executor (-Dcuda=enabled, nvcc required), or take the
#      binaries from $UNSHARDFS_GPU_PREBUILT (a folder with unshardfs and
#      test_cuda_cast built here with -Dcuda=enabled, for GPU machines that lack
#      the -dev packages);
#   2. CPU-vs-CUDA byte-exact equivalence of every --dtype cast pair over special
#      and random values, with GB/s of each (tests/gpu/test_cuda_cast.c);
#   3. every fixture in tests/fixtures (every chunk grid and plan shape the readers
#      produce) exported with --dtype=bf16|f16|f32 as safetensors and as
#      pytorch_model.bin, --device=cpu vs --device=cuda: the bytes must be equal;
#   4. benchmark g: tensor-parallel Shard(1) DCP (and, for contrast, Shard(0)) read
#      as bf16, CPU vs CUDA executor, GB/s each: through `export` (no FUSE), and
#      through the mount when /dev/fuse works;
#   5. the loader: unshardfs.load(device="cuda:0") of every fixture equals the CPU
#      load (checksum on the device, bytes, ties, shard, dtype=), and, on the 4 GB
#      Shard(0) and Shard(1) checkpoints of step 4, its GB/s against safe_open + .to
#      through the mount, dcp.load into CUDA tensors, fastsafetensors on a native
#      consolidated copy and the pinned host-to-device ceiling, each peer's bytes
#      checksummed on the device against the loader's (tests/gpu/loader_gpu.py).
# Prints everything and copies it to ${OUT:-docs}/gpu-results.txt. Takes about 6 minutes
# (UNSHARDFS_GPU_BENCH_GB=1 for a quicker one). Prepare it here first with
# tests/gpu/prepare.sh (binaries and wheels in .gpu/), then UNSHARDFS_GPU_PREBUILT=.gpu.
# Needs python3 with torch for the benchmark generator (skipped otherwise).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUTDIR="${OUT:-docs}"
mkdir -p "$OUTDIR"
LOG="$OUTDIR/gpu-results.txt"
exec > >(tee "$LOG") 2>&1
echo "== $(date -u) $(uname -m) $(nproc) cpus"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -4
command -v nvcc >/dev/null || PATH="/usr/local/cuda/bin:$PATH"
FAIL=0
WORK=$(mktemp -d)
trap 'fusermount3 -u "$WORK/mnt" 2>/dev/null; rm -rf "$WORK"' EXIT

if [[ -n "${UNSHARDFS_GPU_PREBUILT:-}" ]]; then
    echo "== prebuilt binaries from $UNSHARDFS_GPU_PREBUILT"
    US="$UNSHARDFS_GPU_PREBUILT/unshardfs"
    CAST="$UNSHARDFS_GPU_PREBUILT/test_cuda_cast"
else
    echo "== build (build-gpu, -Dcuda=enabled)"
    if [[ -f build-gpu/build.ninja ]]; then
        meson setup --reconfigure build-gpu -Dcuda=enabled >/dev/null
    else
        meson setup build-gpu -Dcuda=enabled --buildtype=release >/dev/null
    fi || { echo "FAILED: meson setup"; exit 1; }
    ninja -C build-gpu >/dev/null || { echo "FAILED: build"; exit 1; }
    US=./build-gpu/fs/unshardfs
    CAST=./build-gpu/tests/gpu/test_cuda_cast
fi
"$US" --version

echo "== 1. CPU vs CUDA cast equivalence"
"$CAST"
rc=$?
[[ $rc -eq 77 ]] && { echo "no usable CUDA device: nothing more to check"; exit 0; }
[[ $rc -ne 0 ]] && { echo "FAILED: CPU and CUDA casts differ"; FAIL=1; }

echo "== 2. every fixture, every cast, both views: --device=cpu vs --device=cuda"
same=0 diff=0
for src in tests/fixtures/{sample,single,noindex} tests/fixtures/torch/[a-z]* \
           tests/fixtures/deepspeed/[a-z]*; do
    [[ $src == *.md ]] && continue
    for dt in bf16 f16 f32; do
        for view in safetensors bin; do
            a=$("$US" export -q --view=$view --dtype=$dt --device=cpu "$src" - 2>/dev/null |
                sha256sum) || continue
            b=$("$US" export -q --view=$view --dtype=$dt --device=cuda "$src" - | sha256sum)
            if [[ "$a" == "$b" ]]; then
                same=$((same + 1))
            else
                diff=$((diff + 1))
                echo "DIFFER: $src --dtype=$dt --view=$view"
            fi
        done
    done
done
echo "fixture exports equal on CPU and CUDA: $same/$((same + diff))"
((diff)) && FAIL=1

gbps() { awk -v b="$1" -v t0="$2" -v t1="$3" 'BEGIN { printf "%.2f", b / (t1 - t0) / 1e9 }'; }

echo "== 3. benchmark g: DCP fp32 read as bf16, CPU vs CUDA executor"
PY="${PYTHON:-python3}"
if ! "$PY" -c "import torch" 2>/dev/null; then
    echo "skipped: needs python3 with torch"
    exit $FAIL
fi
for shard in 1 0; do
    # f16 too: the pair whose CPU conversion was slowest before F16C.
    extra=""
    [[ $shard == 0 ]] && extra=f16
    "$PY" tests/bench/gen.py dcp "$WORK/ckpt$shard" --gb "${UNSHARDFS_GPU_BENCH_GB:-4}" --world 4 --shard $shard >/dev/null ||
        { echo "FAILED: generator"; exit 1; }
    size=$("$US" export -q --dtype=bf16 "$WORK/ckpt$shard" - | wc -c)
    sums=""
    for dev in cpu cuda cpu cuda; do
        t0=$(date +%s.%N)
        "$US" export -q --dtype=bf16 --device=$dev "$WORK/ckpt$shard" - >/dev/null
        t1=$(date +%s.%N)
        echo "export Shard($shard) fp32->bf16 $dev: $(gbps "$size" "$t0" "$t1") GB/s"
    done
    for dt in $extra; do
        for dev in cpu cuda auto; do
            t0=$(date +%s.%N)
            "$US" export -q --dtype=$dt --device=$dev "$WORK/ckpt$shard" - >/dev/null
            t1=$(date +%s.%N)
            echo "export Shard($shard) fp32->$dt $dev: $(gbps "$size" "$t0" "$t1") GB/s"
        done
    done
    for dev in cpu cuda; do
        sums+="$("$US" export -q --dtype=bf16 --device=$dev "$WORK/ckpt$shard" - | sha256sum) "
    done
    [[ $(echo $sums | tr ' ' '\n' | grep -v '^-$' | sort -u | wc -l) -eq 1 ]] ||
        { echo "FAILED: CPU and CUDA exports differ for Shard($shard)"; FAIL=1; }
done

mkdir -p "$WORK/mnt"
if [[ -e /dev/fuse ]] && "$US" -q "$WORK/ckpt1" "$WORK/mnt" 2>/dev/null; then
    fusermount3 -u "$WORK/mnt" 2>/dev/null || umount "$WORK/mnt"
    for dev in cpu cuda auto cpu cuda auto; do
        "$US" -q --dtype=bf16 --device=$dev "$WORK/ckpt1" "$WORK/mnt" || { FAIL=1; break; }
        t0=$(date +%s.%N)
        sum=$(sha256sum "$WORK/mnt/model.safetensors" | cut -c1-16)
        t1=$(date +%s.%N)
        # The daemonized server must hold a CUDA context (a fork after CUDA
        # initialisation would leave it silently on the CPU).
        ctx=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory \
                  --format=csv,noheader 2>/dev/null | grep -c unshardfs)
        fusermount3 -u "$WORK/mnt" 2>/dev/null || umount "$WORK/mnt"
        echo "mount Shard(1) fp32->bf16 $dev: $(gbps "$size" "$t0" "$t1") GB/s" \
             "(sha256 $sum, CUDA contexts held by the daemon: $ctx)"
        # cuda must hold a context; auto stays on the CPU (fs/main.c).
        if [[ $dev == cuda && $ctx -eq 0 ]]; then
            echo "FAILED: the --device=cuda mount did not use the GPU"
            FAIL=1
        elif [[ $dev != cuda && $ctx -ne 0 ]]; then
            echo "FAILED: the --device=$dev mount opened a CUDA context"
            FAIL=1
        fi
    done
else
    echo "mount benchmark skipped: FUSE cannot mount here"
fi

echo "== 4. the loader (docs/loader.md): load(device=cuda:0) vs the CPU, and vs its peers"
if [[ -n "${UNSHARDFS_GPU_PREBUILT:-}" ]]; then
    export UNSHARDFS_LIB="$UNSHARDFS_GPU_PREBUILT/libunshard.so"
else
    export UNSHARDFS_BUILD=build-gpu
fi
# fastsafetensors, the peer at the limit: from the wheels tests/gpu/prepare.sh brought.
if ! "$PY" -c "import fastsafetensors" 2>/dev/null &&
   [[ -d "${UNSHARDFS_GPU_PREBUILT:-/nonexistent}/wheels" ]]; then
    "$PY" -m pip install -q --no-index --find-links "$UNSHARDFS_GPU_PREBUILT/wheels" \
        --target "$WORK/pydeps" fastsafetensors &&
        export PYTHONPATH="$WORK/pydeps${PYTHONPATH:+:$PYTHONPATH}" ||
        echo "fastsafetensors: could not be installed from the wheels"
fi
"$PY" tests/gpu/loader_gpu.py check --device cuda:0 tests/fixtures/{sample,single,noindex} \
    tests/fixtures/torch/[a-z]* tests/fixtures/deepspeed/[a-z]* tests/fixtures/ties/[a-z]* ||
    { echo "FAILED: the loader's CUDA tensors differ from its CPU ones"; FAIL=1; }
if [[ -e /dev/fuse ]]; then
    "$PY" -W ignore tests/gpu/loader_gpu.py bench --device cuda:0 --daemon "$US" \
        "$WORK/ckpt0" "$WORK/ckpt1" ||
        { echo "FAILED: loader benchmark (a peer's bytes differ, or it failed)"; FAIL=1; }
else
    echo "loader benchmark skipped: FUSE cannot mount here"
fi

if ((FAIL)); then
    echo "GPU check FAILED"
    exit 1
fi
echo "GPU check passed"
