#!/usr/bin/env bash
# tests/fuzz/run_fuzz.sh — run every libFuzzer target for a while on its seed corpus.
#
#   tests/fuzz/run_fuzz.sh [BUILD_DIR [SECONDS [TARGET...]]]
#
# BUILD_DIR defaults to build-fuzz (configured with CC=clang -Dfuzz=true and
# -Db_sanitize=address,undefined), SECONDS to 30 per target, TARGET to all of
# tests/fuzz/fuzz_*.c. Seeds are extracted from tests/fixtures (make_seeds.py)
# into a temporary directory; the corpus a run grows stays there too (set
# UNSHARDFS_FUZZ_CORPUS=DIR to keep and reuse it across runs). A crash, leak, hang
# (-timeout=10 per input), UBSan report or out-of-memory (-rss_limit_mb=2048)
# fails the script; its reproducer is kept in $UNSHARDFS_FUZZ_ARTIFACTS (default:
# the temporary directory, which is then not removed) and printed.
# -max_len is per target (max_len below): time per input grows with its size,
# and the seeds that reach deep (one-entry DCP .metadata cuts, small archives)
# are far below it.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD="${1:-build-fuzz}"
SECS="${2:-30}"
shift $(( $# > 2 ? 2 : $# ))
if (($#)); then
    TARGETS=("$@")
else
    TARGETS=()
    for f in tests/fuzz/fuzz_*.c; do
        t="$(basename "$f" .c)"
        TARGETS+=("${t#fuzz_}")
    done
fi

TMP="$(mktemp -d "${TMPDIR:-/tmp}/unshardfs-fuzz-XXXXXX")"
# The directory-based targets rewrite a file per input: on tmpfs when there is one.
WORK="$(mktemp -d /dev/shm/unshardfs-fuzz-XXXXXX 2>/dev/null || echo "$TMP")"
KEEP=0
cleanup() {
    if [[ "$WORK" != "$TMP" ]]; then rm -rf "$WORK"; fi
    if ((KEEP == 0)); then rm -rf "$TMP"; fi
}
trap cleanup EXIT
SEEDS="$TMP/seeds"
python3 tests/fuzz/make_seeds.py "$SEEDS" 2>/dev/null
CORPUS="${UNSHARDFS_FUZZ_CORPUS:-$TMP/corpus}"
ARTIFACTS="${UNSHARDFS_FUZZ_ARTIFACTS:-$TMP/artifacts}"
mkdir -p "$ARTIFACTS"
# UBSan reports must fail the run, not just print.
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export TMPDIR="$WORK"  # the directory-based targets make their dirs here

# Largest input per target: above its useful seeds, below what slows it down.
max_len() {
    case "$1" in
        dcp_metadata) echo 8192 ;;
        index|pickle|deepspeed|ds_universal) echo 16384 ;;
        dcp_zstd|safetensors) echo 32768 ;;
        *) echo 65536 ;;
    esac
}

failed=()
for t in "${TARGETS[@]}"; do
    bin="$BUILD/tests/fuzz/fuzz_$t"
    if [[ ! -x "$bin" ]]; then
        echo "fuzz_$t: not built in $BUILD" >&2
        failed+=("$t")
        continue
    fi
    mkdir -p "$CORPUS/$t" "$SEEDS/$t"
    log="$TMP/fuzz_$t.log"
    start=$(date +%s)
    if "$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len "$t")" \
            -print_final_stats=1 -artifact_prefix="$ARTIFACTS/${t}-" \
            "$CORPUS/$t" "$SEEDS/$t" >"$log" 2>&1; then
        stats="$(grep -E '^#[0-9]+' "$log" | tail -1 | sed -E 's/ +/ /g')"
        runs="$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$log")"
        echo "fuzz_$t: ok, $runs executions in $(( $(date +%s) - start )) s; last: $stats" >&2
    else
        echo "fuzz_$t: FAILED (see below; reproducer under $ARTIFACTS)" >&2
        grep -E 'ERROR|SUMMARY|runtime error|==[0-9]+==|#[0-9]+ 0x' "$log" | head -40 >&2 || tail -40 "$log" >&2
        failed+=("$t")
        KEEP=1
    fi
done
if ((${#failed[@]})); then
    echo "FUZZ FAILED: ${failed[*]} (logs and reproducers kept in $TMP)" >&2
    exit 1
fi
echo "fuzz: ${#TARGETS[@]} targets ran ${SECS}s each without a finding" >&2
