"""The bad-input matrix: every broken checkpoint make_bad_inputs.py derives from the
fixtures must be refused at mount, cleanly.

For each case, `unshardfs -f SOURCE MNT` (the real binary, $UNSHARDFS_BUILD/fs/unshardfs)
must within 5 s: exit with status 2; print exactly one stderr line
`unshardfs: <path>: <reason>` whose <path> is the offending file relative to SOURCE
(SOURCE itself as it was given);
leave nothing mounted; never echo a foreign file's bytes (a case's `no_echo` strings);
and never run what a hostile pickle names (its payload would create a marker file). Cases marked `strace` run under `strace -f -e trace=open,openat`
and must not open any file outside SOURCE (other than the system's: /proc, /dev, /etc,
/lib, /usr, ... -- the loader, libc and FUSE's own).

The last test prints `N/N refused cleanly`.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import make_bad_inputs  # noqa: E402

BUILD = os.path.join(REPO, os.environ.get("UNSHARDFS_BUILD", "build"))
BINARY = os.path.join(BUILD, "fs", "unshardfs")
FUSERMOUNT = shutil.which("fusermount3") or "fusermount3"
STRACE = shutil.which("strace")
LINE_RE = re.compile(r"^unshardfs: (\S.*?): (.+)$")
TIMEOUT = 5.0
# Opened by any process (the dynamic loader, libc, locale, FUSE): not SOURCE's files.
SYSTEM_PREFIXES = ("/etc/", "/lib", "/usr/", "/proc/", "/dev/", "/sys/", "/run/")

RESULTS = {}  # case -> None (refused cleanly) or a failure message


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    if not os.access(BINARY, os.X_OK):
        pytest.fail(f"{BINARY} is not built: run `bash tools/setup.sh`")
    out = str(tmp_path_factory.mktemp("bad_inputs"))
    specs = make_bad_inputs.build(out)
    yield specs
    shutil.rmtree(out, ignore_errors=True)


def _opened_paths(log):
    """Paths of the files successful open/openat calls opened, from an `strace -y` log
    (which decorates the returned descriptor with its resolved path: `= 3</a/b>`)."""
    out = []
    with open(log, errors="replace") as f:
        for line in f:
            m = re.search(r"open(?:at)?\(.*\) = \d+<(.*)>$", line.rstrip())
            if m:
                out.append(m.group(1))
    return out


def _unmount(mnt):
    for _ in range(20):
        if not os.path.ismount(mnt):
            return
        if subprocess.run([FUSERMOUNT, "-u", mnt], capture_output=True).returncode == 0:
            return
        time.sleep(0.25)
    subprocess.run([FUSERMOUNT, "-uz", mnt], capture_output=True)


def run_case(spec):
    """Mount one case; return None if refused cleanly, else what was wrong."""
    root = spec["root"]
    source = os.path.join(root, spec["source"])
    tmp = tempfile.mkdtemp(prefix="unshardfs-bad-")
    mnt = os.path.join(tmp, "mnt")
    os.mkdir(mnt)
    log = os.path.join(tmp, "strace.log")
    argv = [BINARY, "-f", *spec["opts"], source, mnt]
    use_strace = bool(spec["strace"])
    if use_strace:
        # -y: print every descriptor with the path it resolves to
        argv = [STRACE, "-f", "-qq", "-y", "-e", "trace=open,openat", "-o", log] + argv
    env = dict(os.environ)
    if use_strace:
        # LeakSanitizer cannot run under ptrace (an ASan build would print why)
        env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "detect_leaks=0"]))
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, cwd=tmp, env=env)
    try:
        try:
            _out, err = proc.communicate(timeout=TIMEOUT * (3 if use_strace else 1))
        except subprocess.TimeoutExpired:
            mounted = os.path.ismount(mnt)
            _unmount(mnt)
            proc.kill()
            proc.communicate()
            return f"no answer within {TIMEOUT}s (mounted={mounted})"
        elapsed = time.monotonic() - start
        mounted = os.path.ismount(mnt)
        if mounted:
            _unmount(mnt)
        err = err.decode(errors="replace")
        problems = []
        if mounted:
            problems.append("left a mount behind")
        if proc.returncode != 2:
            problems.append(f"exit status {proc.returncode}, not 2")
        lines = err.splitlines()
        # "." is SOURCE itself, which the line names as it was given
        expected = [source if p == "." else p for p in spec["path"]]
        if len(lines) != 1:
            problems.append(f"{len(lines)} stderr lines, not 1: {lines[:4]!r}")
        else:
            m = LINE_RE.match(lines[0])
            if not m:
                problems.append(f"stderr not 'unshardfs: <path>: <reason>': {lines[0]!r}")
            elif m.group(1) not in expected:
                problems.append(f"names {m.group(1)!r}, expected {' or '.join(expected)!r}: "
                                f"{lines[0]!r}")
            for s in spec["no_echo"]:
                if s in lines[0]:
                    problems.append(f"echoes a foreign file's bytes ({s!r}): {lines[0]!r}")
        if not use_strace and elapsed > TIMEOUT:
            problems.append(f"took {elapsed:.1f}s")
        if spec["marker"] and os.path.exists(os.path.join(root, spec["marker"])):
            problems.append("THE PICKLE'S PAYLOAD RAN (marker file exists)")
        if use_strace:
            src_real = os.path.realpath(source)
            src_dir = src_real if os.path.isdir(src_real) else os.path.dirname(src_real)
            for p in _opened_paths(log):
                ap = os.path.realpath(p)
                if ap == src_dir or ap.startswith(src_dir + os.sep):
                    continue
                if ap.startswith(SYSTEM_PREFIXES) or ap == BINARY or ap.startswith(BUILD):
                    continue
                problems.append(f"opened {ap}, outside SOURCE")
        return "; ".join(problems) or None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.parametrize("name", list(make_bad_inputs.CASES))
def test_refused(cases, name):
    spec = cases[name]
    assert STRACE or not spec["strace"], \
        "strace is missing (tools/setup.sh installs it): the no-file-outside-SOURCE check cannot run"
    problem = run_case(spec)
    RESULTS[name] = problem
    assert problem is None, f"{name} ({spec['why']}): {problem}"


def test_zz_summary(cases, capsys):
    """Runs last (pytest keeps file order): the matrix's score, printed uncaptured."""
    n = len(make_bad_inputs.CASES)
    ok = sum(1 for v in RESULTS.values() if v is None)
    with capsys.disabled():
        print(f"\nbad inputs: {ok}/{n} refused cleanly")
    assert len(RESULTS) == n, "run the whole module for the summary"
    assert ok == n, {k: v for k, v in RESULTS.items() if v}
