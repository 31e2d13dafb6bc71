#!/usr/bin/env bash
# tools/test.sh — set everything up (tools/setup.sh), then run the whole test suite:
# the integration tests against a real FUSE mount (which also run the C unit tests,
# meson test, of build/ and build-asan/), first with the ASan+UBSan daemon, then with
# the normal one. Exits non-zero if either run fails; the last line printed is the
# summary of pytest's run on the normal build.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools/setup.sh
. tools/setup.sh
PY="$UNSHARDFS_VENV/bin/python"

if [[ "${UNSHARDFS_NO_ASAN:-0}" != 1 ]]; then
    echo "== integration tests with the ASan+UBSan daemon (build-asan/)" >&2
    if ! UNSHARDFS_BUILD=build-asan "$PY" -m pytest tests/integration -q "$@"; then
        echo "FAILED: the ASan+UBSan run above failed" >&2
        echo "1 failed (sanitizer run)"
        exit 1
    fi
fi
echo "== integration tests with the normal daemon (build/)" >&2
exec "$PY" -m pytest tests/integration -q "$@"
