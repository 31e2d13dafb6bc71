"""The loader against the readers it replaces, side by side in one run (docs/loader.md).

    sudo python tests/bench/loader_bench.py [--ckpt dcp0,tp1,zero3] [--gb G] [--reps N]
                                            [--dir D] [--threads T] [--kinds K,...]

Generates (once, kept in D) each checkpoint asked for, of about G GB of state dict:
  dcp0   DCP, 2 ranks, Shard(0) (FSDP), fp32 4096x8192 tensors       (gen.make_dcp)
  tp1    DCP, 2 ranks, Shard(1) (tensor parallel, rowwise), the same  (gen.make_dcp)
  zero3  DeepSpeed ZeRO-3, 2 ranks, bf16 training, fp32 4096x4096 Linear weights;
         with its fp32 master weights and Adam moments on disk the checkpoint is about
         3.5x the state dict, so --gb 1.2 makes a 4 GB checkpoint  (gen.make_deepspeed)
mounts it, and loads the whole state dict into host memory with:

  loader      unshardfs.load(SOURCE)                    (what load(mount) does too)
  loader/mnt  unshardfs.load(MOUNT)                     (resolves the mount to SOURCE)
  loader/huge unshardfs.load(SOURCE, hugepages=True)    (destination in 2 MiB pages)
  st/mnt      safetensors.torch.load_file(MOUNT/model.safetensors), every tensor then
              cloned (load_file maps the file: alone, it reads nothing)
  bin/mnt     torch.load(MOUNT/pytorch_model.bin, mmap=True, weights_only=True), every
              tensor then cloned (mmap alone reads nothing: the clone makes it a load)
  native      the writer's own full load: for DCP torch's load without a process group
              (state_dict_loader._load_state_dict_from_keys: dcp.load with no_dist), for
              DeepSpeed zero_to_fp32's get_fp32_state_dict_from_zero_checkpoint

each in a fresh Python process (timed from just before the call, its modules imported),
in three states of the page cache:
  warm   the source files in the page cache, and every load through a mount is that
         mount's first (a fresh mount for each run, mounting untimed): the load a user
         makes after mounting
  hot    the same, but every run through one mount, which a previous load has read: the
         mount's page cache holds the consolidated files as well (the memory twice)
  cold   echo 3 > /proc/sys/vm/drop_caches before each run (root only)
The loaders that read SOURCE itself see no difference between warm and hot; they are
timed once, and the hot row repeats their warm time.  Prints one table per checkpoint:
seconds (best of N), GB/s, and each peer's time / the loader's, then the issue's targets
(warm: the loader >= 2x the best peer; cold: its GB/s of state dict >= 0.8x the GB/s
of a cold `cat` of the source files).  Not a unit test: numbers, for docs/benchmarks.md.
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
if kind.startswith("loader"):
    import unshardfs
elif kind == "st/mnt":
    from safetensors.torch import load_file
elif kind == "native" and os.path.exists(os.path.join(path, ".metadata")):
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys
elif kind == "native":
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
t0 = time.perf_counter()
if kind.startswith("loader"):
    sd = unshardfs.load(path, threads=threads, hugepages=kind == "loader/huge")
elif kind == "st/mnt":
    sd = {k: v.clone() for k, v in load_file(os.path.join(path, "model.safetensors")).items()}
elif kind == "bin/mnt":
    m = torch.load(os.path.join(path, "pytorch_model.bin"), mmap=True, weights_only=True)
    sd = {k: v.clone() for k, v in m.items()}
elif os.path.exists(os.path.join(path, ".metadata")):
    sd = _load_state_dict_from_keys(checkpoint_id=path)
    sd = sd.get("model", sd)
else:
    sd = get_fp32_state_dict_from_zero_checkpoint(path)
dt = time.perf_counter() - t0
n = sum(t.numel() * t.element_size() for t in sd.values())
print(dt, n)
"""

KINDS = ["loader", "loader/huge", "loader/mnt", "st/mnt", "bin/mnt", "native"]
THROUGH_MOUNT = ("loader/mnt", "st/mnt", "bin/mnt")
PEERS = ("st/mnt", "bin/mnt", "native")
CKPTS = {
    "dcp0": "DCP Shard(0), 2 ranks",
    "tp1": "DCP Shard(1) (tensor parallel), 2 ranks",
    "zero3": "DeepSpeed ZeRO-3, 2 ranks",
}
MODES = ("warm", "hot", "cold")


def make(ckpt, src, gb):
    import gen
    print(f"generating {src} ...", file=sys.stderr, flush=True)
    if ckpt == "zero3":
        gen.make_deepspeed(src, gb, stage=3)
    else:
        gen.make_dcp(src, gb, shard=1 if ckpt == "tp1" else 0)


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
    dt, n = r.stdout.split()[-2:]
    return float(dt), int(n)


