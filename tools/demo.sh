#!/usr/bin/env bash
# tools/demo.sh — set up what the demo needs (apt packages, the cached Python venv, the
# normal build of build/fs/unshardfs: no ASan or fuzz build), mount the bundled sharded
# checkpoint (tests/fixtures/sample: a tiny Llama in 3 safetensors shards + index), load
# the mount with transformers and safetensors, compare with loading the original
# directory, unmount. The set-up and the build print one line each; their output goes to
# a log file, shown only when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
LOG="${TMPDIR:-/tmp}/unshardfs-demo.log"
: >"$LOG"

# step "WHAT" CMD...: one line for the step, its output to $LOG; on failure, the log's end.
step() {
    local what="$1" t0=$SECONDS
    shift
    printf 'demo: %s ... ' "$what"
    if ! "$@" >>"$LOG" 2>&1; then
        echo "FAILED (log: $LOG)"
        tail -n 25 "$LOG" >&2
        exit 1
    fi
    echo "done ($((SECONDS - t0)) s)"
}

# Only the binary: the unit tests, build-asan/ and build-fuzz/ are the test suite's.
build_binary() {
    [[ -f build/build.ninja ]] || meson setup build --buildtype=debugoptimized
    meson compile -C build fs/unshardfs
}

echo "demo: set-up and build output: $LOG"
step "set-up: apt packages and the Python venv (first run: ~2 min, ~5.5 GB)" \
    env UNSHARDFS_NO_BUILD=1 bash tools/setup.sh
step "build: build/fs/unshardfs" build_binary
# the venv's path: tools/setup.sh's last line, in the log
UNSHARDFS_VENV="$(sed -n 's/^UNSHARDFS_VENV=//p' "$LOG" | tail -n 1)"
PY="$UNSHARDFS_VENV/bin/python"
BIN="$ROOT/build/fs/unshardfs"
SRC="$ROOT/tests/fixtures/sample"

MNT="$(mktemp -d "${TMPDIR:-/tmp}/unshardfs-demo.XXXXXX")"
cleanup() {
    if mountpoint -q "$MNT" 2>/dev/null; then
        fusermount3 -u "$MNT" || fusermount3 -uz "$MNT" || true
    fi
    rmdir "$MNT" 2>/dev/null || true
}
trap cleanup EXIT

echo
echo "== source: $SRC"
ls -l "$SRC"
echo
echo "== unshardfs inspect $SRC | head"
table="$("$BIN" inspect "$SRC")"
sed -n '1,8p' <<<"$table"
echo "... ($(wc -l <<<"$table") lines)"
echo
echo "== mount: $BIN $SRC $MNT"
"$BIN" "$SRC" "$MNT"
for _ in $(seq 100); do mountpoint -q "$MNT" && break; sleep 0.05; done
mountpoint -q "$MNT" || { echo "demo: $MNT is not mounted" >&2; exit 1; }
ls -l "$MNT"
echo

HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error \
"$PY" - "$SRC" "$MNT" <<'PYEOF'
import math, os, sys
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging
hf_logging.disable_progress_bar()

src, mnt = sys.argv[1], sys.argv[2]
path = os.path.join(mnt, "model.safetensors")
with safe_open(path, framework="pt") as f:
    names = list(f.keys())
    print(f"== safe_open({path!r})")
    print(f"   metadata: {f.metadata()}")
    print(f"   {len(names)} tensors, {sum(math.prod(f.get_slice(n).get_shape()) for n in names)} elements")
    for n in names[:5]:
        s = f.get_slice(n)
        print(f"   {n:45s} {s.get_dtype():5s} {s.get_shape()}")
    print("   ...")

torch.manual_seed(0)
ids = torch.randint(0, 256, (1, 12))
ref = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
got = AutoModelForCausalLM.from_pretrained(mnt, dtype=torch.float32).eval()
nparams = sum(p.numel() for p in got.parameters())
print(f"== AutoModelForCausalLM.from_pretrained({mnt!r}): {type(got).__name__}, "
      f"{len(got.state_dict())} tensors, {nparams} parameters")
with torch.no_grad():
    a = ref(ids).logits
    b = got(ids).logits
print(f"   logits {tuple(b.shape)} for input {ids.tolist()[0]}")
print(f"   first logits via mount:  {b[0, 0, :4].tolist()}")
print(f"   first logits via source: {a[0, 0, :4].tolist()}")
same_sd = all(torch.equal(x, y) for x, y in zip(ref.state_dict().values(), got.state_dict().values()))
if torch.equal(a, b) and same_sd and ref.state_dict().keys() == got.state_dict().keys():
    print("   logits and state dict: identical")
else:
    print("   logits or state dict DIFFER", file=sys.stderr)
    sys.exit(1)
PYEOF

echo
echo "== unmount: fusermount3 -u $MNT"
fusermount3 -u "$MNT"
echo "demo: OK"
