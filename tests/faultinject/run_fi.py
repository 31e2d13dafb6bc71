#!/usr/bin/env python3
"""Fault injection: every allocation and every read unshardfs makes may fail.

For each representative checkpoint (a DCP, a zstd DCP, a DeepSpeed ZeRO-3, a
training script's torch.save, sharded safetensors with an index) and each class
of call (alloc: malloc/calloc/realloc; io: read/pread), this first counts the
calls `unshardfs inspect SOURCE` makes under the ASan+UBSan build, then reruns
it once per call N with call N failing (libfishim.so, fishim.c: ENOMEM / EIO),
for every N, or a stride through them when there are more than --max-runs.

Every run must either succeed (exit 0, nothing on stderr) or refuse cleanly
(exit 2, exactly one line `unshardfs: <path>: <reason>` on stderr): never a
crash, a sanitizer report (ASan, UBSan, LeakSanitizer with leak checking on),
a hang (--timeout) or another exit status.  Exits 1 if any run broke that;
the last line printed is the summary.

    python3 tests/faultinject/run_fi.py [--build build-asan] [--max-runs 400]
"""
import argparse
import concurrent.futures as cf
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(REPO, "tests", "fixtures")

# (label, SOURCE relative to tests/fixtures): one per reader family.
CASES = [
    ("dcp", "torch/fsdp2_2rank"),
    ("dcp-zstd", "torch/zstd_pyzstd"),
    ("deepspeed-zero3", "deepspeed/z3_2rank"),
    ("torch.save", "torch/script_rng/checkpoint.pt"),
    ("safetensors-index", "sample"),
]
CLASSES = ["alloc", "io"]


def env_for(shim, klass, n, report):
    env = dict(os.environ)
    env.update({
        "LD_PRELOAD": shim,
        "US_FI_CLASS": klass,
        "US_FI_FAIL": str(n),
        "US_FI_REPORT": report,
        # verify_asan_link_order=0: the shim comes before libasan (fishim.c).
        "ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=1:abort_on_error=0",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    })
    return env


def run_one(binary, shim, source, klass, n, timeout, tmp):
    """One run of `inspect SOURCE` with call n of klass failing (0: none).
    Returns (n, problem or None, calls counted, whether call n failed)."""
    report = os.path.join(tmp, f"{klass}-{n}-{os.getpid()}-{time.monotonic_ns()}")
    try:
        r = subprocess.run([binary, "inspect", source], env=env_for(shim, klass, n, report),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return n, f"hung (no exit within {timeout} s)", 0, False
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
    if any(s in err for s in ("Sanitizer", "runtime error:", "internal error")):
        problem = "sanitizer or assertion report"
    elif r.returncode == 0 and not err:
        problem = None
    elif r.returncode == 2 and len(lines) == 1 and lines[0].startswith("unshardfs: "):
        problem = None
    elif r.returncode == 2:
        problem = f"exit 2 but {len(lines)} stderr lines, not one `unshardfs:` line"
    else:
        problem = f"exit status {r.returncode}"
    if problem:
        problem += "\n      " + "\n      ".join(lines[-12:] or ["(stderr empty)"])
    return n, problem, calls, fired


def points(total, max_runs):
    """Every call 1..total, or a stride through them (both ends included)."""
    if total <= max_runs:
        return list(range(1, total + 1))
    stride = -(-total // max_runs)
    pts = list(range(1, total + 1, stride))
    return pts + ([total] if pts[-1] != total else [])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build-asan")
    ap.add_argument("--max-runs", type=int, default=400,
                    help="most runs per case and class (a stride beyond that)")
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--case", action="append", help="only these case labels")
    a = ap.parse_args()
    binary = os.path.join(REPO, a.build, "fs", "unshardfs")
    shim = os.path.join(REPO, a.build, "tests", "faultinject", "libfishim.so")
    for p in (binary, shim):
        if not os.path.exists(p):
            print(f"fault injection: {p} is not built (tools/setup.sh)", file=sys.stderr)
            return 1
    start = time.monotonic()
    total_calls = total_runs = failed = 0
    with tempfile.TemporaryDirectory(prefix="unshardfs-fi-") as tmp, \
            cf.ThreadPoolExecutor(a.jobs) as pool:
        for label, rel in CASES:
            if a.case and label not in a.case:
                continue
            source = os.path.join(FIX, rel)
            for klass in CLASSES:
                _, problem, calls, _ = run_one(binary, shim, source, klass, 0, a.timeout, tmp)
                if problem or calls == 0:
                    print(f"FAILED {label} {klass}: the counting run: {problem or 'no report'}")
                    failed += 1
                    continue
                pts = points(calls, a.max_runs)
                res = sorted(pool.map(lambda n: run_one(binary, shim, source, klass, n,
                                                        a.timeout, tmp), pts))
                bad = [(n, p) for n, p, _, _ in res if p]
                fired = sum(1 for _, _, _, f in res if f)
                total_calls += calls
                total_runs += len(pts) + 1
                failed += len(bad)
                print(f"{label:18} {klass:5} {calls:6} calls, {len(pts):4} runs "
                      f"(stride {-(-calls // len(pts))}), {fired:4} failed a call, "
                      f"{len(bad)} broke", flush=True)
                for n, p in bad[:5]:
                    print(f"  FAILED: {label} ({rel}), {klass} call {n}: {p}")
                if len(bad) > 5:
                    print(f"  ... and {len(bad) - 5} more")
    secs = time.monotonic() - start
    print(f"fault injection: {failed} failed of {total_runs} runs "
          f"({total_calls} calls counted) in {secs:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
