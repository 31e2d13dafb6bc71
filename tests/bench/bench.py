"""unshardfs benchmarks: every number is a ratio against a peer measured side by side
in the same run (machines are noisy).  Run through tests/bench/run.sh (root: it drops
caches and sets the bdi read-ahead of the peer's mount).  Writes docs/benchmarks.md.

Environment: BENCH_DIR (scratch, default /tmp/unshardfs-bench), BENCH_GB (large DCP
size, default 4), BENCH_HUGE_GB (extra RSS point, default 0 = skip), BENCH_REPS (3).
"""
import datetime
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(REPO, os.environ.get("UNSHARDFS_BUILD", "build"))
US = os.path.join(BUILD, "fs", "unshardfs")
BASE = os.path.join(BUILD, "bench", "baseline_fs")
PY = sys.executable
sys.path.insert(0, HERE)
import gen  # noqa: E402

SCRATCH = os.environ.get("BENCH_DIR", "/tmp/unshardfs-bench")
GB = float(os.environ.get("BENCH_GB", "4"))
HUGE = float(os.environ.get("BENCH_HUGE_GB", "0"))
REPS = int(os.environ.get("BENCH_REPS", "3"))
# The peer's read-ahead when ours cannot be read back (not root): a: the same
# as unshardfs set for its own mount.
RA_KB = int(os.environ.get("BENCH_RA_KB", "1024"))
ROOT = os.geteuid() == 0
rows = []          # (id, what, ours, peer, ratio, target)
notes = []


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def drop_caches():
    subprocess.run(["sync"])
    if ROOT:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")


def read_all(path, bufsize=8 << 20):
    buf = bytearray(bufsize)
    mv = memoryview(buf)
    n = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            k = os.readv(fd, [mv])
            if k == 0:
                return n
            n += k
    finally:
        os.close(fd)


def warm(paths):
    for p in paths:
        read_all(p)


def files_of(d):
    return [os.path.join(d, f) for f in sorted(os.listdir(d))
            if os.path.isfile(os.path.join(d, f))]


def bdi_of(mnt):
    st = os.stat(mnt)
    return f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/read_ahead_kb"


def read_ahead_kb(mnt):
    try:
        with open(bdi_of(mnt)) as f:
            return int(f.read())
    except OSError:
        return None


class Mount:
    """Start a FUSE daemon in the foreground on a fresh mountpoint; unmount on exit."""

    def __init__(self, argv, timeout=120):
        self.tmp = tempfile.mkdtemp(prefix="usbench-")
        self.mnt = os.path.join(self.tmp, "mnt")
        os.mkdir(self.mnt)
        self.err = open(os.path.join(self.tmp, "err"), "wb")
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(argv + [self.mnt], stdout=self.err, stderr=self.err,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{argv} did not mount: "
                                   + open(self.err.name).read())
            time.sleep(0.002)
        self.mount_s = time.perf_counter() - self.t0

    def path(self, *p):
        return os.path.join(self.mnt, *p)

    def hwm_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for _ in range(40):
            if subprocess.run(["fusermount3", "-u", self.mnt],
                              capture_output=True).returncode == 0:
                break
            time.sleep(0.25)
        self.proc.wait(timeout=30)
        self.err.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def us(src, *opts):
    return Mount([US, "-f", "-q", *opts, src])


def base(backing, ra_kb=None):
    m = Mount([BASE, "-f", backing])
    ra_kb = ra_kb or RA_KB
    if ROOT and ra_kb:
        # the peer gets the same kernel read-ahead as unshardfs set for itself
        try:
            with open(bdi_of(m.mnt), "w") as f:
                f.write(str(ra_kb))
        except OSError:
            pass
    return m


def timed(fn):
    t = time.perf_counter()
    r = fn()
    return time.perf_counter() - t, r


def best(xs):
    return min(xs)


def add(i, what, ours, peer, ratio, target):
    rows.append((i, what, ours, peer, ratio, target))
    log(f"[{i}] {what}: {ours} vs {peer} -> {ratio:.2f}x (target {target})")


# ---------------------------------------------------------------------------- benchmarks

DIRECT = "--direct-io=on"  # read() past the FUSE page cache: reported beside a and b


