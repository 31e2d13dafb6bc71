"""Remote SOURCE benchmarks (issue 21, docs/remote.md), side by side with their peers in
one run, against a local moto server (results go into docs/benchmarks.md by hand):

    python tests/bench/s3_bench.py [--gb G] [--world W] [--dir D] [--keep]

Generates in D (default $BENCH_DIR or /tmp/unshardfs-bench) a DCP checkpoint of about G
GB (default 0.5; the issue's targets are stated at >= 4 GB) saved by W gloo CPU
processes (default 2), FSDP2-like Shard(0) DTensors: a 16-bit (bf16) model and its fp32
Adam state (exp_avg, exp_avg_sq, step; what get_optimizer_state_dict saves), about 2 +
8 bytes a parameter. Uploads it to a moto server (python -m moto.server on loopback)
and measures:

  s1  time to first tensor: mount s3://BUCKET/ckpt + read one tensors/ file, vs boto3
      download of the whole prefix + torch's dcp_to_torch_save + torch.load(mmap) of
      one tensor (target >= 100x at >= 4 GB); the same peer run then reads every
      weight, beside s2's full load (s2')
  s2  full load: mount + read of model.safetensors through the s3:// mount, vs
      unshardfs mounted on an s3fs-fuse mount of the same bucket, its mount timed too
      (s3fs fetches most of the shards then); the read alone is printed beside it
      (target >= 1.5x)
  s3  bytes fetched (the mount root's user.unshardfs.remote_stats) by s2's mount: its
      metadata at mount and the full read, vs
      the weights' bytes (target <= 1.1x)

Each peer is measured even when the s3:// mount fails (before the remote SOURCE code
is in the build): its row then says so. Needs the test venv (torch, boto3,
moto[server]) and Debian's s3fs. Not a unit test: numbers.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import bench  # noqa: E402
import gen  # noqa: E402
import s3env  # noqa: E402
import s3serve  # noqa: E402

BUCKET = "unshardfs-bench"
PREFIX = "ckpt"


# ---------------------------------------------------------------------------- checkpoint

def _worker(rank, world, port, out, nt, rows, cols):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import DTensor, Shard
    mesh = gen.gloo_mesh(rank, world, port)
    g = torch.Generator().manual_seed(2100 + rank)

    def dt(dtype):
        local = torch.empty(rows // world, cols).uniform_(generator=g).to(dtype)
        return DTensor.from_local(local, mesh, [Shard(0)], run_check=False,
                                  shape=(rows, cols), stride=(cols, 1))
    model, state = {}, {}
    for i in range(nt):
        name = f"layers.{i}.weight"
        model[name] = dt(torch.bfloat16)
        state[name] = {"step": torch.tensor(1.0), "exp_avg": dt(torch.float32),
                       "exp_avg_sq": dt(torch.float32)}
    optim = {"state": state,
             "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8,
                               "weight_decay": 0.0, "amsgrad": False, "foreach": None,
                               "maximize": False, "capturable": False,
                               "differentiable": False, "fused": None,
                               "params": sorted(model)}]}
    dcp.save({"model": model, "optim": optim}, checkpoint_id=out)
    dist.barrier()
    dist.destroy_process_group()


def make_ckpt(out, gb, world=2, rows=2048, cols=2048):
    """Returns (checkpoint bytes, model weights' bytes, first tensor's name)."""
    import torch.multiprocessing as mp
    per = rows * cols * (2 + 4 + 4)
    nt = max(1, round(gb * 1e9 / per))
    os.makedirs(out, exist_ok=True)
    mp.start_processes(_worker, args=(world, gen._free_port(), out, nt, rows, cols),
                       nprocs=world, start_method="fork")
    total = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    return total, nt * rows * cols * 2, "layers.0.weight"


# ---------------------------------------------------------------------------- the sides

def first_tensor_ours(url, opts, name):
    t0 = time.perf_counter()
    with bench.Mount([bench.US, "-f", "-q", *opts, url], timeout=600) as m:
        n = bench.read_all(m.path("tensors", name))
        t = time.perf_counter() - t0
    return t, n


def first_tensor_peer(s3, scratch, name):
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dl = tempfile.mkdtemp(prefix="s3bench-dl-", dir=scratch)
    try:
        t0 = time.perf_counter()
        s3env.download_prefix(s3, BUCKET, PREFIX, dl)
        t_dl = time.perf_counter() - t0
        out = os.path.join(dl, "converted.pt")
        dcp_to_torch_save(dl, out)
        sd = torch.load(out, mmap=True, weights_only=True)["model"]
        t = sd[name].clone()
        total = time.perf_counter() - t0
        # and the whole model: what s2's full load gives (every weight read)
        n = sum(v.clone().numel() * v.element_size() for v in sd.values())
        return total, t_dl, t.numel() * t.element_size(), time.perf_counter() - t0, n
    finally:
        shutil.rmtree(dl, ignore_errors=True)


def full_read_ours(url, opts):
    """(mount + read seconds, read seconds, bytes, remote_stats)."""
    t0 = time.perf_counter()
    with bench.Mount([bench.US, "-f", "-q", *opts, url], timeout=600) as m:
        t, n = bench.timed(lambda: bench.read_all(m.path("model.safetensors")))
        total = time.perf_counter() - t0
        after = s3env.remote_stats(m.mnt)  # the mount's own fetches count too
    return total, t, n, after


def full_read_peer(endpoint, scratch):
    """unshardfs on top of s3fs: the stack a user has without remote SOURCEs.  Its
    mount is timed too: s3fs fetches most of the shards while unshardfs reads their
    records at mount (it reads ahead in large parallel ranges into its own files), so
    the read after it is mostly served from s3fs's local copy."""
    t0 = time.perf_counter()
    with s3env.S3fs(BUCKET, endpoint, scratch) as fs:
        src = os.path.join(fs.mnt, PREFIX)
        with bench.us(src) as m:
            t, n = bench.timed(lambda: bench.read_all(m.path("model.safetensors")))
            total = time.perf_counter() - t0
    return total, t, n


