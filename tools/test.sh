#!/usr/bin/env bash
# tools/test.sh — set everything up (tools/setup.sh), then run the whole test suite:
# the integration tests against a real FUSE mount (which also run the C unit tests,
# meson test, of build/ and build-asan/), first with the ASan+UBSan daemon, then with
# the normal one; in between, fault injection (tests/faultinject/run_fi.py: every
# allocation and read of `inspect` and of a mount failing in turn, under build-asan/;
# skipped with UNSHARDFS_NO_FAULTINJECT=1 or UNSHARDFS_NO_ASAN=1), then every libFuzzer target runs for
# ${UNSHARDFS_FUZZ_SECONDS:-20} s on its seed corpus (tests/fuzz/run_fuzz.sh; skipped,
# saying so, when build-fuzz/ could not be built: no clang). Both pytest runs include
# the bad-input matrix (tests/bad_inputs). Exits non-zero if any of it fails; the last
# line printed is always a runner's summary: pytest's own (the normal run's, or on failure
# the failed run's real counts, with the run named), the fault-injection run's summary, or
# the fuzz run's count of failures.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools/setup.sh
. tools/setup.sh
PY="$UNSHARDFS_VENV/bin/python"

# pytest's own summary line ("2 failed, 698 passed, 3 skipped in 71.3s") of a log.
summary_of() {
    grep -E '^(=+ )?[0-9]+ (passed|failed|error|errors|skipped|deselected)\b' "$1" |
        tail -1 | sed -E 's/^=+ //; s/ =+$//'
}
LOG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/unshardfs-test-XXXXXX")"
trap 'rm -rf "$LOG_DIR"' EXIT

# Run pytest with the build $1 (a label for messages in $2), its output shown and kept;
# on failure, the last line printed is its real summary and the script exits 1.
run_pytest() {
    local build="$1" what="$2" log="$LOG_DIR/$1.log" rc=0
    shift 2
    UNSHARDFS_BUILD="$build" "$PY" -m pytest tests/integration tests/bad_inputs -q "$@" \
        2>&1 | tee "$log" || rc=$?
    if ((rc != 0)); then
        echo "FAILED: the $what run above failed (pytest exit status $rc)" >&2
        local line
        line="$(summary_of "$log" || true)"
        echo "${line:-pytest exited with status $rc} ($what run)"
        exit 1
    fi
}

if [[ "${UNSHARDFS_NO_ASAN:-0}" != 1 ]]; then
    echo "== integration tests with the ASan+UBSan daemon (build-asan/)" >&2
    run_pytest build-asan "ASan+UBSan" "$@"
    if [[ "${UNSHARDFS_NO_FAULTINJECT:-0}" == 1 ]]; then
        echo "== fault injection: SKIPPED (UNSHARDFS_NO_FAULTINJECT=1)" >&2
    else
        echo "== fault injection: each allocation and read failing in turn (build-asan/)" >&2
        if ! "$PY" tests/faultinject/run_fi.py --build build-asan 2>&1 |
                tee "$LOG_DIR/faultinject.log"; then
            echo "FAILED: fault injection found a crash, leak, hang or unclean refusal" \
                 "(see above)" >&2
            echo "$(grep '^fault injection:' "$LOG_DIR/faultinject.log" | tail -1 ||
                    echo 'fault injection: the driver failed') (fault-injection run)"
            exit 1
        fi
    fi
fi
if [[ "${UNSHARDFS_NO_FUZZ:-0}" == 1 ]]; then
    echo "== fuzz: SKIPPED (UNSHARDFS_NO_FUZZ=1)" >&2
elif [[ ! -x build-fuzz/tests/fuzz/fuzz_pickle ]]; then
    echo "== fuzz: SKIPPED: build-fuzz/ is not built (clang or libclang-rt-14-dev missing?" \
         "see tools/setup.sh)" >&2
else
    echo "== fuzz: every target for ${UNSHARDFS_FUZZ_SECONDS:-20} s (build-fuzz/)" >&2
    if ! tests/fuzz/run_fuzz.sh build-fuzz "${UNSHARDFS_FUZZ_SECONDS:-20}" 2>&1 |
            tee "$LOG_DIR/fuzz.log"; then
        echo "FAILED: a fuzz target found a crash, leak, hang or UB (see above)" >&2
        echo "$(grep -c ': FAILED' "$LOG_DIR/fuzz.log") of" \
             "$(ls tests/fuzz/fuzz_*.c | wc -l) fuzz targets failed (fuzz run)"
        exit 1
    fi
fi
echo "== integration tests with the normal daemon (build/)" >&2
run_pytest build "normal" "$@"
