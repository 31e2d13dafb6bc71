#!/usr/bin/env bash
# tools/test.sh — set everything up (tools/setup.sh), then run the whole test suite:
# the integration tests against a real FUSE mount (which also run the C unit tests,
# meson test, of build/ and build-asan/), first with the ASan+UBSan daemon, then with
# the normal one; in between, every libFuzzer target runs for
# ${UNSHARDFS_FUZZ_SECONDS:-20} s on its seed corpus (tests/fuzz/run_fuzz.sh; skipped,
# saying so, when build-fuzz/ could not be built: no clang). Both pytest runs include
# the bad-input matrix (tests/bad_inputs). Exits non-zero if any of it fails; the last
# line printed is the summary of pytest's run on the normal build.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools/setup.sh
. tools/setup.sh
PY="$UNSHARDFS_VENV/bin/python"

if [[ "${UNSHARDFS_NO_ASAN:-0}" != 1 ]]; then
    echo "== integration tests with the ASan+UBSan daemon (build-asan/)" >&2
    if ! UNSHARDFS_BUILD=build-asan "$PY" -m pytest tests/integration tests/bad_inputs -q "$@"; then
        echo "FAILED: the ASan+UBSan run above failed" >&2
        echo "1 failed (sanitizer run)"
        exit 1
    fi
fi
if [[ "${UNSHARDFS_NO_FUZZ:-0}" == 1 ]]; then
    echo "== fuzz: SKIPPED (UNSHARDFS_NO_FUZZ=1)" >&2
elif [[ ! -x build-fuzz/tests/fuzz/fuzz_pickle ]]; then
    echo "== fuzz: SKIPPED: build-fuzz/ is not built (clang or libclang-rt-14-dev missing?" \
         "see tools/setup.sh)" >&2
else
    echo "== fuzz: every target for ${UNSHARDFS_FUZZ_SECONDS:-20} s (build-fuzz/)" >&2
    if ! tests/fuzz/run_fuzz.sh build-fuzz "${UNSHARDFS_FUZZ_SECONDS:-20}"; then
        echo "FAILED: a fuzz target found a crash, leak, hang or UB (see above)" >&2
        echo "1 failed (fuzz run)"
        exit 1
    fi
fi
echo "== integration tests with the normal daemon (build/)" >&2
exec "$PY" -m pytest tests/integration tests/bad_inputs -q "$@"
