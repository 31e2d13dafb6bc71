#!/usr/bin/env python3
"""Benchmark `unshardfs export` against the converters it replaces, side by side in one
run (docs/benchmarks-export.md):

  torch's dcp_to_torch_save, `accelerate merge-weights`  on a DCP checkpoint
  DeepSpeed's zero_to_fp32 (.bin and --safe_serialization) on a ZeRO checkpoint

usage: bench_export.py [--gen-gib G] [--ds-gb G] [--workdir DIR] [--binary PATH]
                       [--repeat N] [--keep]

Run it with the bench venv (`$(bash tests/bench/venv.sh) tools/bench_export.py`): it has
accelerate and deepspeed on top of the test venv; a peer that is not importable is
skipped, saying so. The DCP input is generated here (`--gen-gib`, llama-like bf16 layers,
`dcp.save(no_dist=True)`); the ZeRO input by tests/bench/gen.py with real DeepSpeed on
CPU processes (`--ds-gb` of fp32 weights; 0 skips it). Both go under --workdir and are
deleted at the end unless --keep.

Each converter runs in a fresh child process. Its time is the child's wall time plus
fsync of what it wrote (unshardfs export fsyncs before its rename; the Python peers do
not, so without this they would be timed before their data is on disk). Peak RSS is the
child's ru_maxrss from wait4. Inputs are read once before timing (warm page cache);
outputs are deleted between runs. Repetitions are interleaved (rep 1 of every case, then
rep 2, ...) so load from other jobs on a shared machine falls on every case alike; the
best of N is reported, and each peer's ratio to its unshardfs counterpart.
"""
import argparse
import datetime
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
BIN = os.path.dirname(PY)

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


def have(module):
    return subprocess.run([PY, "-c", f"import {module}"], capture_output=True,
                          env=dict(os.environ, DS_ACCELERATOR="cpu")).returncode == 0


def warm(path):
    for root, _d, files in os.walk(path):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                while fh.read(1 << 24):
                    pass


def files_under(path):
    if os.path.isdir(path):
        return [os.path.join(r, f) for r, _d, fs in os.walk(path) for f in fs]
    return [path] if os.path.exists(path) else []


def fsync_all(path):
    for p in files_under(path):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove(path):
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.unlink(path)


def run(argv, dst):
    """(seconds incl. fsync of dst, peak RSS MiB) of one child, or (None, the text of
    the exception it died of) when it fails (a peer that refuses the input)."""
    env = dict(os.environ, DS_ACCELERATOR="cpu")
    t0 = time.monotonic()
    p = subprocess.Popen(argv + [dst], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env=env)
    err = p.stderr.read()
    _pid, status, ru = os.wait4(p.pid, 0)
    if status != 0:
        text = err.decode(errors="replace")
        i = text.rfind("Error:")  # from the line of the exception to the end
        tail = " ".join(text[text.rfind("\n", 0, i) + 1:].split() if i >= 0
                        else text.split()[-30:])
        return None, tail[:120]
    fsync_all(dst)
    return time.monotonic() - t0, ru.ru_maxrss / 1024


def size_of(path):
    return sum(os.path.getsize(p) for p in files_under(path))


def bench(name, source, cases, pairs, work, repeat):
    """cases: [(label, argv-without-output, output name)]; pairs: [(peer, ours)]."""
    warm(source)
    best, sizes, failed = {}, {}, {}
    for _ in range(repeat):
        for label, argv, out in cases:
            if label in failed:
                continue
            dst = os.path.join(work, out)
            remove(dst)
            dt, rss = run(argv, dst)
            if dt is None:
                failed[label] = rss
                print(f"  {label}: FAILED: {rss}", file=sys.stderr, flush=True)
                remove(dst)
                continue
            sizes[label] = size_of(dst)
            remove(dst)
            old = best.get(label, (float("inf"), 0.0))
            best[label] = (min(dt, old[0]), max(rss, old[1]))  # best time, worst RSS
            print(f"  {label}: {dt:.2f} s, {rss:.0f} MiB", file=sys.stderr, flush=True)
    where = os.path.relpath(source, REPO) if source.startswith(REPO) else source
    print(f"\n### {name}: `{where}` ({size_of(source) / 2**20:.1f} MiB on disk)\n")
    print(f"| converter | wall s (best of {repeat}) | peak RSS MiB (max) | output MiB |")
    print("|---|---:|---:|---:|")
    for label, _argv, _out in cases:
        if label in failed:
            print(f"| {label} | fails: `{failed[label]}` | | |")
            continue
        dt, rss = best[label]
        print(f"| {label} | {dt:.2f} | {rss:.0f} | {sizes[label] / 2**20:.1f} |")
    pairs = [(p, o) for p, o in pairs if p in best and o in best]
    if pairs:
        print("\n| peer | against | time ratio (peer / unshardfs) | peak RSS ratio |")
        print("|---|---|---:|---:|")
        for peer, ours in pairs:
            (tp, rp), (to, ro) = best[peer], best[ours]
            print(f"| {peer} | {ours} | {tp / to:.2f}× | {rp / ro:.0f}× |")
    sys.stdout.flush()
    return best


