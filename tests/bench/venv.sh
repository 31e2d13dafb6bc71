#!/usr/bin/env bash
# tests/bench/venv.sh — make (once) the benchmark venv and print its python.
#
# It extends the test venv of tools/setup.sh (torch, safetensors, ... are not installed
# twice: a .pth file adds the test venv's site-packages) with the peer converters pinned
# in tests/bench/requirements.txt (accelerate, deepspeed). Cached beside the test venv,
# keyed by both requirements files. UNSHARDFS_VENV names the test venv to extend
# (default: the one tools/setup.sh makes; made by running it when missing).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cache="${UNSHARDFS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/unshardfs}"
base="${UNSHARDFS_VENV:-$cache/venv-$(cat "$root/tests/requirements.txt" \
    "$root/tests/requirements-nobuild.txt" "$root/tests/requirements-nodeps.txt" | sha256sum | cut -c1-16)}"
if [[ ! -x "$base/bin/python" ]]; then
    echo "[bench] test venv $base missing: running tools/setup.sh" >&2
    UNSHARDFS_NO_ASAN=1 UNSHARDFS_NO_FUZZ=1 bash "$root/tools/setup.sh" >&2
fi
hash="$(cat "$root/tests/requirements.txt" "$root/tests/bench/requirements.txt" <(echo "$base") |
        sha256sum | cut -c1-16)"
venv="$cache/bench-venv-$hash"
marker="$venv/.unshardfs-bench-installed"
if [[ ! -f "$marker" ]]; then
    echo "[bench] creating $venv (accelerate, deepspeed; torch comes from $base)" >&2
    rm -rf "$venv"
    mkdir -p "$cache"
    "$base/bin/python" -m venv "$venv"     # the same interpreter as the test venv
    site_base="$("$base/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    site_new="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    # addsitedir (not a bare path line) so the test venv's own .pth files are processed
    echo "import site; site.addsitedir('$site_base')" > "$site_new/zz-unshardfs-test-venv.pth"
    "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q \
        setuptools==84.2.1 wheel==0.48.0 >&2
    "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q \
        --no-build-isolation -r "$root/tests/bench/requirements.txt" >&2
    touch "$marker"
fi
echo "$venv/bin/python"
