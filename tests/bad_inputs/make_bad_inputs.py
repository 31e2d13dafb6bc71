#!/usr/bin/env python3
"""Derive broken checkpoints from tests/fixtures: the bad-input matrix.

    python tests/bad_inputs/make_bad_inputs.py OUTDIR [CASE...]

writes OUTDIR/<case>/src (the SOURCE to mount: a directory, or src/<file>) for
every case in CASES (or the named ones) and OUTDIR/manifest.json. Never
writes into the repository. Needs torch (DCP .metadata is rewritten with the
real pickle classes: load, mutate, dump).

Every case is a checkpoint that unshardfs must REFUSE at mount -- exit 2, one
line `unshardfs: <path>: <reason>` naming the offending file relative to
SOURCE. Corruptions that leave a valid checkpoint (a flipped bit inside
tensor data, a renamed unused field) are deliberately not here.

A case builder gets its case directory and returns a dict:
  source   SOURCE, relative to the case directory
  path     the file the refusal must name (relative to SOURCE), or a tuple
           of acceptable names
  opts     extra daemon options (default none)
  marker   a file (relative to the case directory) that must NOT exist after
           the mount attempt: the payload of a hostile pickle would create it
  strace   run this case under strace and check no file outside SOURCE opens
  no_echo  strings the refusal must not contain: a foreign file's bytes (as text,
           or read as a number)
  why      what the case breaks (for reports)
"""
import glob
import io
import json
import os
import pickle
import shutil
import struct
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIX = os.path.join(REPO, "tests", "fixtures")
TORCH_FIX = os.path.join(FIX, "torch")

CASES = {}  # name -> builder, in definition order


def case(fn):
    CASES[fn.__name__] = fn
    return fn


# ---------------------------------------------------------------- helpers

def copy_fixture(name, root):
    """Copy fixture directory @name (relative to tests/fixtures) to root/src."""
    src = os.path.join(root, "src")
    shutil.copytree(os.path.join(FIX, name), src, symlinks=False)
    return src


def read(p):
    with open(p, "rb") as f:
        return f.read()


def write(p, data):
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data)


def patch(p, off, data):
    with open(p, "r+b") as f:
        f.seek(off)
        f.write(data)


def flip(p, off, mask=0x01):
    with open(p, "r+b") as f:
        f.seek(off)
        b = f.read(1)[0]
        f.seek(off)
        f.write(bytes([b ^ mask]))


def truncate(p, n):
    with open(p, "r+b") as f:
        f.truncate(n)


# safetensors

def st_parse(data):
    (n,) = struct.unpack("<Q", data[:8])
    return n, json.loads(data[8:8 + n]), data[8 + n:]


def st_build(header, payload, raw=None):
    text = raw if raw is not None else json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + payload


def st_single(root):
    """root/src/model.safetensors (a copy of the single fixture); returns (path, n, hdr, data)."""
    src = copy_fixture("single", root)
    p = os.path.join(src, "model.safetensors")
    n, hdr, payload = st_parse(read(p))
    return p, n, hdr, payload


def st_tensors(hdr):
    return sorted((k for k in hdr if k != "__metadata__"), key=lambda k: hdr[k]["data_offsets"])


# zip (torch.save archives)

def eocd_at(data):
    i = data.rfind(b"PK\x05\x06")
    assert i >= 0
    return i


def zip64_eocd_at(data):
    i = data.rfind(b"PK\x06\x06")
    assert i >= 0
    return i


def central_entries(data):
    """[(offset, name)] of the central directory entries."""
    off = struct.unpack("<Q", data[zip64_eocd_at(data) + 48:][:8])[0] \
        if data.rfind(b"PK\x06\x06") >= 0 else struct.unpack("<I", data[eocd_at(data) + 16:][:4])[0]
    out = []
    while data[off:off + 4] == b"PK\x01\x02":
        nlen, elen, clen = struct.unpack("<HHH", data[off + 28:off + 34])
        out.append((off, data[off + 46:off + 46 + nlen].decode()))
        off += 46 + nlen + elen + clen
    return out


def local_header_of(data, record):
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for i in z.infolist():
            if i.filename.endswith("/" + record):
                return i.header_offset
    raise KeyError(record)


def rezip(data, replace=None, drop=()):
    """The archive rewritten by zipfile (STORED), records replaced or dropped."""
    replace = replace or {}
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as zin, \
            zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
        prefix = zin.namelist()[0].split("/")[0]
        for info in zin.infolist():
            rec = info.filename[len(prefix) + 1:]
            if rec in drop:
                continue
            zout.writestr(info.filename, replace.get(rec, zin.read(info.filename)))
    return out.getvalue()