# ---------------------------------------------------------------------------- main

def attempt(fn, *a):
    try:
        return fn(*a), None
    except Exception as e:  # the row reports it; the peers are still measured
        msg = str(e).split("did not mount:", 1)[-1].strip()  # bench.Mount: the stderr
        return None, (msg.splitlines() or [type(e).__name__])[-1][:160]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=0.5)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--dir", default=os.environ.get("BENCH_DIR", "/tmp/unshardfs-bench"))
    ap.add_argument("--keep", action="store_true", help="keep the generated checkpoint")
    ap.add_argument("--server", choices=("file", "python", "moto"), default="file",
                    help="file: s3serve.py, ranges read from disk as a real store "
                         "serves them, behind nginx when installed (default); python: "
                         "s3serve.py alone (one GIL: its CPU is the limit); moto: the "
                         "tests' endpoint, whose every range GET copies the whole "
                         "object (its cost, not ours)")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    src = os.path.join(a.dir, f"s3-dcp-{a.gb:g}gb")
    server = None
    try:
        if not os.path.exists(os.path.join(src, ".metadata")):
            bench.log(f"generating a {a.gb:g} GB DCP (bf16 model + fp32 Adam, "
                      f"{a.world} ranks)")
            shutil.rmtree(src, ignore_errors=True)
            make_ckpt(src, a.gb, a.world)
        size = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src))
        weights = None
        if a.server in ("file", "python"):
            root = tempfile.mkdtemp(prefix="s3bench-root-", dir=a.dir)
            os.mkdir(os.path.join(root, BUCKET))
            os.symlink(src, os.path.join(root, BUCKET, PREFIX))
            server = s3serve.FileS3(root, front="auto" if a.server == "file" else None)
            # it checks no signature, but the mount and s3fs sign as for moto
            os.environ.update(AWS_ACCESS_KEY_ID=s3env.ACCESS_KEY,
                              AWS_SECRET_ACCESS_KEY=s3env.SECRET_KEY,
                              AWS_REGION=s3env.REGION)
            s3 = s3env.client(server.url)
            bench.log(f"serving {size / 1e9:.2f} GB from {src} at {server.url}")
        else:
            server = s3env.MotoServer(python=sys.executable)
            s3 = s3env.client(server.url)
            bench.log(f"uploading {size / 1e9:.2f} GB to moto at {server.url}")
            s3env.make_bucket(s3, BUCKET)
            for f in sorted(os.listdir(src)):
                s3.upload_file(os.path.join(src, f), BUCKET, f"{PREFIX}/{f}")
        url = f"s3://{BUCKET}/{PREFIX}"
        opts = list(s3env.remote_opts(server.url))
        with bench.us(src) as m:  # the local mount: which tensor, how many weight bytes
            name = sorted(os.listdir(m.path("tensors")))[0]
            weights = os.path.getsize(m.path("model.safetensors"))
        bench.drop_caches()
        bench.log("[s1] unshardfs: mount + first tensor")
        ours1, err1 = attempt(first_tensor_ours, url, opts, name)
        bench.drop_caches()
        bench.log("[s1] peer: boto3 download + dcp_to_torch_save + torch.load")
        peer1, perr1 = attempt(first_tensor_peer, s3, a.dir, name)
        bench.drop_caches()
        bench.log("[s2] unshardfs: full read of model.safetensors")
        ours2, err2 = attempt(full_read_ours, url, opts)
        bench.drop_caches()
        bench.log("[s2] peer: unshardfs over s3fs, full read of model.safetensors")
        peer2, perr2 = attempt(full_read_peer, server.url, a.dir)
        load = os.getloadavg()
    finally:
        if server is not None:
            server.stop()
        if not a.keep:
            shutil.rmtree(src, ignore_errors=True)

    def cell(r, err, fmt):
        return fmt(r) if r is not None else f"n/a ({err})"

    g = size / 1e9
    where = ("moto on loopback" if a.server == "moto" else
             "nginx + s3serve.py on loopback (ranges read from disk)"
             if getattr(server, "front", None) else
             "s3serve.py on loopback (ranges read from disk)")
    print(f"| | benchmark ({g:.2f} GB DCP: bf16 model + fp32 Adam, {a.world} ranks, "
          f"{where}) | unshardfs | peer | ratio | target |")
    print("|---|---|---|---|---|---|")
    ratio1 = f"{peer1[0] / ours1[0]:.1f}×" if ours1 and peer1 else "n/a"
    print(f"| s1 | time to first tensor (mount s3:// + read tensors/{name}) | "
          f"{cell(ours1, err1, lambda r: f'{r[0]:.2f} s')} | "
          f"{cell(peer1, perr1, lambda r: f'{r[0]:.2f} s (boto3 download {r[1]:.2f} s + dcp_to_torch_save + torch.load)')} | "
          f"{ratio1} | ≥ 100× at ≥ 4 GB |")
    ratio2 = f"{peer2[0] / ours2[0]:.2f}×" if ours2 and peer2 else "n/a"

    def load_cell(r):
        return (f"{r[0]:.2f} s ({r[2] / r[0] / 1e9:.2f} GB/s; the read alone "
                f"{r[1]:.2f} s, {r[2] / r[1] / 1e9:.2f} GB/s)")
    print(f"| s2 | full load: mount + read of model.safetensors ({weights / 1e9:.2f} GB) | "
          f"{cell(ours2, err2, load_cell)} | "
          f"{cell(peer2, perr2, lambda r: load_cell(r) + ' (unshardfs over s3fs-fuse)')} | "
          f"{ratio2} | ≥ 1.5× |")
    ratio4 = f"{peer1[3] / ours2[0]:.1f}×" if ours2 and peer1 else "n/a"
    print(f"| s2' | full load (s2's) vs download + dcp_to_torch_save + torch.load + every "
          f"weight read | {cell(ours2, err2, lambda r: f'{r[0]:.2f} s')} | "
          f"{cell(peer1, perr1, lambda r: f'{r[3]:.2f} s ({r[4] / 1e9:.2f} GB of weights)')} | "
          f"{ratio4} | report |")
    ratio3 = f"{ours2[3]['bytes_fetched'] / weights:.3f}×" if ours2 else "n/a"
    if ours2:
        d = ours2[3]
        fetched = (f"{d['bytes_fetched'] / 1e9:.3f} GB in {d['requests']} requests, "
                   f"{d['retries']} retries")
    else:
        fetched = f"n/a ({err2})"
    print(f"| s3 | bytes fetched by s2's mount, metadata and full read (remote_stats), vs the weights' bytes | "
          f"{fetched} | {weights / 1e9:.3f} GB | {ratio3} | ≤ 1.1× |")
    print(f"\n- load average at the end: {load[0]:.1f} ({os.cpu_count()} CPUs; other jobs "
          "count too); the endpoint runs on the same 2 CPUs, so absolute "
          "rates are a loopback's, not S3's")
    if ours1 is None or ours2 is None:
        sys.exit(1)


if __name__ == "__main__":
    main()
