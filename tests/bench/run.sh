#!/bin/sh
# tests/bench/run.sh [a b c ...] - build what the benchmarks need, run them, write
# docs/benchmarks.md and print the ratios.  Run as root to drop caches (b, c, d, f)
# and to let both FUSE servers raise their read-ahead.  See tests/bench/bench.py for
# the environment knobs (BENCH_GB, BENCH_HUGE_GB, BENCH_REPS, BENCH_DIR).  Python: the
# bench venv of tests/bench/venv.sh (the test venv plus the peer converters pinned in
# tests/bench/requirements.txt), or $PYTHON.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${UNSHARDFS_BUILD:-build}
py=${PYTHON:-$(bash "$here/venv.sh")}
[ -f "$repo/$build/build.ninja" ] || meson setup "$repo/$build" "$repo"
ninja -C "$repo/$build" >/dev/null
make -s -C "$here" OUT="$repo/$build/bench"
exec "$py" "$here/bench.py" "$@"
