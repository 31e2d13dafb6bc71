#!/usr/bin/env python3
"""Fault injection: every allocation and every read unshardfs makes may fail.

For each representative checkpoint (a DCP, a zstd DCP, a DeepSpeed ZeRO-3, a
training script's torch.save, sharded safetensors with an index) and each class
of call (alloc: malloc/calloc/realloc; io: read/pread), this first counts the
calls `unshardfs inspect --json SOURCE` makes under the ASan+UBSan build, then reruns
it once per call N with call N failing (libfishim.so, fishim.c: ENOMEM / EIO),
for every N, or a stride through them when there are more than --max-runs.

Every run must either succeed (exit 0, nothing on stderr, the fault-free run's
table on stdout: a failure that is worked around must not change the result) or
refuse cleanly
(exit 2, exactly one line `unshardfs: <path>: <reason>` on stderr): never a
crash, a sanitizer report (ASan, UBSan, LeakSanitizer with leak checking on),
a hang (--timeout) or another exit status.

The mount cases (`mount:` labels) run the daemon in the foreground on a DCP,
a zstd DCP and a torch.save with strided storages and a tie, read all of
model.safetensors through the mount and unmount.  A failure at
mount must be a clean refusal as above; one while serving may only make reads
fail (EIO): the bytes that are read must be the fault-free run's, and the
daemon must still unmount and exit 0 with no sanitizer report.  The kernel
retries a read that failed once, so mounts also run `io-sticky`: every read
from call N on fails.  Their call counts vary a little from run to run
(threads, the kernel's read sizes).

Exits 1 if any run broke these rules; the last line printed is the summary.

    python3 tests/faultinject/run_fi.py [--build build-asan] [--max-runs 400]
"""
import argparse
import concurrent.futures as cf
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIX = os.path.join(REPO, "tests", "fixtures")

# (label, SOURCE relative to tests/fixtures): one per reader family.
CASES = [
    ("dcp", "torch/fsdp2_2rank"),
    ("dcp-zstd", "torch/zstd_pyzstd"),
    ("deepspeed-zero3", "deepspeed/z3_2rank"),
    ("torch.save", "torch/script_rng/checkpoint.pt"),
    ("safetensors-index", "sample"),
]
# Mounted, with model.safetensors read in full: the read path too.
MOUNT_CASES = [
    ("mount:dcp", "torch/fsdp2_2rank"),
    ("mount:dcp-zstd", "torch/zstd"),
    # strided and offset storages (the gather path), a tie by shared storage
    ("mount:torch.save", "torch/single_bin/pytorch_model.bin"),
]
CLASSES = ["alloc", "io"]
# and for mounts: every read from call N on failing (fishim.c US_FI_STICKY):
# a single failed read while serving is retried by the kernel
MOUNT_CLASSES = CLASSES + ["io-sticky"]
READ_FILE = "model.safetensors"


def env_for(shim, klass, n, report, callers="all"):
    env = dict(os.environ)
    if klass.endswith("-sticky"):
        env["US_FI_STICKY"] = "1"
    env.update({
        "US_FI_CALLERS": callers,
        "LD_PRELOAD": shim,
        "US_FI_CLASS": klass.removesuffix("-sticky"),
        "US_FI_FAIL": str(n),
        "US_FI_REPORT": report,
        # verify_asan_link_order=0: the shim comes before libasan (fishim.c).
        "ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=1:abort_on_error=0",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
        "LSAN_OPTIONS": "suppressions=" + os.path.join(HERE, "lsan.supp"),
    })
    return env


