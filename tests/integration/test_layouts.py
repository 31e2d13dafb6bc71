"""Checkpoint directory layouts around DCP: Megatron-LM's torch_dist (DCP plus its own
metadata.json and common.pt, passed through), and the same checkpoint reached through
a symlinked directory."""
import os
import shutil

import pytest

from conftest import FIXTURES, mount

torch = pytest.importorskip("torch")


def _tree(src):
    from safetensors.torch import load_file
    with mount(src) as mnt:
        got = {k: v.clone() for k, v in load_file(os.path.join(mnt, "model.safetensors")).items()}
        top = sorted(os.listdir(mnt))
        extra = {}
        for name in ("metadata.json", "common.pt"):
            if os.path.exists(os.path.join(mnt, name)):
                with open(os.path.join(mnt, name), "rb") as f:
                    extra[name] = f.read()
    return got, top, extra


def test_megatron_torch_dist_layout(tmp_path):
    """Megatron's torch_dist format is a DCP directory with metadata.json (the backend
    description) and common.pt (non-sharded state) beside it: both pass through."""
    src = tmp_path / "iter_0000010"
    shutil.copytree(os.path.join(FIXTURES, "torch", "fsdp2_2rank"), src)
    meta = b'{"sharded_backend": "torch_dist", "sharded_backend_version": 1, ' \
           b'"common_backend": "torch", "common_backend_version": 1}'
    (src / "metadata.json").write_bytes(meta)
    torch.save({"iteration": 10, "args": {"tensor_model_parallel_size": 1}},
               str(src / "common.pt"))
    got, top, extra = _tree(str(src))
    want, _, _ = _tree(os.path.join(FIXTURES, "torch", "fsdp2_2rank"))
    assert set(got) == set(want)
    for k in want:
        assert torch.equal(got[k], want[k]), k
    assert extra["metadata.json"] == meta
    assert extra["common.pt"] == (src / "common.pt").read_bytes()
    assert not [n for n in top if n.endswith(".distcp") or n == ".metadata"], top


def test_source_through_a_symlink(tmp_path):
    """SOURCE itself may be a symlink to the checkpoint directory."""
    link = tmp_path / "ckpt"
    os.symlink(os.path.join(FIXTURES, "torch", "dtensor_2d"), link)
    got, _, _ = _tree(str(link))
    want, _, _ = _tree(os.path.join(FIXTURES, "torch", "dtensor_2d"))
    assert got.keys() == want.keys()
    for k in want:
        assert torch.equal(got[k], want[k]), k
