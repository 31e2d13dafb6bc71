"""The loader against the readers it replaces, side by side in one run (docs/loader.md).

    sudo python tests/bench/loader_bench.py [--gb G] [--reps N] [--dir D] [--threads T]

Generates (once, kept in D) a DCP checkpoint of about G GB of fp32 tensors (gen.py dcp,
2 ranks, Shard(0)), mounts it, and loads the whole state dict into host memory with:

  loader      unshardfs.load(SOURCE)                    (what load(mount) does too)
  loader/mnt  unshardfs.load(MOUNT)                     (resolves the mount to SOURCE)
  loader/huge unshardfs.load(SOURCE, hugepages=True)    (destination in 2 MiB pages)
  st/mnt      safetensors.torch.load_file(MOUNT/model.safetensors), every tensor then
              cloned (load_file maps the file: alone, it reads nothing)
  bin/mnt     torch.load(MOUNT/pytorch_model.bin, mmap=True, weights_only=True), every
              tensor then cloned (mmap alone reads nothing: the clone makes it a load)
  dcp         torch's full-checkpoint load without a process group
              (state_dict_loader._load_state_dict_from_keys: dcp.load with no_dist)

each in a fresh Python process (timed from just before the call, torch imported), warm
(files in the page cache) and cold (echo 3 > /proc/sys/vm/drop_caches before each run,
root only). Prints one table: seconds (best of N), GB/s, and each peer's time / the
loader's, then a cold `cat` of the source files (the disk's pace, for context).
Not a unit test: numbers, for docs/benchmarks.md.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(REPO, os.environ.get("UNSHARDFS_BUILD", "build"))
sys.path.insert(0, HERE)

CHILD = r"""
import os, sys, time
sys.path.insert(0, os.path.join(sys.argv[3], "lib", "python"))
import torch
kind, path = sys.argv[1], sys.argv[2]
threads = int(sys.argv[4])
t0 = time.perf_counter()
if kind in ("loader", "loader/mnt", "loader/huge"):
    import unshardfs
    sd = unshardfs.load(path, threads=threads, hugepages=kind == "loader/huge")
elif kind == "st/mnt":
    from safetensors.torch import load_file
    sd = {k: v.clone() for k, v in load_file(os.path.join(path, "model.safetensors")).items()}
elif kind == "bin/mnt":
    m = torch.load(os.path.join(path, "pytorch_model.bin"), mmap=True, weights_only=True)
    sd = {k: v.clone() for k, v in m.items()}
elif kind == "dcp":
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys
    sd = _load_state_dict_from_keys(checkpoint_id=path)
    sd = sd.get("model", sd)
dt = time.perf_counter() - t0
n = sum(t.numel() * t.element_size() for t in sd.values())
print(dt, n)
"""

KINDS = ["loader", "loader/huge", "loader/mnt", "st/mnt", "bin/mnt", "dcp"]


def drop_caches():
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def run(kind, path, threads):
    r = subprocess.run([sys.executable, "-c", CHILD, kind, path, REPO, str(threads)],
                       capture_output=True, text=True, env=dict(
                           os.environ, UNSHARDFS_LIB=os.path.join(
                               BUILD, "lib", "loader", "libunshard.so")))
    if r.returncode:
        raise RuntimeError(f"{kind}: {r.stderr.strip()[-800:]}")
    dt, n = r.stdout.split()
    return float(dt), int(n)


class Mount:
    def __init__(self, src):
        self.mnt = tempfile.mkdtemp(prefix="unshardfs-lbench-")
        self.proc = subprocess.Popen([os.path.join(BUILD, "fs", "unshardfs"), "-f", "-q",
                                      src, self.mnt], stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no mount: {self.proc.stderr.read()!r}")
            time.sleep(0.05)

    def close(self):
        subprocess.run(["fusermount3", "-u", self.mnt])
        self.proc.wait(timeout=30)
        os.rmdir(self.mnt)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--dir", default="/tmp/unshardfs-loader-bench")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--kinds", default=",".join(KINDS))
    a = ap.parse_args()
    kinds = a.kinds.split(",")
    src = os.path.join(a.dir, f"dcp-{a.gb:g}gb")
    if not os.path.exists(os.path.join(src, ".metadata")):
        import gen
        print(f"generating {src} ...", file=sys.stderr, flush=True)
        gen.make_dcp(src, a.gb)
    root = os.geteuid() == 0
    m = Mount(src)
    res = {}
    try:
        for cold in ([False, True] if root else [False]):
            for kind in kinds:
                path = src if kind in ("loader", "loader/huge", "dcp") else m.mnt
                if not cold:
                    run(kind, path, a.threads)  # warm up: every file in the page cache
                best = None
                for _ in range(a.reps):
                    if cold:
                        drop_caches()
                    dt, n = run(kind, path, a.threads)
                    best = dt if best is None else min(best, dt)
                res[cold, kind] = (best, n)
                print(f"{'cold' if cold else 'warm'} {kind}: {best:.2f} s", file=sys.stderr,
                      flush=True)
    finally:
        m.close()
    if not res:
        return
    floor = None
    if root:  # the disk's own pace, as context for the cold column
        for _ in range(a.reps):
            drop_caches()
            t0 = time.perf_counter()
            subprocess.run(f"cat {src}/* > /dev/null", shell=True, check=True)
            dt = time.perf_counter() - t0
            floor = dt if floor is None else min(floor, dt)
    size = next(iter(res.values()))[1]
    print(f"\nstate dict: {size / 1e9:.2f} GB ({src}), {os.cpu_count()} CPUs, "
          f"threads={a.threads or 'default'}, best of {a.reps}")
    print("| load | warm s | warm GB/s | warm ratio | cold s | cold GB/s | cold ratio |")
    print("|---|---|---|---|---|---|---|")
    for kind in kinds:
        cells = []
        for cold in (False, True):
            if (cold, kind) not in res:
                cells += ["-", "-", "-"]
                continue
            dt, n = res[cold, kind]
            assert n == size, (kind, n, size)
            ref = res[cold, "loader"][0] if (cold, "loader") in res else dt
            cells += [f"{dt:.2f}", f"{n / dt / 1e9:.2f}", f"{dt / ref:.2f}×"]
        print(f"| {kind} | " + " | ".join(cells) + " |")
    print("(ratio: that load's time / the loader's; above 1 the loader is faster)")
    if floor:
        print(f"cold `cat` of the source files to /dev/null: {floor:.2f} s "
              f"({size / floor / 1e9:.2f} GB/s of state dict)")
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