def run_one(binary, shim, source, klass, n, timeout, tmp, want=None):
    """One run of `inspect --json SOURCE` with call n of klass failing (0:
    none); a run that succeeds must print @want, the fault-free table.
    Returns (n, problem or None, calls counted, whether call n failed,
    outcome, stdout)."""
    report = os.path.join(tmp, f"{klass}-{n}-{os.getpid()}-{time.monotonic_ns()}")
    try:
        r = subprocess.run([binary, "inspect", "--json", source],
                           env=env_for(shim, klass, n, report),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return n, f"hung (no exit within {timeout} s)", 0, False, "hung", None
    err = r.stderr.decode(errors="replace")
    calls, fired = 0, False
    try:
        with open(report) as f:
            c, fd = f.read().split()
            calls, fired = int(c), fd == "1"
        os.unlink(report)
    except (OSError, ValueError):
        pass
    lines = err.splitlines()
    if sanitizer_report(err):
        problem = "sanitizer or assertion report"
    elif r.returncode == 0 and not err:
        problem = None if want is None or r.stdout == want else \
            "succeeded, but the table differs from the fault-free run's"
    elif r.returncode == 2 and len(lines) == 1 and lines[0].startswith("unshardfs: "):
        problem = None
    elif r.returncode == 2:
        problem = f"exit 2 but {len(lines)} stderr lines, not one `unshardfs:` line"
    else:
        problem = f"exit status {r.returncode}"
    if problem:
        problem += "\n      " + "\n      ".join(lines[-12:] or ["(stderr empty)"])
    return n, problem, calls, fired, "refused" if r.returncode == 2 else "succeeded", r.stdout


def sanitizer_report(err):
    return any(s in err for s in ("Sanitizer", "runtime error:", "internal error"))


def read_all(path, timeout):
    """The bytes of @path, "errno" when a read failed, or None when it hung
    (read by a child process, which a hung FUSE request cannot freeze us in)."""
    try:
        r = subprocess.run(["cat", path], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return r.stdout if r.returncode == 0 else "errno"


def unmount(mnt):
    for _ in range(50):
        if subprocess.run(["fusermount3", "-u", mnt], stderr=subprocess.DEVNULL).returncode == 0:
            return True
        time.sleep(0.1)
    subprocess.run(["fusermount3", "-uz", mnt], stderr=subprocess.DEVNULL)
    return False


def run_mount(binary, shim, source, klass, n, timeout, tmp, want=None):
    """unshardfs -f SOURCE MNT with call n failing, model.safetensors read in
    full, unmounted.  Returns (n, problem, calls, fired, outcome[, bytes
    read])."""
    mnt = tempfile.mkdtemp(dir=tmp)
    report = mnt + ".report"
    # callers=app: only unshardfs's own calls (and libcjson's, libzstd's)
    # fail in the daemon; libfuse and thread start-up do not survive one
    # (fishim.c).
    p = subprocess.Popen([binary, "-f", source, mnt],
                         env=env_for(shim, klass, n, report, callers="app"),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    data, deadline = None, time.monotonic() + timeout
    while p.poll() is None and not os.path.ismount(mnt) and time.monotonic() < deadline:
        time.sleep(0.02)
    mounted = os.path.ismount(mnt)
    if mounted:
        data = read_all(os.path.join(mnt, READ_FILE), timeout)
        if data is None:
            subprocess.run(["fusermount3", "-uz", mnt], stderr=subprocess.DEVNULL)
            p.kill()
            p.communicate()
            return n, f"hung: a read of {READ_FILE} got no answer in {timeout} s", \
                0, False, "hung"
        unmount(mnt)
    try:
        _, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        p.kill()
        subprocess.run(["fusermount3", "-uz", mnt], stderr=subprocess.DEVNULL)
        _, err = p.communicate()
        return n, f"hung (still running after {timeout} s)", 0, False, "hung"
    err = err.decode(errors="replace")
    calls, fired = 0, False
    try:
        with open(report) as f:
            c, fd = f.read().split()
            calls, fired = int(c), fd == "1"
    except (OSError, ValueError):
        pass
    lines = err.splitlines()
    if sanitizer_report(err):
        problem = "sanitizer or assertion report"
    elif not mounted:
        ok = p.returncode == 2 and len(lines) == 1 and lines[0].startswith("unshardfs: ")
        problem = None if ok else f"not mounted: exit {p.returncode}, {len(lines)} stderr lines"
    elif p.returncode != 0:
        problem = f"mounted, then exit status {p.returncode}"
    elif isinstance(data, bytes) and want is not None and data != want:
        problem = f"{READ_FILE} read without error but its bytes differ"
    else:
        problem = None
    if problem:
        problem += "\n      " + "\n      ".join(lines[-12:] or ["(stderr empty)"])
    if not mounted:
        return n, problem, calls, fired, "refused"
    return n, problem, calls, fired, "read EIO" if isinstance(data, str) else "read ok", data


def points(total, max_runs):
    """Every call 1..total, or a stride through them (both ends included)."""
    if total <= max_runs:
        return list(range(1, total + 1))
    stride = -(-total // max_runs)
    pts = list(range(1, total + 1, stride))
    return pts + ([total] if pts[-1] != total else [])


def sweep(label, rel, klass, a, binary, shim, tmp, pool):
    """Count, then fail each chosen call.  (calls, runs, broken runs)."""
    source = os.path.join(FIX, rel)
    mount = label.startswith("mount:")
    if mount:
        r = run_mount(binary, shim, source, klass, 0, a.timeout, tmp)
        problem, calls, want = r[1], r[2], r[-1]
        problem = problem or (None if isinstance(want, bytes) else f"not read: {want}")
        one = lambda n: run_mount(binary, shim, source, klass, n, a.timeout, tmp, want)[:5]
        cap = a.max_mount_runs
    else:
        _, problem, calls, _, _, want = run_one(binary, shim, source, klass, 0,
                                                a.timeout, tmp)
        one = lambda n: run_one(binary, shim, source, klass, n, a.timeout, tmp, want)[:5]
        cap = a.max_runs
    if problem or calls == 0:
        print(f"  FAILED: {label} {klass}: the fault-free run: {problem or 'no report'}")
        return 0, 1, 1
    pts = points(calls, cap)
    res = sorted(pool.map(one, pts))
    bad = [(n, p) for n, p, *_ in res if p]
    fired = sum(1 for r in res if r[3])
    outcomes = {}
    for r in res:
        outcomes[r[4]] = outcomes.get(r[4], 0) + 1
    print(f"{label:18} {klass:9} {calls:6} calls, {len(pts):4} runs "
          f"(stride {-(-calls // len(pts))}), {fired:4} failed a call "
          f"({', '.join(f'{v} {k}' for k, v in sorted(outcomes.items()))}), "
          f"{len(bad)} broke", flush=True)
    for n, p in bad[:5]:
        print(f"  FAILED: {label} ({rel}), {klass} call {n}: {p}")
    if len(bad) > 5:
        print(f"  ... and {len(bad) - 5} more")
    return calls, len(pts) + 1, len(bad)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build-asan")
    ap.add_argument("--max-runs", type=int, default=300,
                    help="most inspect runs per case and class (a stride beyond)")
    ap.add_argument("--max-mount-runs", type=int, default=150,
                    help="most mount runs per case and class (0: no mounts)")
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--case", action="append", help="only these case labels")
    a = ap.parse_args()
    binary = os.path.join(REPO, a.build, "fs", "unshardfs")
    shim = os.path.join(REPO, a.build, "tests", "faultinject", "libfishim.so")
    for p in (binary, shim):
        if not os.path.exists(p):
            print(f"fault injection: {p} is not built (tools/setup.sh)")
            return 1
    cases = CASES + (MOUNT_CASES if a.max_mount_runs > 0 else [])
    start = time.monotonic()
    total_calls = total_runs = failed = 0
    with tempfile.TemporaryDirectory(prefix="unshardfs-fi-",
                                     ignore_cleanup_errors=True) as tmp, \
            cf.ThreadPoolExecutor(a.jobs) as pool:
        for label, rel in cases:
            if a.case and label not in a.case:
                continue
            for klass in MOUNT_CLASSES if label.startswith("mount:") else CLASSES:
                c, r, f = sweep(label, rel, klass, a, binary, shim, tmp, pool)
                total_calls, total_runs, failed = total_calls + c, total_runs + r, failed + f
    secs = time.monotonic() - start
    print(f"fault injection: {failed} failed of {total_runs} runs "
          f"({total_calls} calls counted) in {secs:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