def bench_a(src, backing):
    shards = files_of(src)
    t_us, t_bl, t_dio = [], [], []
    size = os.path.getsize(backing)
    for _ in range(REPS):
        warm(shards)
        with us(src) as m:
            t, n = timed(lambda: read_all(m.path("model.safetensors")))
            ra = read_ahead_kb(m.mnt)  # raised at the first open (root)
            assert n == size
            t_us.append(t)
        with us(src, DIRECT) as m:
            t, n = timed(lambda: read_all(m.path("model.safetensors")))
            assert n == size
            t_dio.append(t)
        warm([backing])
        with base(backing, ra) as b:
            t, n = timed(lambda: read_all(b.path("model.safetensors")))
            assert n == size
            t_bl.append(t)
    g_us, g_bl = size / best(t_us) / 1e9, size / best(t_bl) / 1e9
    add("a", f"warm first read of model.safetensors ({size / 1e9:.2f} GB; read_ahead_kb "
        f"{ra})", f"{g_us:.2f} GB/s", f"{g_bl:.2f} GB/s (one-file pread FUSE server)",
        g_us / g_bl, "≥ 1.0×")
    g_dio = size / best(t_dio) / 1e9
    return [f"- a: with {DIRECT} (8 MiB reads past the FUSE page cache): {g_dio:.2f} GB/s, "
            f"{g_dio / g_bl:.2f}× the peer"]


def bench_b(src, backing):
    shards = files_of(src)
    t_us, t_nat, t_dio, t_bl, t_blnat = [], [], [], [], []
    for _ in range(REPS):
        drop_caches()
        with us(src) as m:
            size = os.path.getsize(m.path("model.safetensors"))
            t, _ = timed(lambda: read_all(m.path("model.safetensors")))
            ra = read_ahead_kb(m.mnt)
            t_us.append(t)
        drop_caches()
        with us(src, DIRECT) as m:
            t, _ = timed(lambda: read_all(m.path("model.safetensors")))
            t_dio.append(t)
        drop_caches()
        t, _ = timed(lambda: subprocess.run(["cat", *shards], stdout=subprocess.DEVNULL,
                                            check=True))
        t_nat.append(t)
        # What FUSE's page cache itself costs here: a's one-file server, cold,
        # against cat of the file it serves.
        drop_caches()
        with base(backing, ra) as b:
            t, _ = timed(lambda: read_all(b.path("model.safetensors")))
            t_bl.append(t)
        drop_caches()
        t, _ = timed(lambda: subprocess.run(["cat", backing], stdout=subprocess.DEVNULL,
                                            check=True))
        t_blnat.append(t)
    nat_bytes = sum(os.path.getsize(p) for p in shards)
    g_us, g_nat = size / best(t_us) / 1e9, nat_bytes / best(t_nat) / 1e9
    add("b", "cold read of model.safetensors (caches dropped)", f"{g_us:.2f} GB/s",
        f"{g_nat:.2f} GB/s (cat of the shards)", g_us / g_nat, "≥ 0.8×")
    g_dio = size / best(t_dio) / 1e9
    g_bl, g_blnat = size / best(t_bl) / 1e9, size / best(t_blnat) / 1e9
    return [f"- b: with {DIRECT}: {g_dio:.2f} GB/s, {g_dio / g_nat:.2f}× cat",
            f"- b: the FUSE page cache's own cost: a's one-file pread server read cold at "
            f"{g_bl:.2f} GB/s, {g_bl / g_blnat:.2f}× cat of the file it serves "
            f"({g_blnat:.2f} GB/s) in the same loop"]


# The loader of c and d, run in a fresh interpreter.  Its imports (torch,
# safetensors, the peer's converter) are done before the clock starts and are
# the same for every side: what is timed is mount-or-convert plus the load.  It
# prints "ready", waits for the mount point (or the scratch directory) on stdin,
# then works; the parent times from the line it sends to the answer.
FIRST = r"""
import sys, time
from safetensors import safe_open
import torch
mode, src = sys.argv[1:3]
if mode.startswith("accel"):
    from accelerate.utils import merge_fsdp_weights
elif mode.startswith("convert"):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
print("ready", flush=True)
mnt = sys.stdin.readline().strip()
# safe_open maps the file: get_tensor alone reads nothing, so every side copies
# each tensor it loads (.clone()), which reads its bytes.
if mode == "mount-first":
    with safe_open(mnt + "/model.safetensors", framework="pt") as f:
        k = next(iter(f.keys()))
        t = f.get_tensor(k).clone()
elif mode == "mount-all":
    n = 0
    with safe_open(mnt + "/model.safetensors", framework="pt") as f:
        for k in f.keys():
            n += f.get_tensor(k).clone().numel()
elif mode.startswith("accel"):
    # what `accelerate merge-weights SRC OUT` runs, then the same load as the mount's
    merge_fsdp_weights(src, mnt)
    with safe_open(mnt + "/model.safetensors", framework="pt") as f:
        n = 0
        for k in f.keys():
            n += f.get_tensor(k).clone().numel()
            if mode == "accel-first":
                break
else:
    out = mnt + "/converted.pt"
    dcp_to_torch_save(src, out)
    if mode == "convert-first":
        sd = torch.load(out, mmap=True, weights_only=True)["model"]
        t = next(iter(sd.values())).clone()
    else:
        sd = torch.load(out, weights_only=True)["model"]  # reads every byte
        n = sum(v.numel() for v in sd.values())
print("done", flush=True)
"""


