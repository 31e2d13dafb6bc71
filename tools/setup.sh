#!/usr/bin/env bash
# tools/setup.sh — set up everything unshardfs needs on a Debian 12 machine, idempotently:
#   1. apt packages (only when one is missing, checked with dpkg -s)
#   2. the Python venv for the integration tests, cached by the hash of
#      tests/requirements.txt, tests/requirements-nobuild.txt and tests/requirements-nodeps.txt under ${UNSHARDFS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/unshardfs}
#   3. the meson builds: build/ (debugoptimized) and build-asan/ (ASan + UBSan)
#   4. `import unshardfs` in the venv (a .pth naming this checkout's lib/python)
#
# Execute it (`bash tools/setup.sh`) or source it (`. tools/setup.sh`); sourced, it also
# exports UNSHARDFS_VENV (the venv's path). Environment knobs:
#   UNSHARDFS_CACHE     where venvs are cached
#   UNSHARDFS_NO_BUILD=1 skip step 3 (tools/demo.sh builds only the binary itself)
#   UNSHARDFS_NO_ASAN=1 skip the ASan/UBSan build
#   UNSHARDFS_NO_FUZZ=1 skip the libFuzzer build (build-fuzz/, clang + ASan + UBSan);
#                       it is also skipped, with a message, when clang or libFuzzer
#                       (libclang-rt-14-dev) is missing

_unshardfs_root() { (cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd); }

_unshardfs_venv_path() {
    local root hash cache
    root="$(_unshardfs_root)"
    hash="$(cat "$root/tests/requirements.txt" "$root/tests/requirements-nobuild.txt" \
            "$root/tests/requirements-nodeps.txt" |
            sha256sum | cut -c1-16)"
    cache="${UNSHARDFS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/unshardfs}"
    printf '%s/venv-%s\n' "$cache" "$hash"
}

if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then
    # Sourced: do the work in a child bash (so `set -e` cannot kill the caller's shell),
    # then export the venv path into the caller.
    bash "${BASH_SOURCE[0]}" "$@" || return $?
    UNSHARDFS_VENV="$(_unshardfs_venv_path)"
    export UNSHARDFS_VENV
    return 0
fi

set -euo pipefail

ROOT="$(_unshardfs_root)"
cd "$ROOT"
log() { printf '[setup] %s\n' "$*" >&2; }

# ---------------------------------------------------------------- 1. system packages
PACKAGES=(build-essential meson ninja-build pkg-config fuse3 libfuse3-dev libcjson-dev
          libzstd-dev python3-venv attr strace rsync valgrind
          libcurl4-openssl-dev  # remote SOURCEs (lib/storage/remote.h): HTTP range reads, SigV4
          s3fs  # the peer of tests/bench/s3_bench.py (s3fs-fuse under unshardfs)
          nginx-light  # object front of tests/bench/s3serve.py (it starts its own nginx on loopback)
          man-db  # `man unshardfs` after meson install (tests/integration/test_install.py)
          clang libclang-rt-14-dev)  # clang + libFuzzer runtime: build-fuzz/ (Debian 12)
missing=()
for p in "${PACKAGES[@]}"; do
    if ! dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed'; then
        missing+=("$p")
    fi
done
if ((${#missing[@]})); then
    SUDO=()
    if [[ $(id -u) -ne 0 ]]; then
        if command -v sudo >/dev/null 2>&1; then
            SUDO=(sudo)
        else
            log "need root (or sudo) to install: ${missing[*]}"
            exit 1
        fi
    fi
    log "installing apt packages: ${missing[*]}"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
else
    log "apt packages: all present"
fi

# ---------------------------------------------------------------- 2. python venv
VENV="$(_unshardfs_venv_path)"
MARKER="$VENV/.unshardfs-installed"
if [[ -f "$MARKER" && -x "$VENV/bin/python" ]]; then
    log "venv: reusing $VENV"
else
    log "venv: creating $VENV (first time: torch with its CUDA wheels, ~5.5 GB, a minute or two)"
    rm -rf "$VENV"
    mkdir -p "$(dirname "$VENV")"
    python3 -m venv "$VENV"
    start=$(date +%s)
    "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q \
        -r tests/requirements.txt
    DS_BUILD_OPS=0 "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q \
        --no-build-isolation -r tests/requirements-nobuild.txt
    # torchtitan: its declared dependencies (datasets, wandb, ...) are unused
    "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q \
        --no-deps -r tests/requirements-nodeps.txt
    end=$(date +%s)
    log "venv: pip install took $((end - start)) s"
    sha256sum tests/requirements.txt tests/requirements-nobuild.txt tests/requirements-nodeps.txt > "$MARKER"
fi

# ---------------------------------------------------------------- 3. builds
if [[ "${UNSHARDFS_NO_BUILD:-0}" == 1 ]]; then
    log "builds: skipped (UNSHARDFS_NO_BUILD=1)"
elif [[ -f meson.build ]]; then
    if [[ -f build/build.ninja ]]; then
        meson setup --reconfigure build --buildtype=debugoptimized >/dev/null
    else
        meson setup build --buildtype=debugoptimized
    fi
    meson compile -C build
    if [[ "${UNSHARDFS_NO_ASAN:-0}" != 1 ]]; then
        if [[ -f build-asan/build.ninja ]]; then
            meson setup --reconfigure build-asan -Db_sanitize=address,undefined \
                -Db_lundef=false --buildtype=debug >/dev/null
        else
            meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false \
                --buildtype=debug
        fi
        meson compile -C build-asan
    fi
    # libFuzzer targets (tests/fuzz, docs/hardening.md): clang with ASan + UBSan.
    if [[ "${UNSHARDFS_NO_FUZZ:-0}" == 1 ]]; then
        log "fuzz: skipped (UNSHARDFS_NO_FUZZ=1)"
    elif ! command -v clang >/dev/null 2>&1 ||
         ! ls "$(clang -print-resource-dir 2>/dev/null)"/lib/linux/libclang_rt.fuzzer-*.a \
              >/dev/null 2>&1; then
        log "fuzz: clang or its libFuzzer runtime (libclang-rt-14-dev) is missing: not building build-fuzz/"
    else
        FUZZ_OPTS=(-Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled)
        if [[ -f build-fuzz/build.ninja ]]; then
            meson setup --reconfigure build-fuzz "${FUZZ_OPTS[@]}" >/dev/null
        else
            CC=clang meson setup build-fuzz "${FUZZ_OPTS[@]}"
        fi
        meson compile -C build-fuzz
    fi
else
    log "no meson.build yet: skipping the build"
fi

# ---------------------------------------------------------------- 4. python package
# `import unshardfs` in the venv: a .pth naming this checkout's lib/python (nothing is
# copied or compiled; the package finds build/lib/loader/libunshard.so next to it, or
# $UNSHARDFS_LIB). The venv is shared by checkouts: the last one set up wins.
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
printf '%s\n' "$ROOT/lib/python" > "$SITE/unshardfs.pth"
log "python: import unshardfs -> $ROOT/lib/python"

log "binary: $ROOT/build/fs/unshardfs"
echo "UNSHARDFS_VENV=$VENV"
