"""The loader on a device (tests/gpu/run.sh step 4; docs/loader.md).

    python tests/gpu/loader_gpu.py check [--device cuda:0] SOURCE...
    python tests/gpu/loader_gpu.py bench [--device cuda:0] SOURCE

check: for each SOURCE, unshardfs.load(device=DEV) equals the CPU load byte for byte
(a checksum computed on the device, then the bytes themselves), with the same tie
identity, shard slices and dtype= casts (cast on the device after the copy vs on the
CPU). bench: SOURCE mounted; load(MOUNT, device=DEV) vs safe_open(MOUNT/
model.safetensors) + get_tensor(name).to(DEV) for every name, warm, best of 3, GB/s.
With --device cpu both run the staging ring on the CPU (what this machine can check
without a GPU). Exit status 1 when anything differs.
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

import torch  # noqa: E402
import unshardfs  # noqa: E402


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


def bench(src, device):
    from safetensors import safe_open
    mnt = tempfile.mkdtemp(prefix="unshardfs-gpubench-")
    proc = subprocess.Popen([os.path.join(BUILD, "fs", "unshardfs"), "-f", "-q", src, mnt])
    while not os.path.ismount(mnt):
        if proc.poll() is not None:
            raise SystemExit("mount failed")
        time.sleep(0.05)
    try:
        def ours():
            sd = unshardfs.load(mnt, device=device)
            sync(device)
            return sum(t.numel() * t.element_size() for t in sd.values())

        def peer():
            n = 0
            with safe_open(os.path.join(mnt, "model.safetensors"), framework="pt") as f:
                for k in f.keys():
                    t = f.get_tensor(k).to(device)
                    n += t.numel() * t.element_size()
            sync(device)
            return n

        res = {}
        for name, fn in (("loader", ours), ("safe_open+.to", peer)):
            fn()  # warm
            best = None
            for _ in range(3):
                t0 = time.perf_counter()
                n = fn()
                dt = time.perf_counter() - t0
                best = dt if best is None else min(best, dt)
            res[name] = (best, n)
            print(f"{name} -> {device}: {best:.2f} s, {n / best / 1e9:.2f} GB/s")
        print(f"loader vs safe_open+.to: {res['safe_open+.to'][0] / res['loader'][0]:.2f}x")
    finally:
        subprocess.run(["fusermount3", "-u", mnt])
        proc.wait()
        os.rmdir(mnt)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["check", "bench"])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("sources", nargs="+")
    a = ap.parse_args()
    if a.what == "check":
        sys.exit(1 if check(a.sources, a.device) else 0)
    bench(a.sources[0], a.device)


if __name__ == "__main__":
    main()