def data_record(data, rec):
    """The bytes of record @rec ("data/0") of a torch.save archive."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return z.read(next(n for n in z.namelist() if n.endswith("/" + rec)))


def data_pkl(data):
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        name = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
        return z.read(name)


def bin_single(root):
    src = copy_fixture("torch/single_bin", root)
    return os.path.join(src, "pytorch_model.bin")


def pk_str(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def hostile_pickle(module, name, args_pickle):
    """{"w": torch._utils._rebuild_tensor_v2(module.name(*args), 0, (2,), (1,), False,
    OrderedDict())}, protocol 2, hand-assembled: the call sits where the tensor's
    storage should be, so an executing unpickler runs it while loading, and the
    tensor it feeds is malformed (its storage is not a persistent id)."""
    return (b"\x80\x02}" + pk_str("w")
            + b"ctorch._utils\n_rebuild_tensor_v2\n("
            + b"c" + module.encode() + b"\n" + name.encode() + b"\n" + args_pickle + b"R"
            + b"K\x00K\x02\x85K\x01\x85\x89ccollections\nOrderedDict\n)Rt"
            + b"Rs.")


# DCP

def load_md(p):
    import torch.distributed.checkpoint.metadata  # noqa: F401  (the classes)
    with open(p, "rb") as f:
        return pickle.load(f)


def dump_md(md, p):
    with open(p, "wb") as f:
        pickle.dump(md, f)


def dcp_copy(root, name="torch/fsdp2_2rank"):
    src = copy_fixture(name, root)
    mp = os.path.join(src, ".metadata")
    return src, mp, load_md(mp)


def sharded_fqn(md):
    """A model tensor with two non-empty chunks split on dim 0."""
    for fqn, tsm in md.state_dict_metadata.items():
        chunks = getattr(tsm, "chunks", None)
        if fqn.startswith("model.") and chunks and len(chunks) == 2 and \
                all(c.sizes[0] > 0 for c in chunks) and len(tsm.size) == 2:
            return fqn, tsm
    raise AssertionError("no sharded tensor in the fixture")


def storage_key(md, fqn, offsets):
    for k in md.storage_data:
        if k.fqn == fqn and tuple(k.offset) == tuple(offsets):
            return k
    raise KeyError((fqn, offsets))


def set_storage(md, fqn, offsets, **changes):
    import dataclasses
    k = storage_key(md, fqn, offsets)
    md.storage_data[k] = dataclasses.replace(md.storage_data[k], **changes)
    return md.storage_data[k]


def move_chunk(md, fqn, i, new_offsets):
    """Give chunk @i of @fqn new offsets, in the chunk list and storage_data."""
    import dataclasses
    import torch
    tsm = md.state_dict_metadata[fqn]
    c = tsm.chunks[i]
    k = storage_key(md, fqn, c.offsets)
    info = md.storage_data.pop(k)
    new = torch.Size(new_offsets)
    md.storage_data[dataclasses.replace(k, offset=new)] = info
    tsm.chunks[i] = dataclasses.replace(c, offsets=new)


# ---------------------------------------------------------------- safetensors

@case
def st_shorter_than_8(root):
    p, *_ = st_single(root)
    truncate(p, 5)
    return dict(source="src", path="model.safetensors", why="truncated inside the length")


@case
def st_header_len_2p63(root):
    p, *_ = st_single(root)
    patch(p, 0, struct.pack("<Q", 1 << 63))
    return dict(source="src", path="model.safetensors", why="header length 2^63")


@case
def st_header_len_past_eof(root):
    p, *_ = st_single(root)
    patch(p, 0, struct.pack("<Q", os.path.getsize(p)))
    return dict(source="src", path="model.safetensors", why="header length past EOF")


@case
def st_header_truncated(root):
    p, n, *_ = st_single(root)
    truncate(p, 8 + n // 2)
    return dict(source="src", path="model.safetensors", why="file ends inside the header")


@case
def st_header_not_brace(root):
    p, *_ = st_single(root)
    flip(p, 8, 0x01)  # '{' -> 'z'
    return dict(source="src", path="model.safetensors", why="bit flip in the first JSON byte")


@case
def st_header_json_broken(root):
    p, n, *_ = st_single(root)
    data = read(p)
    i = data.index(b'"dtype"', 8)
    patch(p, i, b"\x00")  # a NUL where a quote was
    return dict(source="src", path="model.safetensors", why="NUL byte inside the JSON")


@case
def st_offsets_overlap(root):
    p, n, hdr, payload = st_single(root)
    a, b = st_tensors(hdr)[1:3]
    e = hdr[a]["data_offsets"]
    hdr[b]["data_offsets"] = [e[0], e[0] + hdr[b]["data_offsets"][1] - hdr[b]["data_offsets"][0]]
    write(p, st_build(hdr, payload))
    return dict(source="src", path="model.safetensors", why="two tensors share bytes")


@case
def st_offsets_hole(root):
    p, n, hdr, payload = st_single(root)
    for k in st_tensors(hdr):
        b, e = hdr[k]["data_offsets"]
        hdr[k]["data_offsets"] = [b + 8, e + 8]
    write(p, st_build(hdr, b"\0" * 8 + payload))
    return dict(source="src", path="model.safetensors", why="8-byte hole before the first tensor")


@case
def st_offsets_2p63(root):
    p, n, hdr, payload = st_single(root)
    last = st_tensors(hdr)[-1]
    hdr[last]["data_offsets"][1] = 1 << 63
    write(p, st_build(hdr, payload))
    return dict(source="src", path="model.safetensors", why="end offset 2^63")


@case
def st_shape_mismatch(root):
    p, n, hdr, payload = st_single(root)
    k = next(k for k in st_tensors(hdr) if hdr[k]["shape"] and hdr[k]["shape"][0] > 1)
    hdr[k]["shape"][0] += 1
    write(p, st_build(hdr, payload))
    return dict(source="src", path="model.safetensors", why="shape larger than its bytes")


@case
def st_shape_overflow(root):
    p, n, hdr, payload = st_single(root)
    k = next(k for k in st_tensors(hdr) if hdr[k]["shape"])
    hdr[k]["shape"] = [1 << 32, 1 << 32, 1 << 32]
    write(p, st_build(hdr, payload))
    return dict(source="src", path="model.safetensors", why="numel overflows u64")


@case
def st_unknown_dtype(root):
    p, n, hdr, payload = st_single(root)
    hdr[st_tensors(hdr)[0]]["dtype"] = "F12"
    write(p, st_build(hdr, payload))
    return dict(source="src", path="model.safetensors", why="unknown dtype")


@case
def st_metadata_not_string(root):
    p, n, hdr, payload = st_single(root)
    hdr["__metadata__"] = {"format": 1}
    write(p, st_build(hdr, payload))
    return dict(source="src", path="model.safetensors", why="__metadata__ value is a number")


@case
def st_data_truncated(root):
    p, *_ = st_single(root)
    truncate(p, os.path.getsize(p) - 1)
    return dict(source="src", path="model.safetensors", why="last data byte missing")


@case
def st_trailing_bytes(root):
    p, *_ = st_single(root)
    with open(p, "ab") as f:
        f.write(b"\0" * 8)
    return dict(source="src", path="model.safetensors", why="bytes after the last tensor")


@case
def st_unwrap_collision(root):
    src = os.path.join(root, "src")
    payload = b"\0" * 8
    hdr = {"__metadata__": {"format": "pt"},
           "module.x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
           "x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}
    write(os.path.join(src, "model.safetensors"), st_build(hdr, payload))
    return dict(source="src", path="model.safetensors", why="'module.x' and 'x' unwrap to one name")


@case
def st_shard_is_fifo(root):
    src = os.path.join(root, "src")
    os.makedirs(src)
    os.mkfifo(os.path.join(src, "model.safetensors"))
    return dict(source="src", path="model.safetensors",
                why="a FIFO named like a shard (open would block)")


@case
def st_shard_dangling_symlink(root):
    src = os.path.join(root, "src")
    os.makedirs(src)
    os.symlink("nowhere/model.safetensors", os.path.join(src, "model.safetensors"))
    return dict(source="src", path="model.safetensors",
                why="unreadable shard: a dangling symlink (tests run as root, so chmod 000 "
                    "would not stop reads)")


@case
def st_symlink_to_foreign_file(root):
    """model.safetensors a symlink to /etc/passwd: its first 8 bytes ('root:x:0') read as
    a header length; the refusal must not print them (as a number or otherwise)."""
    src = os.path.join(root, "src")
    os.makedirs(src)
    os.symlink("/etc/passwd", os.path.join(src, "model.safetensors"))
    head = read("/etc/passwd")[:8]
    return dict(source="src", path="model.safetensors",
                no_echo=[head.decode(errors="replace"), str(struct.unpack("<Q", head)[0])],
                why="a symlink to a foreign file (/etc/passwd) named model.safetensors")


@case
def st_empty_name(root):
    p, n, hdr, payload = st_single(root)
    hdr[""] = hdr.pop(st_tensors(hdr)[0])
    write(p, st_build(hdr, payload))
    return dict(source="src", path="model.safetensors",
                why="a tensor named '' (no tensors/ file can have that name)")


# ---------------------------------------------------------------- index

def index_case(root, mutate):
    src = copy_fixture("sample", root)
    p = os.path.join(src, "model.safetensors.index.json")
    with open(p) as f:
        idx = json.load(f)
    mutate(idx, src)
    with open(p, "w") as f:
        json.dump(idx, f)
    return src


@case
def idx_json_truncated(root):
    src = copy_fixture("sample", root)
    p = os.path.join(src, "model.safetensors.index.json")
    truncate(p, os.path.getsize(p) // 2)
    return dict(source="src", path="model.safetensors.index.json", why="index cut in half")


@case
def idx_no_weight_map(root):
    index_case(root, lambda idx, src: idx.pop("weight_map"))
    return dict(source="src", path="model.safetensors.index.json", why="no weight_map")


@case
def idx_absolute_path(root):
    def m(idx, src):
        k = sorted(idx["weight_map"])[0]
        idx["weight_map"][k] = "/etc/passwd"
    index_case(root, m)
    return dict(source="src", path="model.safetensors.index.json", strace=True,
                why="weight_map names an absolute path")


@case
def idx_dotdot_path(root):
    def m(idx, src):
        k = sorted(idx["weight_map"])[0]
        idx["weight_map"][k] = "../outside/" + idx["weight_map"][k]
        # make the target exist, so only the check can stop it
        shutil.copytree(src, os.path.join(root, "outside"))
    index_case(root, m)
    return dict(source="src", path="model.safetensors.index.json", strace=True,
                why="weight_map climbs out with ../")


@case
def idx_missing_shard(root):
    src = copy_fixture("sample", root)
    os.unlink(os.path.join(src, "model-00002-of-00003.safetensors"))
    return dict(source="src", path="model-00002-of-00003.safetensors", why="a shard is missing")


@case
def idx_wrong_shard(root):
    def m(idx, src):
        wm = idx["weight_map"]
        k = next(k for k in sorted(wm) if wm[k] == "model-00001-of-00003.safetensors")
        wm[k] = "model-00002-of-00003.safetensors"
    index_case(root, m)
    return dict(source="src", path=("model-00002-of-00003.safetensors", "model.safetensors.index.json"),
                why="weight_map puts a tensor in the wrong shard")


@case
def idx_shard_header_bitflip(root):
    src = copy_fixture("sample", root)
    p = os.path.join(src, "model-00003-of-00003.safetensors")
    flip(p, 7, 0x40)  # header length += 2^62
    return dict(source="src", path="model-00003-of-00003.safetensors",
                why="bit flip in a shard's header length")


# ---------------------------------------------------------------- directories

@case
def dir_empty(root):
    os.makedirs(os.path.join(root, "src"))
    return dict(source="src", path=".", why="empty directory")


@case
def dir_readme_only(root):
    write(os.path.join(root, "src", "README.md"), b"# a model card, no weights\n")
    return dict(source="src", path=".", why="only a README")


# ---------------------------------------------------------------- torch.save zip (.bin)

@case
def bin_truncated_half(root):
    p = bin_single(root)
    truncate(p, os.path.getsize(p) // 2)
    return dict(source="src", path="pytorch_model.bin", why="archive cut in half (no EOCD)")


@case
def bin_eocd_signature(root):
    p = bin_single(root)
    flip(p, eocd_at(read(p)) + 1, 0x10)
    return dict(source="src", path="pytorch_model.bin", why="bit flip in the EOCD signature")


@case
def bin_zip64_cd_offset_2p63(root):
    p = bin_single(root)
    patch(p, zip64_eocd_at(read(p)) + 48, struct.pack("<Q", 1 << 63))
    return dict(source="src", path="pytorch_model.bin", why="zip64 central directory offset 2^63")


@case
def bin_zip64_cd_size_huge(root):
    p = bin_single(root)
    patch(p, zip64_eocd_at(read(p)) + 40, struct.pack("<Q", (1 << 64) - 1))
    return dict(source="src", path="pytorch_model.bin", why="central directory size 2^64-1")


@case
def bin_central_signature(root):
    p = bin_single(root)
    off, _ = central_entries(read(p))[3]
    flip(p, off + 2, 0x04)
    return dict(source="src", path="pytorch_model.bin", why="bit flip in a central entry signature")


@case
def bin_central_compressed(root):
    p = bin_single(root)
    off, _ = next(e for e in central_entries(read(p)) if e[1].endswith("/data/0"))
    patch(p, off + 10, struct.pack("<H", 8))  # deflate
    return dict(source="src", path="pytorch_model.bin", why="a record claims deflate")


@case
def bin_central_local_offset_2p32(root):
    p = bin_single(root)
    off, _ = next(e for e in central_entries(read(p)) if e[1].endswith("/data/0"))
    patch(p, off + 42, struct.pack("<I", 0xFFFFFFFE))
    return dict(source="src", path="pytorch_model.bin", why="local header offset past the archive")


@case
def bin_local_header_signature(root):
    p = bin_single(root)
    flip(p, local_header_of(read(p), "data/0") + 3, 0x01)
    return dict(source="src", path="pytorch_model.bin", why="bit flip in a local header signature")


@case
def bin_local_name_len_huge(root):
    p = bin_single(root)
    patch(p, local_header_of(read(p), "data/0") + 26, struct.pack("<H", 0xFFFF))
    return dict(source="src", path="pytorch_model.bin",
                why="local header name length pushes the data past the central directory")


@case
def bin_storage_record_missing(root):
    p = bin_single(root)
    write(p, rezip(read(p), drop={"data/0"}))
    return dict(source="src", path="pytorch_model.bin", why="data/0 record dropped")


@case
def bin_storage_record_short(root):
    # data/0 is strided.transposed's storage, (7, 5) with strides (1, 7): its last
    # element is the record's last (a record shorter than its persistent id's numel
    # while every tensor still fits is not refused: see docs/hardening.md)
    p = bin_single(root)
    data = read(p)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        rec = next(n for n in z.namelist() if n.endswith("/data/0"))
        short = z.read(rec)[:-4]
    write(p, rezip(data, replace={"data/0": short}))
    return dict(source="src", path="pytorch_model.bin", why="a storage record 4 bytes short")


@case
def bin_datapkl_missing(root):
    p = bin_single(root)
    write(p, rezip(read(p), drop={"data.pkl"}))
    return dict(source="src", path="pytorch_model.bin", why="no data.pkl")


@case
def bin_pickle_truncated(root):
    p = bin_single(root)
    data = read(p)
    write(p, rezip(data, replace={"data.pkl": data_pkl(data)[:-10]}))
    return dict(source="src", path="pytorch_model.bin", why="data.pkl without its end")


@case
def bin_pickle_bad_opcode(root):
    p = bin_single(root)
    data = read(p)
    pk = bytearray(data_pkl(data))
    pk[2] = 0xFF  # the opcode after PROTO 2
    write(p, rezip(data, replace={"data.pkl": bytes(pk)}))
    return dict(source="src", path="pytorch_model.bin", why="unknown pickle opcode")


@case
def bin_pickle_string_len_huge(root):
    p = bin_single(root)
    data = read(p)
    pk = bytearray(data_pkl(data))
    i = pk.index(b"X")  # the first BINUNICODE
    pk[i + 1:i + 5] = struct.pack("<I", 0xFFFFFFF0)
    write(p, rezip(data, replace={"data.pkl": bytes(pk)}))
    return dict(source="src", path="pytorch_model.bin", why="BINUNICODE length 2^32-16")


@case
def bin_storage_type_unknown(root):
    p = bin_single(root)
    data = read(p)
    pk = data_pkl(data).replace(b"\nFloatStorage\n", b"\nQInt8Storage\n")
    write(p, rezip(data, replace={"data.pkl": pk}))
    return dict(source="src", path="pytorch_model.bin", why="QInt8Storage (no safetensors dtype)")


@case
def bin_dtype_unknown_v3(root):
    p = bin_single(root)
    data = read(p)
    pk = data_pkl(data)
    assert b"\nuint16\n" in pk
    write(p, rezip(data, replace={"data.pkl": pk.replace(b"\nuint16\n", b"\nqint32\n")}))
    return dict(source="src", path="pytorch_model.bin", why="_rebuild_tensor_v3 with torch.qint32")


@case
def bin_legacy_format(root):
    import torch
    src = os.path.join(root, "src")
    os.makedirs(src)
    torch.save({"w": torch.zeros(2)}, os.path.join(src, "pytorch_model.bin"),
               _use_new_zipfile_serialization=False)
    return dict(source="src", path="pytorch_model.bin", why="legacy (pre-1.6) torch.save")


@case
def bin_byteorder_big(root):
    """torch.load byte-swaps a big-endian archive: served unswapped it would be wrong values"""
    p = bin_single(root)
    write(p, rezip(read(p), replace={"byteorder": b"big"}))
    return dict(source="src", path="pytorch_model.bin", why="byteorder record says big")


@case
def bin_name_not_utf8(root):
    """a pickled str with a lone surrogate: torch.load takes it, safetensors cannot store it"""
    import torch
    src = os.path.join(root, "src")
    os.makedirs(src)
    torch.save({"\udc80x": torch.ones(2), "ok": torch.ones(1)},
               os.path.join(src, "pytorch_model.bin"))
    return dict(source="src", path="pytorch_model.bin", why="a tensor name that is not UTF-8")


@case
def bin_empty_name(root):
    import torch
    p = bin_single(root)
    sd = torch.load(p, weights_only=True)
    sd[""] = sd.pop(sorted(sd)[0])
    torch.save(sd, p)
    return dict(source="src", path="pytorch_model.bin",
                why="torch.save of a state dict with a key '' (no tensors/ file can have that name)")


def central_entry(data, record):
    """The central directory offset of record @record ("data/0")."""
    return next(off for off, name in central_entries(data) if name.endswith("/" + record))


@case
def bin_zip_aliased_record(root):
    """Two central entries, one local header: data/1's entry points at data/0's. torch
    and CPython's zipfile refuse it; served, the two storages would share bytes (and
    look like a tie)."""
    p = bin_single(root)
    data = read(p)
    patch(p, central_entry(data, "data/1") + 42, struct.pack("<I", local_header_of(data, "data/0")))
    return dict(source="src", path="pytorch_model.bin",
                why="the central directory points data/1 at data/0's local header")


@case
def bin_zip_size_overlaps_next(root):
    p = bin_single(root)
    data = read(p)
    off = central_entry(data, "data/0")
    size = struct.unpack("<I", data[off + 24:off + 28])[0]
    gap = local_header_of(data, "data/1") - local_header_of(data, "data/0")
    assert size < gap
    patch(p, off + 20, struct.pack("<II", gap, gap))  # compressed, uncompressed size
    return dict(source="src", path="pytorch_model.bin",
                why="data/0's central sizes run into data/1's local header")


@case
def bin_zip_local_name_differs(root):
    p = bin_single(root)
    data = read(p)
    loc = local_header_of(data, "data/0")
    nlen = struct.unpack("<H", data[loc + 26:loc + 28])[0]
    name = data[loc + 30:loc + 30 + nlen]
    assert name.endswith(b"/data/0")
    patch(p, loc + 30, name[:-1] + b"1")
    return dict(source="src", path="pytorch_model.bin",
                why="data/0's local header names data/1 (central directory and local "
                    "headers disagree)")


def hostile_case(root, module, name, argv):
    marker = os.path.join(root, "PWNED")
    cmd = f"touch {marker}"
    if name == "Popen":
        args = b"(" + b"(" + b"".join(pk_str(a) for a in ["sh", "-c", cmd]) + b"tt"
    elif name == "eval":
        args = pk_str(f"__import__('os').system({cmd!r})") + b"\x85"
    else:
        args = pk_str(cmd) + b"\x85"
    src = os.path.join(root, "src")
    pk = hostile_pickle(module, name, args)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pk)
        z.writestr("archive/version", b"3\n")
    write(os.path.join(src, "pytorch_model.bin"), buf.getvalue())
    return dict(source="src", path="pytorch_model.bin", marker="PWNED", strace=True,
                why=f"data.pkl calls {module}.{name}('touch ...') as a tensor's storage")


@case
def pkl_os_system(root):
    return hostile_case(root, "os", "system", None)


@case
def pkl_builtins_eval(root):
    return hostile_case(root, "builtins", "eval", None)


@case
def pkl_subprocess_popen(root):
    return hostile_case(root, "subprocess", "Popen", None)


@case
def bin_sharded_index_dotdot(root):
    src = copy_fixture("torch/bin_sharded", root)
    p = os.path.join(src, "pytorch_model.bin.index.json")
    with open(p) as f:
        idx = json.load(f)
    k = sorted(idx["weight_map"])[0]
    idx["weight_map"][k] = "../" + idx["weight_map"][k]
    shutil.copy(os.path.join(src, idx["weight_map"][k][3:]), root)
    with open(p, "w") as f:
        json.dump(idx, f)
    return dict(source="src", path="pytorch_model.bin.index.json", strace=True,
                why="torch index weight_map climbs out")


@case
def bin_sharded_missing_shard(root):
    src = copy_fixture("torch/bin_sharded", root)
    os.unlink(os.path.join(src, "pytorch_model-00002-of-00002.bin"))
    return dict(source="src", path="pytorch_model-00002-of-00002.bin", why="a .bin shard is missing")


# ---------------------------------------------------------------- DCP

@case
def dcp_metadata_truncated(root):
    src, mp, _ = dcp_copy(root)
    truncate(mp, os.path.getsize(mp) // 2)
    return dict(source="src", path=".metadata", why=".metadata cut in half")


@case
def dcp_metadata_bad_opcode(root):
    src, mp, _ = dcp_copy(root)
    patch(mp, 2, b"\xff")
    return dict(source="src", path=".metadata", why="unknown opcode after PROTO")


@case
def dcp_metadata_not_metadata(root):
    src, mp, _ = dcp_copy(root)
    with open(mp, "wb") as f:
        pickle.dump({"state_dict_metadata": {}}, f)
    return dict(source="src", path=".metadata", why="a pickle of a dict, not Metadata")


@case
def dcp_grid_hole(root):
    src, mp, md = dcp_copy(root)
    fqn, tsm = sharded_fqn(md)
    tsm.chunks.pop()  # the second row block is gone: a hole
    dump_md(md, mp)
    return dict(source="src", path=".metadata", why=f"{fqn}: a chunk dropped (hole)")


@case
def dcp_grid_overlap(root):
    src, mp, md = dcp_copy(root)
    fqn, tsm = sharded_fqn(md)
    move_chunk(md, fqn, 1, [tsm.chunks[1].offsets[0] - 1, 0])  # one row shared
    dump_md(md, mp)
    return dict(source="src", path=".metadata", why=f"{fqn}: chunks overlap by a row")


@case
def dcp_chunk_offset_2p63(root):
    src, mp, md = dcp_copy(root)
    fqn, tsm = sharded_fqn(md)
    move_chunk(md, fqn, 1, [(1 << 63) - 1, 0])
    dump_md(md, mp)
    return dict(source="src", path=".metadata", why="chunk offset 2^63-1 (offset + size overflows)")


@case
def dcp_chunk_size_mismatch(root):
    import dataclasses
    import torch
    src, mp, md = dcp_copy(root)
    fqn, tsm = sharded_fqn(md)
    c = tsm.chunks[1]
    tsm.chunks[1] = dataclasses.replace(c, sizes=torch.Size([c.sizes[0] + 1, c.sizes[1]]))
    tsm.size = torch.Size([tsm.size[0] + 1, tsm.size[1]])
    dump_md(md, mp)
    return dict(source="src", path=("__1_0.distcp", ".metadata"),
                why="a chunk's size disagrees with its item's tensor")


@case
def dcp_item_length_2p63(root):
    src, mp, md = dcp_copy(root)
    fqn, tsm = sharded_fqn(md)
    set_storage(md, fqn, tsm.chunks[0].offsets, length=1 << 63)
    dump_md(md, mp)
    return dict(source="src", path=("__0_0.distcp", ".metadata"), why="item length 2^63")


@case
def dcp_item_offset_past_eof(root):
    src, mp, md = dcp_copy(root)
    fqn, tsm = sharded_fqn(md)
    set_storage(md, fqn, tsm.chunks[1].offsets, offset=os.path.getsize(os.path.join(src, "__1_0.distcp")))
    dump_md(md, mp)
    return dict(source="src", path=("__1_0.distcp", ".metadata"), why="item offset at EOF")


@case
def dcp_relpath_absolute(root):
    src, mp, md = dcp_copy(root)
    fqn, tsm = sharded_fqn(md)
    set_storage(md, fqn, tsm.chunks[0].offsets, relative_path=os.path.join(TORCH_FIX, "fsdp2_2rank", "__0_0.distcp"))
    dump_md(md, mp)
    return dict(source="src", path=".metadata", strace=True, why="relative_path is absolute")


@case
def dcp_relpath_dotdot(root):
    src, mp, md = dcp_copy(root)
    shutil.copy(os.path.join(src, "__0_0.distcp"), root)
    fqn, tsm = sharded_fqn(md)
    set_storage(md, fqn, tsm.chunks[0].offsets, relative_path="../__0_0.distcp")
    dump_md(md, mp)
    return dict(source="src", path=".metadata", strace=True, why="relative_path climbs out")


@case
def dcp_relpath_nul(root):
    """torch refuses it; a reader that cut the path at the NUL would open __1_0.distcp"""
    src, mp, md = dcp_copy(root)
    fqn, tsm = sharded_fqn(md)
    set_storage(md, fqn, tsm.chunks[0].offsets,
                relative_path="__1_0.distcp\0/../../../etc/passwd")
    dump_md(md, mp)
    return dict(source="src", path=".metadata", strace=True, why="relative_path holds a NUL")


@case
def dcp_fqn_nul(root):
    src, mp, md = dcp_copy(root)
    fqn = next(iter(md.state_dict_metadata))
    md.state_dict_metadata[fqn + "\0x"] = md.state_dict_metadata.pop(fqn)
    dump_md(md, mp)
    return dict(source="src", path=".metadata", why="a state_dict_metadata key holds a NUL")


@case
def dcp_missing_distcp(root):
    src, mp, md = dcp_copy(root)
    os.unlink(os.path.join(src, "__1_0.distcp"))
    return dict(source="src", path="__1_0.distcp", why="a rank's data file is missing")


@case
def dcp_unknown_transform(root):
    src, mp, md = dcp_copy(root)
    fqn, tsm = sharded_fqn(md)
    set_storage(md, fqn, tsm.chunks[0].offsets, transform_descriptors=["stream.lz4/1"])
    dump_md(md, mp)
    return dict(source="src", path=".metadata", why="unknown transform descriptor")


@case
def dcp_unknown_dtype(root):
    import dataclasses
    import torch
    src, mp, md = dcp_copy(root)
    fqn, tsm = sharded_fqn(md)
    tsm.properties = dataclasses.replace(tsm.properties, dtype=torch.complex32)
    dump_md(md, mp)
    return dict(source="src", path=".metadata", why="complex32: no safetensors dtype")


@case
def dcp_item_eocd_bitflip(root):
    src, mp, md = dcp_copy(root)
    fqn, tsm = sharded_fqn(md)
    info = md.storage_data[storage_key(md, fqn, tsm.chunks[0].offsets)]
    p = os.path.join(src, info.relative_path)
    item = read(p)[info.offset:info.offset + info.length]
    flip(p, info.offset + item.rfind(b"PK\x05\x06") + 1, 0x10)
    return dict(source="src", path=info.relative_path, why="bit flip in an item's EOCD")


@case
def dcp_item_local_header_bitflip(root):
    src, mp, md = dcp_copy(root)
    fqn, tsm = sharded_fqn(md)
    info = md.storage_data[storage_key(md, fqn, tsm.chunks[1].offsets)]
    p = os.path.join(src, info.relative_path)
    item = read(p)[info.offset:info.offset + info.length]
    flip(p, info.offset + local_header_of(item, "data/0"), 0x01)
    return dict(source="src", path=info.relative_path, why="bit flip in an item's storage local header")


@case
def dcp_distcp_truncated(root):
    src, mp, md = dcp_copy(root)
    p = os.path.join(src, "__1_0.distcp")
    truncate(p, os.path.getsize(p) - 100)
    return dict(source="src", path="__1_0.distcp", why="last rank file 100 bytes short")


# ---------------------------------------------------------------- DCP + zstd

def zstd_items(md):
    return sorted(((k, v) for k, v in md.storage_data.items()
                   if k.fqn.startswith("model.")), key=lambda kv: kv[1].offset)


@case
def zstd_frame_magic(root):
    src, mp, md = dcp_copy(root, "torch/zstd")
    k, info = zstd_items(md)[2]
    flip(os.path.join(src, info.relative_path), info.offset, 0x01)
    return dict(source="src", path=info.relative_path, why="bit flip in a zstd frame magic")


@case
def zstd_item_middle_bitflip(root):
    src, mp, md = dcp_copy(root, "torch/zstd")
    k, info = max(zstd_items(md), key=lambda kv: kv[1].length)
    flip(os.path.join(src, info.relative_path), info.offset + info.length // 2, 0x20)
    return dict(source="src", path=info.relative_path,
                why="bit flip in the middle of the largest zstd item (caught by the frame or "
                    "by the storage record's CRC-32)")


@case
def zstd_item_cut_short(root):
    src, mp, md = dcp_copy(root, "torch/zstd")
    k, info = zstd_items(md)[3]
    set_storage(md, k.fqn, k.offset, length=info.length - 8)
    dump_md(md, mp)
    return dict(source="src", path=info.relative_path, why="item length 8 bytes short of its frame")


@case
def zstd_item_trailing(root):
    src, mp, md = dcp_copy(root, "torch/zstd")
    items = zstd_items(md)
    k, info = items[3]
    set_storage(md, k.fqn, k.offset, length=info.length + 16)  # 16 bytes of the next item
    dump_md(md, mp)
    return dict(source="src", path=info.relative_path, why="item runs 16 bytes past its frame")


@case
def zstd_unknown_transform(root):
    src, mp, md = dcp_copy(root, "torch/zstd")
    k, info = zstd_items(md)[0]
    set_storage(md, k.fqn, k.offset, transform_descriptors=["stream.zstd/2"])
    dump_md(md, mp)
    return dict(source="src", path=".metadata", why="stream.zstd/2")


@case
def zstd_two_transforms(root):
    src, mp, md = dcp_copy(root, "torch/zstd")
    k, info = zstd_items(md)[0]
    set_storage(md, k.fqn, k.offset, transform_descriptors=["stream.zstd/1", "stream.zstd/1"])
    dump_md(md, mp)
    return dict(source="src", path=".metadata", why="zstd applied twice")


@case
def zstd_file_truncated(root):
    src, mp, md = dcp_copy(root, "torch/zstd")
    p = os.path.join(src, "__0_0.distcp")
    truncate(p, os.path.getsize(p) // 2)
    return dict(source="src", path="__0_0.distcp", why="zstd data file cut in half")


# ---------------------------------------------------------------- DeepSpeed ZeRO

def ds_copy(root, name):
    """tests/fixtures/deepspeed/<name> at root/src; returns (src, its tag directory)."""
    src = copy_fixture(os.path.join("deepspeed", name), root)
    return src, os.path.join(src, "global_step2")


@case
def ds_missing_rank_optim(root):
    src, step = ds_copy(root, "z2_3rank_bf16")
    os.unlink(os.path.join(step, "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt"))
    return dict(source="src", path="global_step2/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt",
                why="the middle rank's optim file missing")


@case
def ds_missing_last_rank_optim(root):
    src, step = ds_copy(root, "z2_3rank_bf16")
    os.unlink(os.path.join(step, "bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt"))
    return dict(source="src", path="global_step2/bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt",
                why="the last rank's optim file missing (only partition_count tells)")


@case
def ds_stray_far_rank(root):
    """A rank file far past the others: the rank table grows to it (it is sized by the
    ranks present) and, past partition_count, it is named."""
    src, step = ds_copy(root, "z2_2rank")
    shutil.copy(os.path.join(step, "zero_pp_rank_1_mp_rank_00_optim_states.pt"),
                os.path.join(step, "zero_pp_rank_9999_mp_rank_00_optim_states.pt"))
    return dict(source="src", path="global_step2/zero_pp_rank_9999_mp_rank_00_optim_states.pt",
                why="a stray rank 9999 optim file beside ranks 0 and 1")


@case
def ds_rank_out_of_range(root):
    src, step = ds_copy(root, "z2_2rank")
    shutil.copy(os.path.join(step, "zero_pp_rank_1_mp_rank_00_optim_states.pt"),
                os.path.join(step, "zero_pp_rank_16384_mp_rank_00_optim_states.pt"))
    return dict(source="src", path="zero_pp_rank_16384_mp_rank_00_optim_states.pt",
                why="a rank number past the 16384 ranks a checkpoint may name")


@case
def ds_partition_count_disagrees(root):
    src, step = ds_copy(root, "z3_2rank")
    shutil.copy(os.path.join(FIX, "deepspeed", "z3_3rank_bf16", "global_step2",
                             "bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt"),
                os.path.join(step, "zero_pp_rank_2_mp_rank_00_optim_states.pt"))
    return dict(source="src", path=("global_step2/zero_pp_rank_0_mp_rank_00_optim_states.pt",
                                    "global_step2/zero_pp_rank_2_mp_rank_00_optim_states.pt"),
                why="a 3-rank run's rank file beside a 2-rank run's (partition_count 2 vs 3 files)")


@case
def ds_two_files_one_rank(root):
    src, step = ds_copy(root, "z2_2rank")
    shutil.copy(os.path.join(step, "zero_pp_rank_0_mp_rank_00_optim_states.pt"),
                os.path.join(step, "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"))
    return dict(source="src", path=("global_step2/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt",
                                    "global_step2/zero_pp_rank_0_mp_rank_00_optim_states.pt"),
                why="bf16_ and plain optim files for rank 0")


@case
def ds_optim_truncated(root):
    src, step = ds_copy(root, "z2_2rank")
    p = os.path.join(step, "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    truncate(p, os.path.getsize(p) // 2)
    return dict(source="src", path="global_step2/zero_pp_rank_1_mp_rank_00_optim_states.pt",
                why="a rank's optim file cut in half")


@case
def ds_partition_record_short(root):
    """The largest storage record of rank 1's optim file (an fp32 partition or a moment)
    4 bytes short: the partition no longer holds what the pickle says."""
    src, step = ds_copy(root, "z3_2rank")
    p = os.path.join(step, "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    data = read(p)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        rec = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
        short = z.read(rec.filename)[:-4]
    write(p, rezip(data, replace={rec.filename.split("/", 1)[1]: short}))
    return dict(source="src", path="global_step2/zero_pp_rank_1_mp_rank_00_optim_states.pt",
                why="a partition's storage record 4 bytes short")


@case
def ds_model_states_truncated(root):
    src, step = ds_copy(root, "z3_2rank")
    p = os.path.join(step, "zero_pp_rank_1_mp_rank_00_model_states.pt")
    truncate(p, os.path.getsize(p) - 30)
    return dict(source="src", path="global_step2/zero_pp_rank_1_mp_rank_00_model_states.pt",
                why="a ZeRO-3 model states file 30 bytes short (its end record gone)")


@case
def ds_missing_model_states_z3(root):
    src, step = ds_copy(root, "z3_3rank_bf16")
    os.unlink(os.path.join(step, "zero_pp_rank_1_mp_rank_00_model_states.pt"))
    return dict(source="src", path="global_step2/zero_pp_rank_1_mp_rank_00_model_states.pt",
                why="a ZeRO-3 rank's model states file missing")


@case
def ds_latest_names_missing(root):
    src, step = ds_copy(root, "z2_2rank")
    write(os.path.join(src, "latest"), b"global_step9")
    return dict(source="src", path="latest", why="latest names a tag directory that is not there")


@case
def ds_tensor_parallel(root):
    src, step = ds_copy(root, "z2_2rank")
    shutil.copy(os.path.join(step, "mp_rank_00_model_states.pt"),
                os.path.join(step, "mp_rank_01_model_states.pt"))
    return dict(source="src", path="global_step2/mp_rank_01_model_states.pt",
                why="a second tensor-parallel rank (unsupported)")


@case
def ds_module_weights_zero3(root):
    src, step = ds_copy(root, "z3_2rank")
    return dict(source="src", opts=["--deepspeed-weights=module"],
                path="global_step2/zero_pp_rank_0_mp_rank_00_model_states.pt",
                why="--deepspeed-weights=module on ZeRO-3 (its module holds no weights)")


def ds_latest_case(root, tag, **spec):
    """z2_2rank with latest holding @tag (bytes, or a symlink target when it is a str);
    the refusal must name latest."""
    src, step = ds_copy(root, "z2_2rank")
    latest = os.path.join(src, "latest")
    os.unlink(latest)
    if isinstance(tag, str):
        os.symlink(tag, latest)
    else:
        write(latest, tag)
    return dict(source="src", path="latest", **spec)


@case
def ds_latest_empty(root):
    return ds_latest_case(root, b"\n", why="latest is empty (white space only)")


@case
def ds_latest_absolute(root):
    out = os.path.join(root, "outside")
    shutil.copytree(os.path.join(FIX, "deepspeed", "z2_2rank", "global_step2"), out)
    return ds_latest_case(root, out.encode(), strace=True,
                          why="latest names an absolute path (a real tag directory)")


@case
def ds_latest_dotdot(root):
    shutil.copytree(os.path.join(FIX, "deepspeed", "z2_2rank", "global_step2"),
                    os.path.join(root, "outside", "global_step2"))
    return ds_latest_case(root, b"../outside/global_step2", strace=True,
                          why="latest climbs out of SOURCE with ../ (to a real tag directory)")


@case
def ds_latest_foreign_symlink(root):
    head = read("/etc/passwd")[:8]
    return ds_latest_case(root, "/etc/passwd", no_echo=[head.decode(errors="replace")],
                          why="latest a symlink to a foreign file (/etc/passwd)")


@case
def ds_latest_names_file(root):
    return ds_latest_case(root, b"global_step2/mp_rank_00_model_states.pt",
                          why="latest names a regular file, not a tag directory")


@case
def ds_latest_universal_empty(root):
    src, uc = uc_copy(root)
    write(os.path.join(src, "latest_universal"), b"")
    return dict(source="src", path="latest_universal", why="latest_universal is empty")


@case
def ds_latest_universal_foreign_symlink(root):
    src, uc = uc_copy(root)
    os.unlink(os.path.join(src, "latest_universal"))
    os.symlink("/etc/passwd", os.path.join(src, "latest_universal"))
    return dict(source="src", path="latest_universal",
                no_echo=[read("/etc/passwd")[:8].decode(errors="replace")],
                why="latest_universal a symlink to a foreign file (/etc/passwd)")


@case
def ds_latest_universal_names_file(root):
    src, uc = uc_copy(root)
    write(os.path.join(src, "latest_universal"), b"global_step2_universal/zero/optimizer_state.pt")
    return dict(source="src", path="latest_universal",
                why="latest_universal names a regular file, not a folder")


# ---------------------------------------------------------------- DeepSpeed universal

def uc_copy(root, name="uc_z3_2rank"):
    """A universal fixture at root/src; returns (src, its <tag>_universal folder)."""
    src = copy_fixture(os.path.join("deepspeed", name), root)
    return src, os.path.join(src, "global_step2_universal")


UC = "global_step2_universal/"


@case
def uc_stray_far_rank(root):
    src, uc = uc_copy(root)
    shutil.copy(os.path.join(uc, "zero_pp_rank_1_mp_rank_00_model_states.pt"),
                os.path.join(uc, "zero_pp_rank_5000_mp_rank_00_model_states.pt"))
    return dict(source="src", path=UC + "zero_pp_rank_2_mp_rank_00_model_states.pt",
                why="a stray rank 5000 model states file (the table grows; rank 2 is missing)")


@case
def uc_missing_fp32(root):
    src, uc = uc_copy(root)
    os.unlink(os.path.join(uc, "zero", "cube", "fp32.pt"))
    return dict(source="src", path=UC + "zero/cube/fp32.pt", why="a param's fp32.pt missing")


@case
def uc_truncated_fp32(root):
    src, uc = uc_copy(root, "uc_z2_3rank_bf16")
    p = os.path.join(uc, "zero", "body.weight", "fp32.pt")
    truncate(p, os.path.getsize(p) // 2)
    return dict(source="src", path=UC + "zero/body.weight/fp32.pt", why="a param's fp32.pt cut in half")


@case
def uc_fp32_record_short(root):
    src, uc = uc_copy(root)
    p = os.path.join(uc, "zero", "cube", "fp32.pt")
    data = read(p)
    write(p, rezip(data, replace={"data/0": data_record(data, "data/0")[:-4]}))
    return dict(source="src", path=UC + "zero/cube/fp32.pt", why="fp32.pt's storage record 4 bytes short")


@case
def uc_fp32_wrong_numel(root):
    src, uc = uc_copy(root)
    shutil.copy(os.path.join(uc, "zero", "body.bias", "fp32.pt"),
                os.path.join(uc, "zero", "cube", "fp32.pt"))
    return dict(source="src", path=UC + "zero/cube/fp32.pt",
                why="another param's fp32.pt: its numel disagrees with param_shapes")


@case
def uc_missing_exp_avg(root):
    src, uc = uc_copy(root)
    os.unlink(os.path.join(uc, "zero", "cube", "exp_avg.pt"))
    return dict(source="src", path=UC + "zero/cube/exp_avg.pt",
                why="one param's exp_avg.pt missing while the others have theirs")


@case
def uc_missing_optimizer_state(root):
    src, uc = uc_copy(root)
    os.unlink(os.path.join(uc, "zero", "optimizer_state.pt"))
    return dict(source="src", path=UC + "zero/optimizer_state.pt",
                why="zero/optimizer_state.pt missing")


@case
def uc_optimizer_state_truncated(root):
    src, uc = uc_copy(root)
    p = os.path.join(uc, "zero", "optimizer_state.pt")
    truncate(p, os.path.getsize(p) // 2)
    return dict(source="src", path=UC + "zero/optimizer_state.pt",
                why="zero/optimizer_state.pt cut in half")


@case
def uc_missing_model_states_rank(root):
    src, uc = uc_copy(root)
    os.unlink(os.path.join(uc, "zero_pp_rank_1_mp_rank_00_model_states.pt"))
    return dict(source="src", path=UC + "zero_pp_rank_1_mp_rank_00_model_states.pt",
                why="the last ZeRO-3 model states file missing (only partition_count tells)")


@case
def uc_latest_names_missing(root):
    src, uc = uc_copy(root)
    shutil.rmtree(uc)
    return dict(source="src", path="latest_universal",
                why="latest_universal names a folder that is not there")


# ---------------------------------------------------------------- recipes (docs/recipes.md)
# A broken --recipe FILE is refused at mount like a broken checkpoint: one line naming the
# recipe file (as given) and the rule; a recipe that does not fit the checkpoint names the
# rule, or the tensor no rule matches (in the file that declared it).

TT_LLAMA = "torchtitan/llama3"
LLAMA_RECIPE = os.path.join(REPO, "lib", "recipes", "builtin", "torchtitan-llama3.json")


def recipe_case(root, edit, why, path=None):
    """SOURCE: the torchtitan Llama 3 fixture; --recipe: the built-in's JSON after
    edit(rules) (a list it may change in place, or return a replacement document)."""
    shutil.copytree(os.path.join(FIX, TT_LLAMA, "ckpt", "step-1"), os.path.join(root, "src"))
    with open(LLAMA_RECIPE) as f:
        doc = json.load(f)
    out = edit(doc["rules"])
    if out is not None:
        doc = out
    rp = os.path.join(root, "recipe.json")
    with open(rp, "w") as f:
        f.write(doc if isinstance(doc, str) else json.dumps(doc))
    return dict(source="src", path=path or rp, why=why,
                opts=[f"--recipe={rp}", f"--overlay={os.path.join(FIX, TT_LLAMA, 'hf')}"])


def rule(rules, src):
    return next(r for r in rules if r["from"] == src)


WQ = "layers.{i}.attention.qkv_linear.wq.weight"


@case
def recipe_unknown_transform(root):
    return recipe_case(root, lambda r: rule(r, "norm.weight").update(rotate={"dim": 0}),
                       "a transform that does not exist")


@case
def recipe_capture_not_in_target(root):
    return recipe_case(root, lambda r: rule(r, WQ).update(to="model.q_proj.weight"),
                       "a capture of from missing from to (all layers would get one name)")


@case
def recipe_target_capture_unknown(root):
    return recipe_case(root, lambda r: rule(r, "norm.weight").update(to="model.{j}.norm.weight"),
                       "a capture of to that nothing supplies")


@case
def recipe_two_rules_one_pattern(root):
    return recipe_case(root, lambda r: rule(r, "lm_head.weight").update(to="model.norm.weight"),
                       "two rules with the same target pattern")


@case
def recipe_two_rules_one_name(root):
    def edit(r):
        rule(r, "norm.weight").update(to="model.layers.0.post_attention_layernorm.weight")
    return recipe_case(root, edit, "two rules making one name for this checkpoint")


@case
def recipe_slice_out_of_range(root):
    return recipe_case(root, lambda r: rule(r, "norm.weight").update(
        slice={"dim": 0, "start": 0, "stop": 33}), "a slice past the end of the dim")


@case
def recipe_slice_dim_out_of_range(root):
    return recipe_case(root, lambda r: rule(r, "norm.weight").update(
        slice={"dim": 1, "start": 0, "stop": 1}), "a slice of a dim the tensor lacks")


@case
def recipe_permutation_size_mismatch(root):
    return recipe_case(root, lambda r: rule(r, "norm.weight").update(
        permute={"dim": 0, "order": [1, 0, 2, 3, 4]}), "a permutation of 5 for a dim of 32")


@case
def recipe_permutation_not_bijective(root):
    return recipe_case(root, lambda r: rule(r, "norm.weight").update(
        permute={"dim": 0, "order": [0, 0, 1]}), "an order with an index twice")


@case
def recipe_rope_not_divisible(root):
    return recipe_case(root, lambda r: rule(r, WQ).update(
        permute={"dim": 0, "rope": "interleaved_to_halves", "head_dim": 12}),
        "32 rows are not a multiple of head_dim 12")


@case
def recipe_rope_head_dim_odd(root):
    return recipe_case(root, lambda r: rule(r, WQ).update(
        permute={"dim": 0, "rope": "interleaved_to_halves", "head_dim": 7}),
        "an odd head_dim (rotary pairs)")


@case
def recipe_split_dim_out_of_range(root):
    return recipe_case(root, lambda r: rule(r, WQ).update(
        to="model.layers.{i}.self_attn.q_proj.{e}.weight", split={"dim": 2, "as": "e"}),
        "a split of a dim the tensor lacks")


@case
def recipe_split_capture_not_in_target(root):
    return recipe_case(root, lambda r: rule(r, WQ).update(split={"dim": 0, "as": "e"}),
                       "split's index capture missing from to")


@case
def recipe_bad_cast(root):
    return recipe_case(root, lambda r: rule(r, "norm.weight").update(cast="I8"),
                       "a cast to a non-float dtype")


@case
def recipe_drop_with_target(root):
    return recipe_case(root, lambda r: rule(r, "norm.weight").update(drop=True),
                       "a dropped tensor with a target")


@case
def recipe_drop_what_another_maps(root):
    return recipe_case(root, lambda r: r.append({"from": "norm.weight", "drop": True}),
                       "one rule drops what another maps")


@case
def recipe_unclosed_brace(root):
    return recipe_case(root, lambda r: rule(r, WQ).update(**{"from": "layers.{i.wq.weight"}),
                       "an unclosed capture")


@case
def recipe_not_json(root):
    return recipe_case(root, lambda r: '{"unshardfs_recipe": 1, "rules": [', "not JSON")


@case
def recipe_no_version(root):
    return recipe_case(root, lambda r: {"rules": r}, "no \"unshardfs_recipe\": 1")


@case
def recipe_tensor_without_rule(root):
    return recipe_case(root, lambda r: r.remove(rule(r, "norm.weight")),
                       "a checkpoint tensor no rule matches (never dropped silently)",
                       path=".metadata")


@case
def recipe_required_rule_unmatched(root):
    return recipe_case(root, lambda r: r.append(
        {"from": "layers.{i}.attention.q_norm.weight", "to": "model.layers.{i}.q_norm.weight",
         "require": True}), "a required rule that matches nothing (another model's recipe)")


WK = "layers.{i}.attention.qkv_linear.wk.weight"
WV = "layers.{i}.attention.qkv_linear.wv.weight"


def concat_qkv(rules, inputs, dim=0, keep=()):
    """Replace the wq/wk/wv rules (but those in @keep) by one concat of @inputs."""
    rules[:] = [r for r in rules if r["from"] not in {WQ, WK, WV} - set(keep)]
    rules.append({"from": inputs, "to": "model.layers.{i}.self_attn.qkv_proj.weight",
                  "concat": {"dim": dim}})


@case
def recipe_concat_shapes_differ(root):
    return recipe_case(root, lambda r: concat_qkv(r, [WQ, WK, WV], dim=1),
                       "a concat along dim 1 of [32,32] and [16,32] (rows differ)")


@case
def recipe_concat_input_missing(root):
    return recipe_case(root, lambda r: concat_qkv(
        r, [WQ, WK, WV, "layers.{i}.attention.qkv_linear.wqkv.bias"]),
        "a concat input the checkpoint lacks")


@case
def recipe_concat_input_used_twice(root):
    return recipe_case(root, lambda r: concat_qkv(r, [WQ, WK, WV], keep=[WK]),
                       "a concat input another rule also maps (served twice)")


@case
def recipe_concat_captures_differ(root):
    return recipe_case(root, lambda r: concat_qkv(r, [WQ, "norm.weight"]),
                       "concat inputs with different captures")


@case
def recipe_concat_from_not_list(root):
    return recipe_case(root, lambda r: rule(r, "norm.weight").update(concat={"dim": 0}),
                       "a concat of one input")


@case
def recipe_offset_capture_not_in_from(root):
    return recipe_case(root, lambda r: rule(r, WQ).update(offset={"k": 1}),
                       "an offset of a capture \"from\" does not have")


@case
def recipe_offset_negative(root):
    return recipe_case(root, lambda r: rule(r, WQ).update(offset={"i": -2}),
                       "a negative offset (layer numbers are not counted down)")


@case
def recipe_offset_not_a_config_key(root):
    return recipe_case(root, lambda r: rule(r, WQ).update(offset={"i": "num_hidden_layers"}),
                       "an offset that is neither a number nor \"config:KEY\"")


@case
def recipe_offset_config_lacks_key(root):
    return recipe_case(root, lambda r: rule(r, WQ).update(
        offset={"i": "config:num_nextn_predict_layers"}),
        "an offset from a config.json key Llama's config.json does not have")


@case
def recipe_offset_makes_one_name_twice(root):
    return recipe_case(root, lambda r: rule(r, "layers.{i}.attention.wo.weight").update(
        to="model.layers.{i}.self_attn.q_proj.weight", offset={"i": 1}),
        "an offset that numbers layer 0's wo as layer 1's wq")


@case
def recipe_mtp_without_num_hidden_layers(root):
    """The DeepSeek-V3 MTP fixture, the built-in recipe as a file, and an overlay whose
    config.json lacks num_hidden_layers: the MTP layers' numbers cannot be known."""
    tt = os.path.join(FIX, "torchtitan", "deepseek_v3_mtp")
    shutil.copytree(os.path.join(tt, "ckpt", "step-1"), os.path.join(root, "src"))
    with open(os.path.join(tt, "hf", "config.json")) as f:
        cfg = json.load(f)
    del cfg["num_hidden_layers"]
    os.makedirs(os.path.join(root, "hf"))
    with open(os.path.join(root, "hf", "config.json"), "w") as f:
        json.dump(cfg, f)
    rp = os.path.join(root, "recipe.json")
    shutil.copy(os.path.join(REPO, "lib", "recipes", "builtin", "torchtitan-deepseek-v3.json"), rp)
    return dict(source="src", path=rp, opts=[f"--recipe={rp}", f"--overlay={root}/hf"],
                why="MTP layers numbered after num_hidden_layers, which config.json lacks")


# ---------------------------------------------------------------- driver

def build(out, names=None):
    """Build the named cases (all by default) under @out; returns {name: spec}."""
    os.makedirs(out, exist_ok=True)
    specs = {}
    for name in names or CASES:
        root = os.path.join(out, name)
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        spec = CASES[name](root)
        spec.setdefault("opts", [])
        spec.setdefault("marker", None)
        spec.setdefault("strace", False)
        spec.setdefault("no_echo", [])
        p = spec["path"]
        spec["path"] = list(p) if isinstance(p, tuple) else [p]
        spec["root"] = root
        specs[name] = spec
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(specs, f, indent=1)
    return specs


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = os.path.abspath(sys.argv[1])
    if out == REPO or out.startswith(REPO + os.sep):
        sys.exit("make_bad_inputs.py: OUTDIR must be outside the repository")
    specs = build(out, sys.argv[2:] or None)
    print(f"{len(specs)} cases in {out}")