def dcp_cases(binary, source):
    cases = [("dcp_to_torch_save → .pt", [PY, "-c", DCP_TO_TORCH, source], "out.pt")]
    pairs = [("dcp_to_torch_save → .pt", "unshardfs export --view=bin")]
    if have("accelerate"):
        cases.append(("accelerate merge-weights → model.safetensors",
                      [os.path.join(BIN, "accelerate"), "merge-weights", source], "out.acc"))
        pairs.append(("accelerate merge-weights → model.safetensors",
                      "unshardfs export (safetensors)"))
    else:
        print(f"accelerate is not importable by {PY}: `accelerate merge-weights` skipped "
              "(run with the bench venv: tests/bench/venv.sh)", file=sys.stderr)
    cases += [
        ("unshardfs export --view=bin", [binary, "export", "-q", "--view=bin", source],
         "out.bin"),
        ("unshardfs export (safetensors)", [binary, "export", "-q", source], "out.st"),
        ("unshardfs export --max-shard-size=5G", [binary, "export", "-q",
                                                  "--max-shard-size=5G", source], "out.dir"),
    ]
    return cases, pairs


def ds_cases(binary, source):
    z = [PY, "-m", "deepspeed.utils.zero_to_fp32"]
    cases = [
        ("zero_to_fp32 → pytorch_model.bin", z + [source], "out.z"),
        ("zero_to_fp32 --safe_serialization → model.safetensors",
         z + ["--safe_serialization", source], "out.zs"),
        ("unshardfs export --view=bin", [binary, "export", "-q", "--view=bin", source],
         "out.bin"),
        ("unshardfs export (safetensors)", [binary, "export", "-q", source], "out.st"),
    ]
    pairs = [("zero_to_fp32 → pytorch_model.bin", "unshardfs export --view=bin"),
             ("zero_to_fp32 --safe_serialization → model.safetensors",
              "unshardfs export (safetensors)")]
    return cases, pairs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gen-gib", type=float, default=2.0)
    ap.add_argument("--ds-gb", type=float, default=1.0)
    ap.add_argument("--workdir", default="/tmp/unshardfs-bench-export")
    ap.add_argument("--binary", default=os.path.join(REPO, "build", "fs", "unshardfs"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the generated inputs")
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    r = subprocess.run([a.binary, "--version"], capture_output=True, text=True)
    print(f"- date: {datetime.date.today().isoformat()}; {os.cpu_count()} CPUs; "
          f"{r.stdout.strip()} ({os.path.relpath(a.binary, REPO)}); python {PY}")
    made = []
    try:
        c, p = dcp_cases(a.binary, os.path.join(REPO, "tests/fixtures/torch/llama_fsdp2"))
        bench("fixture llama_fsdp2 (2-rank FSDP2 DCP)",
              os.path.join(REPO, "tests/fixtures/torch/llama_fsdp2"), c, p, a.workdir,
              a.repeat)
        big = os.path.join(a.workdir, f"dcp-{a.gen_gib:g}g")
        if not os.path.exists(os.path.join(big, ".metadata")):
            made.append(big)
            subprocess.run([PY, "-c", GEN, big, str(a.gen_gib)], check=True)
        c, p = dcp_cases(a.binary, big)
        bench(f"generated DCP ({a.gen_gib:g} GiB bf16, llama-like)", big, c, p, a.workdir,
              a.repeat)
        if a.ds_gb <= 0:
            return
        if not have("deepspeed"):
            print(f"deepspeed is not importable by {PY}: zero_to_fp32 skipped "
                  "(run with the bench venv: tests/bench/venv.sh)", file=sys.stderr)
            return
        fx = os.path.join(REPO, "tests/fixtures/deepspeed/z2_3rank_bf16")
        c, p = ds_cases(a.binary, fx)
        bench("fixture z2_3rank_bf16 (DeepSpeed ZeRO-2, 3 ranks, bf16)", fx, c, p,
              a.workdir, a.repeat)
        ds = os.path.join(a.workdir, f"zero2-{a.ds_gb:g}g")
        if not os.path.exists(os.path.join(ds, "latest")):
            made.append(ds)
            subprocess.run([PY, os.path.join(REPO, "tests/bench/gen.py"), "deepspeed", ds,
                            "--gb", str(a.ds_gb)], check=True,
                           env=dict(os.environ, DS_ACCELERATOR="cpu"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        c, p = ds_cases(a.binary, ds)
        bench(f"generated DeepSpeed ZeRO-2 (2 ranks, bf16, {a.ds_gb:g} GB of fp32 weights)",
              ds, c, p, a.workdir, a.repeat)
    finally:
        if not a.keep:
            for d in made:
                shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
