"""Benchmarks e (daemon memory) and f (mount time) with a recipe, side by side with the
same checkpoint mounted without one (docs/benchmarks.md, "Recipes").

    sudo python tests/bench/recipe_bench.py [--gb G] [--layers L] [--reps N] [--dir D]

Generates in D (default $BENCH_DIR or /tmp/unshardfs-bench, removed afterwards) two
torchtitan-like Llama 3 DCP checkpoints (gen.py tt: FSDP2 Shard(0), 2 ranks, the names
and shapes torchtitan 0.3.0 saves, a config.json beside): one of about G GB (default 1)
for e, one of L layers of tiny tensors (default 2222: 20k tensors) for f.  Mounts each
with `--recipe=torchtitan-llama3 --overlay=CONFIG` and without.  e reads
model.safetensors, pytorch_model.bin and every tensors/ file and reports the daemon's
VmHWM; f is the time from starting the daemon to the mount appearing, caches dropped
(root), best of N.  Prints markdown rows.  Not a unit test: numbers.
"""
import argparse
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402
import gen  # noqa: E402

RECIPE = "torchtitan-llama3"


def cases(src):
    return (("no recipe", []),
            ("--recipe", [f"--recipe={RECIPE}", f"--overlay={src}.hf"]))


def bench_e(src, reps):
    rows = []
    for label, opts in cases(src):
        best = None
        for _ in range(reps):
            with bench.us(src, *opts) as m:
                t, n = bench.timed(lambda: bench.everything(m))
                hwm = m.hwm_kib()
            best = min(best or (hwm, n, t), (hwm, n, t))
        rows.append((label, *best))
    return rows


def bench_f(src, reps):
    rows = []
    for label, opts in cases(src):
        ts = []
        for _ in range(reps):
            bench.drop_caches()
            with bench.us(src, *opts) as m:
                ts.append(m.mount_s)
                n = len(os.listdir(m.path("tensors")))
        rows.append((label, min(ts), n))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--layers", type=int, default=2222)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=os.environ.get("BENCH_DIR", "/tmp/unshardfs-bench"))
    a = ap.parse_args()
    big, many = os.path.join(a.dir, "tt-big"), os.path.join(a.dir, "tt-many")
    try:
        bench.log(f"generating a {a.gb:g} GB torchtitan-like DCP")
        size, nt = gen.make_tt(big, gb=a.gb)
        e = bench_e(big, a.reps)
        bench.log(f"generating a torchtitan-like DCP of {a.layers} layers")
        _s, nf = gen.make_tt(many, layers=a.layers, dim=64, ffn=128, heads=4, kv=2,
                             vocab=256)
        f = bench_f(many, a.reps)
    finally:
        for p in (big, big + ".hf", many, many + ".hf"):
            shutil.rmtree(p, ignore_errors=True)
    print(f"| | case | no recipe | --recipe={RECIPE} |")
    print("|---|---|---|---|")
    print(f"| e | daemon VmHWM after reading all three views, {size / 1e9:.2f} GB, "
          f"{nt} tensors | {e[0][1] / 1024:.1f} MiB | {e[1][1] / 1024:.1f} MiB |")
    print(f"| e | bytes read through the views, time | {e[0][2] / 1e9:.1f} GB, "
          f"{e[0][3]:.1f} s | {e[1][2] / 1e9:.1f} GB, {e[1][3]:.1f} s |")
    print(f"| f | mount time, {nf} tensors, {'cold' if bench.ROOT else 'warm'} "
          f"| {f[0][1] * 1000:.0f} ms | {f[1][1] * 1000:.0f} ms |")


if __name__ == "__main__":
    main()