def _run_loader(child, where, t0):
    """Send @where; seconds from @t0 to the loader's "done" (its exit, a
    second or so of torch teardown, is not the load's)."""
    child.stdin.write(where + "\n")
    child.stdin.flush()
    ok = child.stdout.readline().strip() == "done"
    t = time.perf_counter() - t0
    if child.wait() != 0 or not ok:
        raise RuntimeError(f"loader failed: {child.stderr.read()}")
    return t


def load_peer(src, mode):
    """Seconds from go to loaded, caches dropped, in an interpreter that has
    already imported everything (interpreter start and imports excluded, for
    every side alike); for the mount, the mount itself is timed."""
    child = subprocess.Popen([PY, "-c", FIRST, mode, src], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if child.stdout.readline().strip() != "ready":
        raise RuntimeError(f"loader did not start: {child.stderr.read()}")
    drop_caches()  # the interpreter's mapped libraries stay resident
    if mode.startswith("mount"):
        t0 = time.perf_counter()
        with us(src) as m:
            return _run_loader(child, m.mnt, t0)
    d = tempfile.mkdtemp(prefix="usbench-conv-", dir=SCRATCH)
    try:
        return _run_loader(child, d, time.perf_counter())
    finally:
        shutil.rmtree(d, ignore_errors=True)


def have_accelerate():
    return subprocess.run([PY, "-c", "import accelerate"], capture_output=True).returncode == 0


PEERS_CD = (("convert", "dcp_to_torch_save + torch.load"),
            ("accel", "accelerate merge-weights + safe_open"))


def bench_cd(src, size):
    peers = [p for p in PEERS_CD if p[0] != "accel" or have_accelerate()]
    if len(peers) < len(PEERS_CD):
        log(f"accelerate is not importable by {PY}: c, d skip `accelerate merge-weights` "
            "(run.sh uses the bench venv of tests/bench/venv.sh)")
    for i, kind, what in (("c", "first", "time to first tensor (mount + safe_open + one "
                           "get_tensor)"),
                          ("d", "all", "load every tensor (mount + get_tensor of each)")):
        ours, peer = [], {m: [] for m, _ in peers}
        for _ in range(max(1, REPS - 1)):  # interleaved: noise falls on all alike
            ours.append(load_peer(src, "mount-" + kind))  # drops caches itself
            for m, _label in peers:
                peer[m].append(load_peer(src, f"{m}-{kind}"))
        for m, label in peers:
            add(i, f"{what}, {size / 1e9:.1f} GB DCP, cold", f"{best(ours):.2f} s",
                f"{best(peer[m]):.2f} s ({label})", best(peer[m]) / best(ours),
                "≥ 100×" if i == "c" else "≥ 2×")


def everything(m):
    n = read_all(m.path("model.safetensors")) + read_all(m.path("pytorch_model.bin"))
    tdir = m.path("tensors")
    for dp, _dn, fns in os.walk(tdir):
        for f in fns:
            n += read_all(os.path.join(dp, f))
    return n


def bench_e(points):
    cache = None
    out = []
    for gb, src in points:
        with us(src) as m:
            t, n = timed(lambda: everything(m))
            hwm = m.hwm_kib()
        out.append((gb, hwm, n, t))
        log(f"[e] {gb} GB: read {n / 1e9:.1f} GB in {t:.1f}s, VmHWM {hwm / 1024:.1f} MiB")
    hw = [h for _g, h, _n, _t in out]
    add("e", "daemon peak RSS (VmHWM) after reading model.safetensors, pytorch_model.bin "
        "and every tensors/ file at " + ", ".join(f"{g:g}" for g, *_ in out) + " GB",
        " / ".join(f"{h / 1024:.1f}" for h in hw) + " MiB",
        "64 MiB + cache", max(hw) / min(hw), "flat (≈1.0×), ≤ 64 MiB + cache")
    return out


def bench_f(tmp):
    res = []
    for n in (1000, 20000, 100000):
        p = os.path.join(tmp, f"synth{n}")
        os.makedirs(p, exist_ok=True)
        gen.make_st(os.path.join(p, "model.safetensors"), n)
        ts = []
        for _ in range(REPS):
            drop_caches()
            with us(p) as m:
                ts.append(m.mount_s)
                if n == 1000:
                    assert len(os.listdir(m.path("tensors"))) > 0
        res.append((n, best(ts)))
    add("f", "mount time at 1k / 20k / 100k tensors (synthetic safetensors, cold cache)",
        " / ".join(f"{t * 1000:.0f} ms" for _n, t in res), "1 s at 20k", 1.0 / res[1][1],
        "≤ 1 s at 20k (ratio = 1 s / ours)")
    return res


def bench_g(src0, src1):
    out = {}
    for label, src in (("Shard(0)", src0), ("Shard(1)", src1)):
        shards = files_of(src)
        ts = []
        for _ in range(REPS):
            warm(shards)
            with us(src) as m:
                size = os.path.getsize(m.path("model.safetensors"))
                t, _ = timed(lambda: read_all(m.path("model.safetensors")))
                ts.append(t)
        out[label] = size / best(ts) / 1e9
    add("g", "TP Shard(1) assembly (4 ranks, 4096×8192 fp32, columns split), warm, CPU",
        f"{out['Shard(1)']:.2f} GB/s", f"{out['Shard(0)']:.2f} GB/s (same data, Shard(0))",
        out["Shard(1)"] / out["Shard(0)"], "report (CPU vs CUDA: docs/gpu-results.txt)")


MD = os.path.join(REPO, "docs", "benchmarks.md")
ORDER = "abcdefg"


def previous_rows():
    """Rows, '- x:' lines and (date, reps) per benchmark id of the docs/benchmarks.md
    a previous run wrote, so a run of some benchmarks keeps the others' results."""
    rows, extra, when = {}, {}, {}
    if not os.path.exists(MD):
        return rows, extra, when
    date, reps = "?", {}
    for line in open(MD, encoding="utf-8"):
        line = line.rstrip("\n")
        if line.startswith("## "):
            break  # the notes (tests/bench/notes.md) begin
        m = re.match(r"<!-- measured: (.*) -->$", line)
        if m:
            for item in m.group(1).split():
                i, d, r = re.match(r"(\w)=([\d-]+)/(\d+)$", item).groups()
                when[i] = (d, int(r))
        m = re.match(r"- date: ([\d-]+)$", line)  # a file from before per-row dates
        if m:
            date = m.group(1)
        m = re.match(r"- repetitions: best of (\d+)(?: \(c, d: best of (\d+)\))?$", line)
        if m:
            reps = {i: int(m.group(2) if i in "cd" and m.group(2) else m.group(1))
                    for i in ORDER}
        m = re.match(r"\| (\w) \|", line)
        if m and m.group(1) in ORDER:
            rows.setdefault(m.group(1), []).append(line)
        m = re.match(r"- (\w): ", line)
        if m and m.group(1) in ORDER:
            extra.setdefault(m.group(1), []).append(line)
    for i in rows:
        when.setdefault(i, (date, reps.get(i, 0)))
    return rows, extra, when


def write_md(extra, only):
    date = datetime.date.today().isoformat()
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    old_rows, old_extra, when = previous_rows()
    new_rows, new_extra = {}, {}
    for i, what, ours, peer, ratio, target in rows:
        new_rows.setdefault(i, []).append(
            f"| {i} | {what} | {ours} | {peer} | {ratio:.2f}× | {target} |")
        when[i] = (date, max(1, REPS - 1) if i in "cd" else REPS)
    for line in extra:
        new_extra.setdefault(line[2], []).append(line)
    table, notes_x = [], []
    for i in ORDER:
        src_rows, src_extra = (new_rows, new_extra) if i in only else (old_rows, old_extra)
        table += src_rows.get(i, [])
        notes_x += src_extra.get(i, [])
    shown = [i for i in ORDER if any(r.startswith(f"| {i} |") for r in table)]
    by_date = {}
    for i in shown:
        by_date.setdefault(when.get(i, ("?", 0)), []).append(i)
    lines = [
        "# Benchmarks", "",
        "Generated by `tests/bench/run.sh` (do not edit the table by hand; the notes below "
        "it are kept in `tests/bench/notes.md`).  A run of some benchmarks keeps the "
        "other rows of the previous run.", "",
        "- measured: " + "; ".join(
            f"{', '.join(ids)} on {d} (best of {r})" for (d, r), ids in by_date.items()),
        f"- machine (latest run): {os.cpu_count()} CPUs ({cpu}), {mem:.0f} GiB RAM, kernel "
        f"{platform.release()}, {'root' if ROOT else 'non-root'}",
        "<!-- measured: " + " ".join(f"{i}={when[i][0]}/{when[i][1]}" for i in shown
                                     if i in when) + " -->", "",
        "| | benchmark | unshardfs | peer | ratio | target |",
        "|---|---|---|---|---|---|",
    ] + table + [""] + notes_x + [""]
    notes_md = os.path.join(HERE, "notes.md")
    if os.path.exists(notes_md):
        lines.append(open(notes_md).read())
    with open(MD, "w") as f:
        f.write("\n".join(lines))


def main():
    only = set(sys.argv[1:]) or set("abcdefg")
    os.makedirs(SCRATCH, exist_ok=True)
    made = []
    extra = []
    try:
        d1 = os.path.join(SCRATCH, "dcp1")
        if only & set("abeg"):
            log("generating 1 GB DCP (Shard(0), 2 ranks)")
            gen.make_dcp(d1, 1.0, world=2, shard=0)
            made.append(d1)
        if only & set("ab"):
            backing = os.path.join(SCRATCH, "consolidated.safetensors")
            with us(d1) as m:
                shutil.copyfile(m.path("model.safetensors"), backing)
            made.append(backing)
            if "a" in only:
                extra += bench_a(d1, backing)
            if "b" in only:
                extra += bench_b(d1, backing)
        if "g" in only:
            d1c = os.path.join(SCRATCH, "dcp1-shard1")
            log("generating 1 GB DCP (Shard(1), 4 ranks)")
            gen.make_dcp(d1c, 1.0, world=4, shard=1)
            made.append(d1c)
            bench_g(d1, d1c)
            shutil.rmtree(d1c, ignore_errors=True)
        if only & set("cde"):
            dbig = os.path.join(SCRATCH, "dcpbig")
            log(f"generating {GB:g} GB DCP (Shard(0), 2 ranks)")
            size = gen.make_dcp(dbig, GB, world=2, shard=0)
            made.append(dbig)
            if only & set("cd"):
                load0 = os.getloadavg()[0]
                bench_cd(dbig, size)
                for i in sorted(only & set("cd")):
                    extra.append(f"- {i}: load average {load0:.1f} at the start, "
                                 f"{os.getloadavg()[0]:.1f} at the end "
                                 f"({os.cpu_count()} CPUs; other jobs count too)")
            if "e" in only:
                pts = [(1, d1), (GB, dbig)]
                if HUGE:
                    dh = os.path.join(SCRATCH, "dcphuge")
                    gen.make_dcp(dh, HUGE, world=2, shard=0)
                    made.append(dh)
                    pts.append((HUGE, dh))
                for gb, hwm, n, t in bench_e(pts):
                    extra.append(f"- e: {gb:g} GB checkpoint: read {n / 1e9:.1f} GB through "
                                 f"all three views in {t:.1f} s, daemon VmHWM "
                                 f"{hwm / 1024:.1f} MiB")
        if "f" in only:
            ft = os.path.join(SCRATCH, "synth")
            made.append(ft)
            for n, t in bench_f(ft):
                extra.append(f"- f: {n} tensors: mount {t * 1000:.0f} ms")
    finally:
        for p in made:
            if os.path.isdir(p):
                shutil.rmtree(p, ignore_errors=True)
            elif os.path.exists(p):
                os.remove(p)
    write_md(extra, only)
    for i, what, ours, peer, ratio, target in rows:
        print(f"{i}: {ratio:.2f}x  ({ours} vs {peer}; target {target})")


if __name__ == "__main__":
    main()
