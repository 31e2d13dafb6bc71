"""Hostile sizes in DCP metadata that must still mount: 100,000 chunks of one
tensor (lib/overlap.c), a param_groups path of huge indexes (dcp.c).

The chunk-overlap check used to compare every chunk with every earlier one:
5 * 10^9 box tests for this checkpoint. Nothing here is timed; the mount
just has to happen (within the generous mount timeout) and serve the right
bytes. The checkpoint is written with torch's own DCP classes: one
[316, 316] float32 tensor in 1 x 1 chunks, every chunk's storage_data
pointing at one small item (a torch.save of a 1 x 1 tensor), which the
reader accepts as it would any item.
"""
import io
import json
import os
import pickle

import pytest

from conftest import mount, run_cli

import torch  # noqa: E402
import torch.distributed.checkpoint.metadata as dcp_md  # noqa: E402
import torch.distributed.checkpoint.filesystem as dcp_fs  # noqa: E402

SIDE = 316  # 99,856 chunks


def write_grid(root, value=7.5):
    item = io.BytesIO()
    torch.save(torch.full((1, 1), value, dtype=torch.float32), item)
    item = item.getvalue()
    with open(os.path.join(root, "__0_0.distcp"), "wb") as f:
        f.write(item)
    props = dcp_md.TensorProperties(dtype=torch.float32)
    chunks, storage = [], {}
    info = dcp_fs._StorageInfo(relative_path="__0_0.distcp", offset=0, length=len(item))
    for r in range(SIDE):
        for c in range(SIDE):
            off = torch.Size([r, c])
            chunks.append(dcp_md.ChunkStorageMetadata(offsets=off, sizes=torch.Size([1, 1])))
            storage[dcp_md.MetadataIndex(fqn="w", offset=off)] = info
    md = dcp_md.Metadata(
        state_dict_metadata={"w": dcp_md.TensorStorageMetadata(
            properties=props, size=torch.Size([SIDE, SIDE]), chunks=chunks)},
        storage_data=storage)
    with open(os.path.join(root, ".metadata"), "wb") as f:
        pickle.dump(md, f)


def test_dcp_grid_of_100k_chunks_mounts(tmp_path):
    src = tmp_path / "grid"
    src.mkdir()
    write_grid(str(src))
    r = run_cli("inspect", str(src), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "w" in r.stdout
    with mount(str(src), timeout=120) as mnt:
        data = open(os.path.join(mnt, "tensors", "w"), "rb").read()
    assert data == torch.full((SIDE, SIDE), 7.5).numpy().tobytes()


def test_dcp_planner_path_of_big_indexes_mounts(tmp_path):
    """A param_groups path of 40 indexes 65535 deep (found by fuzz_dcp_metadata).

    optimizer.json pads arrays with nulls up to an index; the padding used to
    count the array on every null (10^10 steps) and is now bounded by the
    checkpoint's JSON budget, after which the value is kept under "scalars".
    """
    src = tmp_path / "deep"
    src.mkdir()
    tensor, scalar = io.BytesIO(), io.BytesIO()
    torch.save(torch.full((1,), 2.0), tensor)
    torch.save(0.25, scalar)
    tensor, scalar = tensor.getvalue(), scalar.getvalue()
    with open(src / "__0_0.distcp", "wb") as f:
        f.write(tensor + scalar)
    lr = "optim.param_groups.0.lr"
    md = dcp_md.Metadata(
        state_dict_metadata={
            "model.w": dcp_md.TensorStorageMetadata(
                properties=dcp_md.TensorProperties(dtype=torch.float32),
                size=torch.Size([1]),
                chunks=[dcp_md.ChunkStorageMetadata(offsets=torch.Size([0]),
                                                    sizes=torch.Size([1]))]),
            lr: dcp_md.BytesStorageMetadata()},
        storage_data={
            dcp_md.MetadataIndex(fqn="model.w", offset=torch.Size([0])):
                dcp_fs._StorageInfo(relative_path="__0_0.distcp", offset=0,
                                    length=len(tensor)),
            dcp_md.MetadataIndex(fqn=lr):
                dcp_fs._StorageInfo(relative_path="__0_0.distcp", offset=len(tensor),
                                    length=len(scalar))},
        planner_data={"model.w": ("model", "w"),
                      lr: ("optim", "param_groups", 0, "lr") + (65535,) * 40})
    with open(src / ".metadata", "wb") as f:
        pickle.dump(md, f)
    with mount(str(src), timeout=60) as mnt:
        assert open(os.path.join(mnt, "tensors", "w"), "rb").read() == \
            torch.full((1,), 2.0).numpy().tobytes()
        json.load(open(os.path.join(mnt, "optimizer.json")))
