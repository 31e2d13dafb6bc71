#!/usr/bin/env python3
"""Benchmark `unshardfs export` against torch's dcp_to_torch_save (docs/benchmarks-export.md).

usage: bench_export.py [--gen-gib G] [--workdir DIR] [--binary PATH] [--repeat N]

Each converter runs in a fresh child process; wall time is measured around it and peak RSS
is the child's ru_maxrss (resource.getrusage(RUSAGE_CHILDREN) after wait). Inputs are read
once before timing so every run starts from a warm page cache (the converters differ in
how they read, not in what the disk does); outputs are deleted between runs.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

DCP_TO_TORCH = ("import sys\n"
                "from torch.distributed.checkpoint.format_utils import dcp_to_torch_save\n"
                "dcp_to_torch_save(sys.argv[1], sys.argv[2])\n")

GEN = r"""
import sys, torch, torch.distributed.checkpoint as dcp
out, gib = sys.argv[1], float(sys.argv[2])
torch.manual_seed(0)
# A llama-like layout: 4096-wide bf16 layers until the size is reached.
h, sd, total, i = 4096, {}, 0, 0
sd["model.embed_tokens.weight"] = torch.randn(32000, h, dtype=torch.bfloat16)
total += sd["model.embed_tokens.weight"].nbytes
while total < gib * 2**30:
    for name, shape in (("self_attn.q_proj", (h, h)), ("self_attn.o_proj", (h, h)),
                        ("mlp.up_proj", (11008, h)), ("input_layernorm", (h,))):
        t = torch.randn(*shape, dtype=torch.bfloat16)
        sd[f"model.layers.{i}.{name}.weight"] = t
        total += t.nbytes
    i += 1
dcp.save({"model": sd}, checkpoint_id=out, no_dist=True)
print(f"{total / 2**30:.2f} GiB, {len(sd)} tensors")
"""


def warm(path):
    for root, _d, files in os.walk(path):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                while fh.read(1 << 24):
                    pass


def run(argv):
    """(seconds, peak RSS MiB) of one child."""

    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _pid, status, ru = os.wait4(p.pid, 0)
    dt = time.monotonic() - t0
    if status != 0:
        raise SystemExit(f"{argv} failed: status {status}")

    return dt, ru.ru_maxrss / 1024


def size_of(path):
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    return os.path.getsize(path)


def bench(name, source, binary, work, repeat):
    py = sys.executable
    cases = [
        ("dcp_to_torch_save -> .pt", [py, "-c", DCP_TO_TORCH, source], "out.pt"),
        ("unshardfs export --view=bin", [binary, "export", "-q", "--view=bin", source], "out.bin"),
        ("unshardfs export (safetensors)", [binary, "export", "-q", source], "out.st"),
        ("unshardfs export --max-shard-size=5G", [binary, "export", "-q",
                                                  "--max-shard-size=5G", source], "out.dir"),
    ]
    warm(source)
    rows = []
    for label, argv, out in cases:
        dst = os.path.join(work, out)
        best = None
        for _ in range(repeat):
            shutil.rmtree(dst, ignore_errors=True)
            if os.path.exists(dst):
                os.unlink(dst)
            dt, rss = run(argv + [dst])
            best = (dt, rss) if best is None or dt < best[0] else best
        rows.append((label, best[0], best[1], size_of(dst)))
        shutil.rmtree(dst, ignore_errors=True)
        if os.path.exists(dst):
            os.unlink(dst)
    print(f"\n### {name}: {source} ({size_of_tree(source) / 2**20:.1f} MiB on disk)\n")
    print("| converter | wall s (best of %d) | peak RSS MiB | output MiB |" % repeat)
    print("|---|---:|---:|---:|")
    for label, dt, rss, sz in rows:
        print(f"| {label} | {dt:.2f} | {rss:.0f} | {sz / 2**20:.1f} |")
    sys.stdout.flush()


def size_of_tree(path):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _d, fs in os.walk(path) for f in fs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gen-gib", type=float, default=2.0)
    ap.add_argument("--workdir", default="/tmp/unshardfs-bench-export")
    ap.add_argument("--binary", default=os.path.join(REPO, "build", "fs", "unshardfs"))
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    bench("fixture llama_fsdp2", os.path.join(REPO, "tests/fixtures/torch/llama_fsdp2"),
          a.binary, a.workdir, a.repeat)
    big = os.path.join(a.workdir, f"dcp-{a.gen_gib:g}g")
    if not os.path.exists(os.path.join(big, ".metadata")):
        subprocess.run([sys.executable, "-c", GEN, big, str(a.gen_gib)], check=True)
    bench(f"generated DCP ({a.gen_gib:g} GiB bf16)", big, a.binary, a.workdir, a.repeat)


if __name__ == "__main__":
    main()