class Mount:
    """@src mounted by @daemon (default: this build's) at a fresh folder, in the
    foreground; tests/gpu/loader_gpu.py uses it too."""

    def __init__(self, src, daemon=None):
        self.src = src
        self.daemon = daemon or os.path.join(BUILD, "fs", "unshardfs")
        self.mnt = tempfile.mkdtemp(prefix="unshardfs-lbench-")
        self._start()

    def _start(self):
        self.proc = subprocess.Popen([self.daemon, "-f", "-q", self.src, self.mnt],
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no mount: {self.proc.stderr.read()!r}")
            time.sleep(0.05)

    def _stop(self):
        subprocess.run(["fusermount3", "-u", self.mnt])
        self.proc.wait(timeout=30)

    def fresh(self):
        """Mount again: the next read through it is its first (the source files stay
        in the page cache), as for a user who has just mounted."""
        self._stop()
        self._start()

    def close(self):
        self._stop()
        os.rmdir(self.mnt)


def timed(kind, src, mode, shared, a):
    """Best of a.reps loads of @kind in @mode (a MODES word); @shared: the hot mount."""
    best = None
    if mode != "cold":  # warm up: every source file (and, hot, the mount) in the cache
        timed_once(kind, src, mode, shared, a.threads)
    for _ in range(a.reps):
        if mode == "cold":
            drop_caches()
        dt, n = timed_once(kind, src, mode, shared, a.threads)
        best = dt if best is None else min(best, dt)
    return best, n


def timed_once(kind, src, mode, shared, threads):
    if kind not in THROUGH_MOUNT:
        return run(kind, src, threads)
    if mode == "hot":
        return run(kind, shared.mnt, threads)
    m = Mount(src)  # a fresh mount: its page cache is empty
    try:
        return run(kind, m.mnt, threads)
    finally:
        m.close()


def cat_floor(src, reps):
    """The disk's own pace: a cold `cat` of every source file, best of @reps."""
    floor = None
    for _ in range(reps):
        drop_caches()
        t0 = time.perf_counter()
        subprocess.run(f"find {src} -type f -print0 | xargs -0 cat > /dev/null",
                       shell=True, check=True)
        dt = time.perf_counter() - t0
        floor = dt if floor is None else min(floor, dt)
    return floor


def measure(ckpt, a, kinds):
    src = os.path.join(a.dir, f"{ckpt}-{a.gb:g}gb")
    if not os.path.exists(os.path.join(src, "latest" if ckpt == "zero3" else ".metadata")):
        make(ckpt, src, a.gb)
    modes = MODES if os.geteuid() == 0 else MODES[:2]
    res = {}
    shared = Mount(src)
    try:
        for mode in modes:
            for kind in kinds:
                if mode == "hot" and kind not in THROUGH_MOUNT:
                    res[mode, kind] = res["warm", kind]
                    continue
                res[mode, kind] = timed(kind, src, mode, shared, a)
                print(f"{ckpt} {mode} {kind}: {res[mode, kind][0]:.2f} s", file=sys.stderr,
                      flush=True)
    finally:
        shared.close()
    floor = cat_floor(src, a.reps) if "cold" in modes else None
    report(ckpt, src, a, kinds, modes, res, floor)


def report(ckpt, src, a, kinds, modes, res, floor):
    size = next(iter(res.values()))[1]
    disk = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(src) for f in fs)
    print(f"\n{CKPTS[ckpt]}: state dict {size / 1e9:.2f} GB, checkpoint {disk / 1e9:.2f} GB "
          f"({src}), {os.cpu_count()} CPUs, threads={a.threads or 'default'}, "
          f"best of {a.reps}")
    print("| load | " + " | ".join(f"{m} s | {m} GB/s | {m} ratio" for m in modes) + " |")
    print("|---|" + "---|" * (3 * len(modes)))
    for kind in kinds:
        cells = []
        for mode in modes:
            dt, n = res[mode, kind]
            assert n == size, (kind, n, size)
            ref = res[mode, "loader"][0] if (mode, "loader") in res else dt
            cells += [f"{dt:.2f}", f"{n / dt / 1e9:.2f}", f"{dt / ref:.2f}×"]
        print(f"| {kind} | " + " | ".join(cells) + " |")
    print("(ratio: that load's time / the loader's; above 1 the loader is faster)")
    if "loader" not in kinds:
        return
    for mode in modes[:2]:
        peers = [k for k in PEERS if k in kinds]
        if peers:
            best = min(peers, key=lambda k: res[mode, k][0])
            print(f"target, {mode}: the loader {res[mode, best][0] / res[mode, 'loader'][0]:.2f}× "
                  f"the best peer ({best}); wanted >= 2×")
    if floor:
        pace = res["cold", "loader"][1] / res["cold", "loader"][0]
        print(f"target, cold: the loader's {pace / 1e9:.2f} GB/s of state dict is "
              f"{pace / (disk / floor):.2f}× the pace of a cold `cat` of the source files "
              f"({floor:.2f} s, {disk / floor / 1e9:.2f} GB/s); wanted >= 0.8×")
    print(f"load average: {os.getloadavg()[0]:.1f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", default=",".join(CKPTS))
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--dir", default="/tmp/unshardfs-loader-bench")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--kinds", default=",".join(KINDS))
    a = ap.parse_args()
    kinds = a.kinds.split(",")
    for ckpt in a.ckpt.split(","):
        if ckpt not in CKPTS:
            ap.error(f"--ckpt {ckpt}: one of {', '.join(CKPTS)}")
        measure(ckpt, a, kinds)


if __name__ == "__main__":
    main()
