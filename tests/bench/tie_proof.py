#!/usr/bin/env python3
"""Measure tie confirmation at mount on a DCP checkpoint with a large tied embedding.

Writes a single-rank DCP checkpoint whose embedding and output head are tied
(DCP saves both names, so the pair is two copies on disk) and, as evidence of
the tie, a config.json with tie_word_embeddings (docs/ties.md); then mounts it
with --ties=auto (declared + evidenced, confirmed by a full byte comparison)
and --ties=declared, side by side, and
reports mount time and the daemon's peak RSS (VmHWM) for each, plus that
the pair came out as one inode.

    python tests/bench/tie_proof.py [--mib 256] [--keep DIR] [--no-cold]
"""
import argparse, json, os, shutil, subprocess, sys, tempfile, time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(REPO, os.environ.get("UNSHARDFS_BUILD", "build"), "fs", "unshardfs")


def make_checkpoint(path, mib):
    import torch
    import torch.distributed.checkpoint as dcp

    cols = 1024
    rows = mib * (1 << 20) // (4 * cols)
    torch.manual_seed(0)
    emb = torch.nn.Embedding(rows, cols)
    head = torch.nn.Linear(cols, rows, bias=False)
    head.weight = emb.weight
    model = torch.nn.ModuleDict({"embed": emb, "head": head,
                                 "norm": torch.nn.LayerNorm(cols)})
    dcp.save({"model": model.state_dict()}, checkpoint_id=path, no_dist=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"tie_word_embeddings": True, "vocab_size": rows}, f)
    return rows, cols


def vmhwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


def mount_once(src, ties):
    mnt = tempfile.mkdtemp(prefix="us-tie-")
    t0 = time.monotonic()
    proc = subprocess.Popen([BIN, "-f", "-q", f"--ties={ties}", src, mnt],
                            stderr=subprocess.PIPE)
    while not os.path.ismount(mnt):
        if proc.poll() is not None:
            sys.exit(f"mount failed: {proc.stderr.read().decode()}")
        time.sleep(0.005)
    elapsed = time.monotonic() - t0
    st_e = os.stat(os.path.join(mnt, "tensors", "embed.weight"))
    st_h = os.stat(os.path.join(mnt, "tensors", "head.weight"))
    linked = st_e.st_ino == st_h.st_ino and st_e.st_nlink == 2
    hwm = vmhwm_kib(proc.pid)
    subprocess.run(["fusermount3", "-u", mnt], check=True)
    proc.wait()
    os.rmdir(mnt)
    return elapsed, hwm, linked


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--keep")
    ap.add_argument("--no-cold", action="store_true", help="skip the runs that drop caches")
    a = ap.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix="us-tieproof-")
    src = os.path.join(work, "ckpt")
    if not os.path.exists(os.path.join(src, ".metadata")):
        rows, cols = make_checkpoint(src, a.mib)
        print(f"checkpoint: embedding [{rows}, {cols}] f32 = {a.mib} MiB, tied to the head "
              f"(saved twice by DCP: {sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src)) >> 20} MiB on disk)")
    # Warm the page cache so both runs compare CPU work, not the disk.
    subprocess.run(f"cat {src}/* > /dev/null", shell=True, check=True)
    runs = [("declared", "warm"), ("auto", "warm"), ("declared", "warm"), ("auto", "warm")]
    if os.geteuid() == 0 and not a.no_cold:
        runs += [("declared", "cold"), ("auto", "cold")]
    for ties, cache in runs:
        if cache == "cold":
            subprocess.run("sync; echo 3 > /proc/sys/vm/drop_caches", shell=True, check=True)
        t, hwm, linked = mount_once(src, ties)
        print(f"--ties={ties:8s} {cache} cache  mount {t * 1000:8.1f} ms  daemon VmHWM "
              f"{hwm / 1024:7.1f} MiB  embed/head one inode: {linked}")
    if not a.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
