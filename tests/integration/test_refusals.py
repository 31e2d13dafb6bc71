"""Broken checkpoints are refused at mount: exit 2, one line
`unshardfs: <path relative to SOURCE>: <reason>`, nothing mounted."""
import json
import os
import struct

import pytest

from conftest import INDEX_NAME, SOURCES, copy_source, refuse, run_cli

SHARD1 = "model-00001-of-00003.safetensors"
SHARD2 = "model-00002-of-00003.safetensors"
SHARD3 = "model-00003-of-00003.safetensors"


@pytest.fixture
def sample_copy(tmp_path):
    return copy_source(SOURCES["sample"], str(tmp_path / "src"))


def write_raw_safetensors(path, header, data, pad=True):
    """Write a safetensors file with an arbitrary header dict (no validation)."""
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def check_inspect_agrees(src, path):
    r = run_cli("inspect", src)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.startswith(f"unshardfs: {path}: "), r.stderr


def test_truncated_shard(sample_copy):
    p = os.path.join(sample_copy, SHARD2)
    os.truncate(p, os.path.getsize(p) - 10)
    path, reason = refuse(sample_copy)
    assert path == SHARD2, reason
    check_inspect_agrees(sample_copy, SHARD2)


def test_shard_with_trailing_bytes(sample_copy):
    with open(os.path.join(sample_copy, SHARD3), "ab") as f:
        f.write(b"\0" * 8)
    path, reason = refuse(sample_copy)
    assert path == SHARD3, reason


def test_garbage_header_json(sample_copy):
    p = os.path.join(sample_copy, SHARD1)
    with open(p, "r+b") as f:
        f.seek(8)
        f.write(b"{garbage, not json]")
    path, reason = refuse(sample_copy)
    assert path == SHARD1, reason


def test_header_length_beyond_file(sample_copy):
    p = os.path.join(sample_copy, SHARD1)
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.write(struct.pack("<Q", size * 2))
    path, reason = refuse(sample_copy)
    assert path == SHARD1, reason


def test_header_length_huge(sample_copy):
    p = os.path.join(sample_copy, SHARD3)
    with open(p, "r+b") as f:
        f.write(struct.pack("<Q", 2**64 - 8))
    path, reason = refuse(sample_copy)
    assert path == SHARD3, reason


def test_empty_file(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.safetensors").write_bytes(b"")
    path, reason = refuse(str(src))
    assert path == "model.safetensors", reason


def test_missing_shard(sample_copy):
    os.unlink(os.path.join(sample_copy, SHARD3))
    path, reason = refuse(sample_copy)
    # the missing file, or the index that names it
    assert path in (SHARD3, INDEX_NAME), reason


def _edit_index(src, fn):
    p = os.path.join(src, INDEX_NAME)
    with open(p) as f:
        idx = json.load(f)
    fn(idx)
    with open(p, "w") as f:
        json.dump(idx, f, indent=2)


def test_index_path_climbs_out(tmp_path, sample_copy):
    # a real, valid file outside SOURCE: it must still be refused
    outside = tmp_path / "outside.safetensors"
    with open(os.path.join(sample_copy, SHARD3), "rb") as f:
        outside.write_bytes(f.read())

    def edit(idx):
        for k, v in idx["weight_map"].items():
            if v == SHARD3:
                idx["weight_map"][k] = "../outside.safetensors"
    _edit_index(sample_copy, edit)
    path, reason = refuse(sample_copy)
    assert path == INDEX_NAME, reason


def test_index_absolute_path(tmp_path, sample_copy):
    outside = tmp_path / "abs.safetensors"
    with open(os.path.join(sample_copy, SHARD3), "rb") as f:
        outside.write_bytes(f.read())

    def edit(idx):
        for k, v in idx["weight_map"].items():
            if v == SHARD3:
                idx["weight_map"][k] = str(outside)
    _edit_index(sample_copy, edit)
    path, reason = refuse(sample_copy)
    assert path == INDEX_NAME, reason


def test_index_garbage(sample_copy):
    with open(os.path.join(sample_copy, INDEX_NAME), "w") as f:
        f.write('{"weight_map": [1, 2')
    path, reason = refuse(sample_copy)
    assert path == INDEX_NAME, reason


def test_noindex_duplicate_name(tmp_path):
    src = copy_source(SOURCES["noindex"], str(tmp_path / "src"))
    import torch
    from safetensors.torch import save_file
    # head.mask also lives in head.safetensors
    save_file({"head.mask": torch.zeros(4, dtype=torch.bool)},
              os.path.join(src, "extra.safetensors"), metadata={"format": "pt"})
    path, reason = refuse(src)
    assert path in ("extra.safetensors", "head.safetensors"), reason


def test_data_offsets_overlap(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    hdr = {"__metadata__": {"format": "pt"},
           "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
           "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}
    write_raw_safetensors(str(src / "model.safetensors"), hdr, bytes(range(24)))
    path, reason = refuse(str(src))
    assert path == "model.safetensors", reason


def test_data_offsets_hole(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    hdr = {"__metadata__": {"format": "pt"},
           "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
           "b": {"dtype": "F32", "shape": [4], "data_offsets": [24, 40]}}
    write_raw_safetensors(str(src / "model.safetensors"), hdr, bytes(range(40)))
    path, reason = refuse(str(src))
    assert path == "model.safetensors", reason


def test_size_does_not_match_shape(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    hdr = {"__metadata__": {"format": "pt"},
           "a": {"dtype": "F32", "shape": [5], "data_offsets": [0, 16]}}
    write_raw_safetensors(str(src / "model.safetensors"), hdr, bytes(16))
    path, reason = refuse(str(src))
    assert path == "model.safetensors", reason


def test_unknown_dtype(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    hdr = {"__metadata__": {"format": "pt"},
           "a": {"dtype": "Q7", "shape": [4], "data_offsets": [0, 16]}}
    write_raw_safetensors(str(src / "model.safetensors"), hdr, bytes(16))
    path, reason = refuse(str(src))
    assert path == "model.safetensors", reason


def test_refusal_in_hubcache_copy(tmp_path):
    """Through symlinks: the path reported is the snapshot name, relative to SOURCE."""
    src = str(tmp_path / "snap")
    os.mkdir(src)
    real = tmp_path / "blobs"
    real.mkdir()
    snap = SOURCES["hubcache"]
    for name in os.listdir(snap):
        data = open(os.path.join(snap, name), "rb").read()
        if name == SHARD2:
            data = data[:-4]
        (real / name).write_bytes(data)
        os.symlink(os.path.join("..", "blobs", name), os.path.join(src, name))
    path, reason = refuse(src)
    assert path == SHARD2, reason
