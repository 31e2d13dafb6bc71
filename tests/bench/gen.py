"""Benchmark checkpoint generators (fast; no training).

  gen.py dcp OUT --gb G [--world W] [--shard 0|1] [--cols C]
      a PyTorch DCP checkpoint of fp32 2-D tensors of about G GB in total, saved by W
      gloo CPU processes, each tensor a DTensor sharded on dim 0 (FSDP-like) or dim 1
      (tensor-parallel columns: each output row gathers from every chunk).
  gen.py st OUT.safetensors --tensors N
      a safetensors file of N small tensors, written directly (header + zero data)
      without torch: for mount-time benchmarks.
  gen.py deepspeed OUT --gb G [--world W] [--stage 2|3] [--hidden H]
      a DeepSpeed ZeRO checkpoint written by real DeepSpeed (deepspeed.initialize, one
      Adam step, save_checkpoint; bf16 with fp32 master weights, W gloo CPU processes)
      of a stack of H x H linear layers whose fp32 weights come to about G GB (what
      zero_to_fp32 writes; the checkpoint itself is ~3.5x that: bf16 weights plus fp32
      masters and two Adam moments).  Needs deepspeed (tests/bench/venv.sh).
"""
import argparse
import json
import math
import os
import socket
import struct
import sys


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gloo_mesh(rank, world, port):
    """In a worker process: join a @world-rank gloo group on loopback @port (one torch
    thread each) and return its 1-D CPU device mesh."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    return init_device_mesh("cpu", (world,))


def _dcp_worker(rank, world, port, out, nt, rows, cols, shard, transposed=False):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import DTensor, Shard
    mesh = gloo_mesh(rank, world, port)
    g = torch.Generator().manual_seed(1000 + rank)
    sd = {}
    for i in range(nt):
        shape = (rows // world, cols) if shard == 0 else (rows, cols // world)
        if transposed:  # stored column-major: strides (1, rows), as a .t() view saves
            local = torch.empty(shape[::-1]).uniform_(generator=g).t()
        else:
            local = torch.empty(shape).uniform_(generator=g)
        sd[f"layers.{i}.weight"] = DTensor.from_local(local, mesh, [Shard(shard)],
                                                      run_check=False, shape=(rows, cols),
                                                      stride=(cols, 1))
    dcp.save({"model": sd}, checkpoint_id=out)
    dist.barrier()
    dist.destroy_process_group()


def make_dcp(out, gb, world=2, shard=0, cols=8192, transposed=False, rows=4096):
    import torch.multiprocessing as mp
    per = rows * cols * 4
    nt = max(1, round(gb * 1e9 / per))
    os.makedirs(out, exist_ok=True)
    mp.start_processes(_dcp_worker, args=(world, _free_port(), out, nt, rows, cols, shard,
                                                  transposed),
                       nprocs=world, start_method="fork")
    return nt * per


def _ds_worker(rank, world, port, out, layers, hidden, stage):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank), DS_ACCELERATOR="cpu")
    import torch
    import deepspeed
    torch.set_num_threads(1)
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(hidden, hidden, bias=False)
                                for _ in range(layers)])
    cfg = {"train_batch_size": world, "train_micro_batch_size_per_gpu": 1,
           "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
           "bf16": {"enabled": True}, "zero_optimization": {"stage": stage},
           "steps_per_print": 1000}
    eng, *_ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=cfg)
    x = torch.randn(1, hidden, generator=torch.Generator().manual_seed(rank),
                    dtype=torch.bfloat16)
    eng.backward(eng(x).float().pow(2).mean())
    eng.step()
    eng.save_checkpoint(out)
    torch.distributed.barrier()


def make_deepspeed(out, gb, world=2, stage=2, hidden=4096):
    """Returns the bytes of the fp32 state dict (what zero_to_fp32 writes)."""
    import torch.multiprocessing as mp
    per = hidden * hidden * 4
    layers = max(1, round(gb * 1e9 / per))
    os.makedirs(out, exist_ok=True)
    mp.start_processes(_ds_worker, args=(world, _free_port(), out, layers, hidden, stage),
                       nprocs=world, start_method="spawn")
    return layers * per


def _tt_shapes(layers, dim, ffn, heads, kv, vocab):
    """torchtitan 0.3.0 Llama 3 names and shapes (what the built-in recipe
    torchtitan-llama3 maps): head_dim = dim / heads."""
    hd = dim // heads
    out = {"tok_embeddings.weight": (vocab, dim), "norm.weight": (dim,),
           "lm_head.weight": (vocab, dim)}
    for i in range(layers):
        p = f"layers.{i}."
        out.update({
            p + "attention.qkv_linear.wq.weight": (dim, dim),
            p + "attention.qkv_linear.wk.weight": (kv * hd, dim),
            p + "attention.qkv_linear.wv.weight": (kv * hd, dim),
            p + "attention.wo.weight": (dim, dim),
            p + "feed_forward.w1.weight": (ffn, dim),
            p + "feed_forward.w3.weight": (ffn, dim),
            p + "feed_forward.w2.weight": (dim, ffn),
            p + "attention_norm.weight": (dim,),
            p + "ffn_norm.weight": (dim,)})
    return out


def _tt_worker(rank, world, port, out, shapes):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import DTensor, Shard
    mesh = gloo_mesh(rank, world, port)
    sd = {}
    for name, shape in shapes.items():
        # FSDP2's Shard(0): rows split evenly (the shapes are multiples of world)
        local = torch.full((shape[0] // world,) + shape[1:], float(rank + 1))
        stride = (shape[1], 1) if len(shape) == 2 else (1,)
        sd[name] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False,
                                      shape=shape, stride=stride)
    dcp.save({"model": sd}, checkpoint_id=out)
    dist.barrier()
    dist.destroy_process_group()


def make_tt(out, gb=None, layers=None, dim=2048, ffn=5632, heads=16, kv=4, vocab=32000,
            world=2):
    """A torchtitan-like Llama 3 DCP checkpoint (FSDP2, @world ranks) of about @gb GB,
    or of @layers layers, and beside it out + ".hf/config.json" (head_dim for the
    recipe's RoPE permute).  Returns (bytes, number of tensors)."""
    import torch.multiprocessing as mp
    if layers is None:
        per = sum(a * b for a, b in (s for s in _tt_shapes(1, dim, ffn, heads, kv, 0).values()
                                     if len(s) == 2)) * 4
        layers = max(1, round((gb * 1e9 - 2 * vocab * dim * 4) / per))
    shapes = _tt_shapes(layers, dim, ffn, heads, kv, vocab)
    os.makedirs(out, exist_ok=True)
    os.makedirs(out + ".hf", exist_ok=True)
    with open(os.path.join(out + ".hf", "config.json"), "w") as f:
        json.dump({"model_type": "llama", "hidden_size": dim, "num_attention_heads": heads,
                   "num_key_value_heads": kv, "head_dim": dim // heads,
                   "intermediate_size": ffn, "num_hidden_layers": layers,
                   "vocab_size": vocab}, f)
    mp.start_processes(_tt_worker, args=(world, _free_port(), out, shapes),
                       nprocs=world, start_method="fork")
    n = sum(math.prod(s) for s in shapes.values()) * 4
    return n, len(shapes)


def make_st(out, n, numel=16):
    hdr = {"__metadata__": {"format": "pt"}}
    nb = numel * 4
    for i in range(n):
        hdr[f"model.layers.{i // 16}.block.p{i % 16}.weight"] = {
            "dtype": "F32", "shape": [numel], "data_offsets": [i * nb, (i + 1) * nb]}
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        f.truncate(8 + len(h) + n * nb)  # sparse zero data
    return out


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dcp")
    d.add_argument("out")
    d.add_argument("--gb", type=float, required=True)
    d.add_argument("--world", type=int, default=2)
    d.add_argument("--shard", type=int, default=0, choices=(0, 1))
    d.add_argument("--cols", type=int, default=8192)
    d.add_argument("--transposed", action="store_true")
    s = sub.add_parser("st")
    s.add_argument("out")
    s.add_argument("--tensors", type=int, required=True)
    t = sub.add_parser("tt")
    t.add_argument("out")
    t.add_argument("--gb", type=float)
    t.add_argument("--layers", type=int)
    z = sub.add_parser("deepspeed")
    z.add_argument("out")
    z.add_argument("--gb", type=float, required=True)
    z.add_argument("--world", type=int, default=2)
    z.add_argument("--stage", type=int, default=2, choices=(2, 3))
    z.add_argument("--hidden", type=int, default=4096)
    a = ap.parse_args()
    if a.cmd == "dcp":
        print(make_dcp(a.out, a.gb, a.world, a.shard, a.cols, a.transposed))
    elif a.cmd == "tt":
        print(make_tt(a.out, a.gb, a.layers))
    elif a.cmd == "deepspeed":
        print(make_deepspeed(a.out, a.gb, a.world, a.stage, a.hidden))
    else:
        make_st(a.out, a.tensors)


if __name__ == "__main__":
    sys.exit(main())
