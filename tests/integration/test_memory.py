"""The daemon's memory stays small while full-size replies flow (issue 5, benchmark e).

A DCP checkpoint of 96 MiB saved by real torch is mounted and every view is read in
1 MiB reads, so the kernel sends the largest requests the mount allows and the spliced
and the buffered reply paths both run.  The daemon's peak RSS must stay far below the
bytes it served: a regression that let libfuse bounce every reply through a fresh
buffer grew it to 65 MiB on 1 GB (110 MiB on 4 GB), and this test would have seen it.
"""
import os

import pytest

from conftest import BUILD, daemon_pid, hwm_mib, mount

import torch  # noqa: E402

LIMIT_MIB = 24



def read_all(path):
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return n
            n += len(b)


def test_daemon_rss_stays_small(tmp_path):
    if "asan" in os.path.basename(BUILD):
        pytest.skip("sanitizer builds hold freed memory in quarantine")
    import torch.distributed.checkpoint as dcp

    g = torch.Generator().manual_seed(5)
    sd = {f"w{i}": torch.randn(2048, 4096, generator=g) for i in range(3)}
    ckpt = str(tmp_path / "ckpt")
    dcp.save(sd, checkpoint_id=ckpt)
    with mount(ckpt) as mnt:
        pid = daemon_pid(mnt)
        served = read_all(os.path.join(mnt, "model.safetensors"))
        served += read_all(os.path.join(mnt, "pytorch_model.bin"))
        for name in os.listdir(os.path.join(mnt, "tensors")):
            served += read_all(os.path.join(mnt, "tensors", name))
        hwm = hwm_mib(pid)
    assert served > 3 * 96 << 20
    assert hwm < LIMIT_MIB, f"daemon peak RSS {hwm:.1f} MiB after serving {served >> 20} MiB"
