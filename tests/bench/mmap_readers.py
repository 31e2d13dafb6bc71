"""Eight concurrent mmap readers vs one sequential reader, through the mount (issue 5).

    mmap_readers.py UNSHARDFS SOURCE REFERENCE [--readers 8] [--reps 3]

SOURCE is a checkpoint; REFERENCE is model.safetensors exported from it (`unshardfs
export`), whose slices' SHA-256 the readers' bytes must equal.  For each repetition
(source files warm in the page cache, a fresh mount each time so the mount's own page
cache starts empty):

  sequential  one process reads model.safetensors front to back in 1 MiB reads
              (nothing else: the fastest a single reader goes);
  mmap        READERS processes each mmap the whole file and copy their own contiguous
              slice out of it (page faults, the way torch.load(mmap=True) and safe_open
              touch a file), all at once; then, untimed, each slice is hashed through
              mmap again and compared with the reference.

Prints GB/s of each (best of the repetitions), the ratio mmap/sequential (target: no
slower in aggregate, >= 1.0) and "mismatches: 0" when every slice was byte-exact.
"""
import argparse
import hashlib
import mmap
import multiprocessing as mp
import os
import shutil
import subprocess
import tempfile
import time


def slices(size, n):
    step = (size + n - 1) // n
    step += (-step) % mmap.PAGESIZE
    return [(o, min(step, size - o)) for o in range(0, size, step)]


def touch_slice(path, off, length):
    """Copy a slice out of an mmap of @path: page faults, no hashing."""
    with open(path, "rb", buffering=0) as f:
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
            for o in range(off, off + length, 1 << 22):
                m[o:min(o + (1 << 22), off + length)]
    return length


def _touch(args):
    return touch_slice(*args)


def hash_file_slice(path, off, length, use_mmap):
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        if use_mmap:
            with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
                for o in range(off, off + length, 1 << 22):
                    h.update(m[o:min(o + (1 << 22), off + length)])
        else:
            f.seek(off)
            left = length
            while left:
                b = f.read(min(1 << 20, left))
                if not b:
                    break
                h.update(b)
                left -= len(b)
    return h.hexdigest()


def read_all(path):
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return n
            n += len(b)


def _worker(args):
    return hash_file_slice(*args)


class Mount:
    def __init__(self, us, src):
        self.dir = tempfile.mkdtemp(prefix="usbench-mm-")
        self.proc = subprocess.Popen([us, "-f", "-q", src, self.dir])
        while not os.path.ismount(self.dir):
            if self.proc.poll() is not None:
                raise RuntimeError("mount failed")
            time.sleep(0.005)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        subprocess.run(["fusermount3", "-u", self.dir], check=False)
        self.proc.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


def warm(src):
    for dp, _dn, fns in os.walk(src):
        for fn in fns:
            with open(os.path.join(dp, fn), "rb", buffering=0) as f:
                while f.read(1 << 22):
                    pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("unshardfs")
    ap.add_argument("source")
    ap.add_argument("reference")
    ap.add_argument("--readers", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    size = os.path.getsize(a.reference)
    parts = slices(size, a.readers)
    want = [hash_file_slice(a.reference, o, n, False) for o, n in parts]
    seq, par, bad = [], [], 0
    with mp.Pool(a.readers) as pool:
        for _ in range(a.reps):
            warm(a.source)
            with Mount(a.unshardfs, a.source) as m:
                p = os.path.join(m.dir, "model.safetensors")
                t = time.perf_counter()
                n = read_all(p)
                seq.append(size / (time.perf_counter() - t) / 1e9)
                bad += n != size
            warm(a.source)
            with Mount(a.unshardfs, a.source) as m:
                p = os.path.join(m.dir, "model.safetensors")
                t = time.perf_counter()
                pool.map(_touch, [(p, o, n) for o, n in parts])
                par.append(size / (time.perf_counter() - t) / 1e9)
                # Untimed: the bytes the faults brought in, still in the
                # mount's page cache, hashed through mmap again.
                got = pool.map(_worker, [(p, o, n, True) for o, n in parts])
                bad += sum(g != w for g, w in zip(got, want))
    s, p = max(seq), max(par)
    print(f"sequential reader: {s:.2f} GB/s (best of {a.reps}: "
          f"{', '.join(f'{x:.2f}' for x in seq)})")
    print(f"{a.readers} mmap readers: {p:.2f} GB/s aggregate (best of {a.reps}: "
          f"{', '.join(f'{x:.2f}' for x in par)})")
    print(f"ratio: {p / s:.2f}x (target >= 1.0)")
    print(f"mismatches: {bad}")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
