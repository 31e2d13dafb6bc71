"""The loader on a device (tests/gpu/run.sh step 4; docs/loader.md).

    python tests/gpu/loader_gpu.py check [--device cuda:0] SOURCE...
    python tests/gpu/loader_gpu.py bench [--device cuda:0] [--daemon PATH] SOURCE...

check: for each SOURCE, unshardfs.load(device=DEV) equals the CPU load byte for byte
(a checksum computed on the device, then the bytes themselves), with the same tie
identity, shard slices and dtype= casts (cast on the device after the copy vs on the
CPU). bench: each SOURCE mounted; load(MOUNT, device=DEV) against, warm, best of 3:
safe_open(MOUNT/model.safetensors) + .to(DEV) for every name (the mount path);
dcp.load into tensors made on DEV (a DCP SOURCE); fastsafetensors (when importable)
reading a consolidated copy on the native filesystem; and the pinned host-to-device
ceiling measured in the same run. Every peer's tensors are checksummed on DEV against
the loader's. With --device cpu everything runs on the CPU (what a machine without a
GPU can check). Exit status 1 when anything differs.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "lib", "python"))
BUILD = os.path.join(REPO, os.environ.get("UNSHARDFS_BUILD", "build"))

sys.path.insert(0, os.path.join(REPO, "tests", "bench"))

import torch  # noqa: E402
import unshardfs  # noqa: E402
from loader_bench import Mount  # noqa: E402  (the benchmark's mount, with fresh())


def checksum(t):
    """A position-weighted sum of the bytes, computed where @t lives."""
    b = t.contiguous().reshape(-1).view(torch.uint8).to(torch.int64)
    w = torch.arange(1, b.numel() + 1, device=b.device, dtype=torch.int64) % 65521
    return int((b * w).sum().item()) if b.numel() else 0


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and checksum(a) == checksum(b) and \
        torch.equal(a.cpu().reshape(-1).view(torch.uint8), b.cpu().reshape(-1).view(torch.uint8))


def ties(sd):
    names = sorted(sd)
    return {(a, b) for a in names for b in names if a < b and sd[a] is sd[b]}


def check(sources, device):
    staged = True  # on the CPU too: the ring is the device path's code
    bad = 0
    for src in sources:
        for kw in ({}, {"shard": (1, 3)}, {"shard": (1, 3, 1)}, {"dtype": torch.bfloat16},
                   {"dtype": torch.float16}):
            try:
                cpu = unshardfs.load(src, **kw)
            except unshardfs.UnshardfsError:
                continue  # refused on the CPU too: nothing to compare
            dev = unshardfs.load(src, device=device, staged=staged, **kw)
            diff = [n for n in cpu if n not in dev or not same(cpu[n], dev[n])]
            if sorted(cpu) != sorted(dev) or diff or ties(cpu) != ties(dev):
                print(f"DIFFER: {src} {kw}: {diff[:3]}")
                bad += 1
            elif dev and next(iter(dev.values())).device.type != torch.device(device).type:
                print(f"DIFFER: {src}: not on {device}")
                bad += 1
        print(f"ok: {src}")
    return bad


def sync(device):
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def served(name):
    """A DCP key as the mount names it (gen.py saves {"model": state_dict})."""
    return name.removeprefix("model.")


def dcp_template(src, device, names):
    """Empty tensors on @device for the tensors of the DCP checkpoint @src that the
    mount serves as @names, by their flattened keys: what dcp.load fills in place
    (the optimizer's are left out)."""
    from torch.distributed.checkpoint import FileSystemReader
    md = FileSystemReader(src).read_metadata()
    return {k: torch.empty(tuple(m.size), dtype=m.properties.dtype, device=device)
            for k, m in md.state_dict_metadata.items()
            if hasattr(m, "chunks") and served(k) in names}


def peers(src, m, native, device):
    """name -> (a function that loads the whole state dict onto @device and returns
    it as {name: tensor}, what to do untimed before each run); peers whose package is
    missing are left out, with a line.  The mount path reads a fresh mount @m each run
    (warm: the source files cached, not the mount's own page cache)."""
    from safetensors import safe_open
    out = {"loader": (lambda: unshardfs.load(m.mnt, device=device), None)}
    with unshardfs.Loader(m.mnt) as ld:
        names = set(ld.index)

    def st():  # copy=True: on the CPU a plain .to would keep the file's mapping
        with safe_open(os.path.join(m.mnt, "model.safetensors"), framework="pt") as f:
            return {k: f.get_tensor(k).to(device, copy=True) for k in f.keys()}
    out["safe_open(mnt)+.to"] = (st, m.fresh)
    if os.path.exists(os.path.join(src, ".metadata")):
        import torch.distributed.checkpoint as dcp

        def native_dcp():
            sd = dcp_template(src, device, names)
            dcp.load(sd, checkpoint_id=src, no_dist=True)
            return sd
        out["dcp.load->device"] = (native_dcp, None)
    try:
        from fastsafetensors import fastsafe_open

        def fst():
            with fastsafe_open(native, framework="pt", device=str(device), nogds=True) as f:
                return {k: f.get_tensor(k) for k in f.keys()}
        out["fastsafetensors(native copy)"] = (fst, None)
    except Exception as e:  # not installed, or not for this torch
        print(f"fastsafetensors: not run ({type(e).__name__}: {e})")
    return out


def best_of(fn, device, before=None, reps=3):
    """Seconds of the best of @reps warm runs of @fn (after one untimed; @before, if
    any, untimed before each) and its result."""
    fn()
    best, sd = None, None
    for _ in range(reps):
        if before:
            before()
        sync(device)
        t0 = time.perf_counter()
        sd = fn()
        sync(device)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best, sd


def ceiling(nbytes, device, reps=3):
    """GB/s of pinned host-to-device copies of @nbytes (at most 4 GiB, in 256 MiB
    copies from one pinned buffer): the bus's own pace, measured in this run."""
    if torch.device(device).type != "cuda":
        return None
    n = min(nbytes, 4 << 30)
    piece = min(n, 256 << 20)
    host = torch.empty(piece, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(n, dtype=torch.uint8, device=device)
    best = None
    for _ in range(reps + 1):
        sync(device)
        t0 = time.perf_counter()
        for at in range(0, n, piece):
            m = min(piece, n - at)
            dev[at:at + m].copy_(host[:m], non_blocking=True)
        sync(device)
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return n / best / 1e9


def sums(sd):
    """{name: checksum computed where the tensor lives}."""
    return {k: checksum(v) for k, v in sd.items()}


def bench(src, device, daemon):
    """The loader to @device against the peers, warm, with the bytes compared on the
    device; prints GB/s, the ratios and the issue's targets.  False when a peer's
    tensors differ from the loader's."""
    m = Mount(src, daemon)
    work = tempfile.mkdtemp(prefix="unshardfs-gpunative-")
    native = os.path.join(work, "model.safetensors")
    try:
        subprocess.run(["cp", os.path.join(m.mnt, "model.safetensors"), native], check=True)
        res, ok, ref = {}, True, None
        for name, (fn, before) in peers(src, m, native, device).items():
            dt, sd = best_of(fn, device, before)
            n = sum(t.numel() * t.element_size() for t in sd.values())
            got = sums({served(k): v for k, v in sd.items()})
            ref = ref or got
            same_bytes = got == ref
            ok &= same_bytes
            res[name] = (dt, n)
            print(f"{name} -> {device}: {dt:.2f} s, {n / dt / 1e9:.2f} GB/s"
                  f"{'' if same_bytes else '  DIFFERENT BYTES'}")
            del sd
        report(res, ceiling(res["loader"][1], device))
        return ok
    finally:
        m.close()
        subprocess.run(["rm", "-rf", work])


def report(res, bus):
    t = res["loader"][0]
    print("targets (warm): loader vs the mount path >= 5x: "
          f"{res['safe_open(mnt)+.to'][0] / t:.2f}x")
    if "dcp.load->device" in res:
        print(f"  loader vs dcp.load into device tensors: {res['dcp.load->device'][0] / t:.2f}x")
    if "fastsafetensors(native copy)" in res:
        print("  loader vs fastsafetensors on a native consolidated copy >= 1.0x: "
              f"{res['fastsafetensors(native copy)'][0] / t:.2f}x")
    if bus:
        print(f"  pinned host-to-device ceiling {bus:.2f} GB/s; the loader at "
              f"{res['loader'][1] / t / 1e9 / bus * 100:.0f}% of it (>= 60%)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["check", "bench"])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--daemon", default=os.path.join(BUILD, "fs", "unshardfs"))
    ap.add_argument("sources", nargs="+")
    a = ap.parse_args()
    if a.what == "check":
        sys.exit(1 if check(a.sources, a.device) else 0)
    ok = True
    for src in a.sources:
        print(f"== {src}")
        ok &= bench(src, a.device, a.daemon)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
