"""pytorch_model.bin through the mount, read by the real clients (torch.load with
weights_only, with and without mmap; transformers; Python's zipfile; torch's own zip
reader), checked tensor by tensor against the source files read directly.

The layout is documented in docs/pytorch_model_bin.md."""
import collections
import gc
import io
import json
import os
import pickletools
import shutil
import struct
import tempfile
import zipfile

import pytest

from conftest import SOURCES, mount, source_tensors, tensor_bytes

BIN = "pytorch_model.bin"
U32M = 0xFFFFFFFF

# formats.md: what torch.load(weights_only=True) accepts; the view must stay inside it.
ALLOWED_OPCODES = {
    "PROTO", "STOP", "GLOBAL", "NEWOBJ", "REDUCE", "BUILD", "APPEND", "APPENDS",
    "SETITEM", "SETITEMS", "MARK", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "NONE",
    "NEWTRUE", "NEWFALSE", "EMPTY_TUPLE", "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET",
    "BININT", "BININT1", "BININT2", "BINFLOAT", "BINUNICODE", "SHORT_BINSTRING",
    "BINPERSID", "BINGET", "LONG_BINGET", "BINPUT", "LONG_BINPUT", "LONG1",
}


def torch_dtype(st):
    import torch
    return {
        "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
        "I32": torch.int32, "I64": torch.int64, "F16": torch.float16,
        "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
        "C64": torch.complex64, "U16": torch.uint16, "U32": torch.uint32,
        "U64": torch.uint64, "F8_E5M2": torch.float8_e5m2,
        "F8_E4M3": torch.float8_e4m3fn, "F8_E8M0": torch.float8_e8m0fnu,
        "F8_E4M3FNUZ": torch.float8_e4m3fnuz, "F8_E5M2FNUZ": torch.float8_e5m2fnuz,
    }[st]


@pytest.fixture(scope="module", params=sorted(SOURCES), ids=sorted(SOURCES))
def mounted(request):
    """(id, source, mountpoint, whole pytorch_model.bin bytes, source tensors)."""
    name = request.param
    src = SOURCES[name]
    expect = source_tensors(src)
    with mount(src) as mnt:
        with open(os.path.join(mnt, BIN), "rb") as f:
            whole = f.read()
        yield name, src, mnt, whole, expect
        gc.collect()


def _check_load(path, expect, mmap):
    """torch.load the file; compare every tensor; return private copies (so that no
    tensor keeps the mounted file mapped)."""
    import torch
    sd = torch.load(path, weights_only=True, mmap=mmap)
    assert isinstance(sd, collections.OrderedDict)
    assert list(sd) == sorted(expect)
    for name, (dtype, shape, raw, _rel) in expect.items():
        t = sd[name]
        assert t.dtype == torch_dtype(dtype), name
        assert list(t.shape) == shape, name
        assert t.is_contiguous() and t.storage_offset() == 0, name
        assert not t.requires_grad
        assert tensor_bytes(t) == raw, name
    return collections.OrderedDict((k, v.clone()) for k, v in sd.items())


def test_size_matches_stat(mounted):
    _id, _src, mnt, whole, _expect = mounted
    assert os.stat(os.path.join(mnt, BIN)).st_size == len(whole)


@pytest.mark.parametrize("mmap", [False, True], ids=["read", "mmap"])
def test_torch_load(mounted, mmap):
    _id, _src, mnt, _whole, expect = mounted
    _check_load(os.path.join(mnt, BIN), expect, mmap)
    gc.collect()


def test_pickle_is_torch_saves(mounted):
    """data.pkl is byte for byte what torch.save writes for the same OrderedDict, and
    uses only the opcodes the weights_only unpickler accepts."""
    import torch
    _id, _src, _mnt, whole, expect = mounted
    ours = zipfile.ZipFile(io.BytesIO(whole)).read("archive/data.pkl")
    ops = {op.name for op, _arg, _pos in pickletools.genops(ours)}
    assert ops <= ALLOWED_OPCODES, ops - ALLOWED_OPCODES
    sd = torch.load(io.BytesIO(whole), weights_only=True)
    buf = io.BytesIO()
    torch.save(sd, buf)
    theirs = zipfile.ZipFile(io.BytesIO(buf.getvalue())).read("archive/data.pkl")
    assert ours == theirs


def test_zip_layout(mounted):
    """Records, STORED, DOS time 0, data 64-aligned, CRC policy (docs/pytorch_model_bin.md)."""
    _id, _src, _mnt, whole, expect = mounted
    z = zipfile.ZipFile(io.BytesIO(whole))
    infos = z.infolist()
    names = [i.filename for i in infos]
    nstor = len(expect)
    assert names == (["archive/data.pkl", "archive/byteorder"]
                     + [f"archive/data/{k}" for k in range(nstor)] + ["archive/version"])
    assert z.read("archive/byteorder") == b"little"
    assert z.read("archive/version") == b"3\n"
    for i in infos:
        assert i.compress_type == zipfile.ZIP_STORED
        assert i.date_time == (1980, 0, 0, 0, 0, 0)
        nl, el = struct.unpack("<HH", whole[i.header_offset + 26:i.header_offset + 30])
        data = i.header_offset + 30 + nl + el
        assert data % 64 == 0, i.filename
        if "/data/" not in i.filename:
            # records built at mount carry their real CRC: zipfile reads them
            assert whole[data:data + i.file_size] == z.read(i)
        else:
            # tensor bytes are never read at mount: their CRC is 0 (documented)
            assert i.CRC == 0
            if i.file_size:
                with pytest.raises(zipfile.BadZipFile, match="CRC"):
                    z.read(i)


def _check_offsets_like_miniz(path, sizes):
    """torch's own zip reader finds every storage where miniz's arithmetic (what
    torch.load uses when .format_version is present) says it is."""
    import torch
    r = torch._C.PyTorchFileReader(path)
    assert not r.has_record(".format_version")
    nxt = None
    for k, size in enumerate(sizes):
        name = f"data/{k}"
        hdr = r.get_record_header_offset(name)
        off = r.get_record_offset(name)
        assert off % 64 == 0
        assert r.get_record_offset_no_read(hdr, name, size, 64) == off, name
        if nxt is not None:
            assert hdr == nxt, name
        nxt = off + size
        if size:
            nxt += 24 if (hdr >= U32M or size >= U32M) else 16


def test_offsets_like_miniz(mounted):
    _id, _src, mnt, _whole, expect = mounted
    sizes = [len(expect[n][2]) for n in sorted(expect)]
    _check_offsets_like_miniz(os.path.join(mnt, BIN), sizes)


def test_deterministic_across_mounts(mounted):
    _id, src, _mnt, whole, _expect = mounted
    with mount(src) as mnt2:
        with open(os.path.join(mnt2, BIN), "rb") as f:
            again = f.read()
    assert again == whole


def test_odd_reads(mounted):
    _id, _src, mnt, whole, _expect = mounted
    with open(os.path.join(mnt, BIN), "rb", buffering=0) as f:
        for off, n in [(0, 1), (29, 7), (63, 130), (len(whole) - 23, 100), (len(whole), 5)]:
            f.seek(off)
            assert f.read(n) == whole[off:off + n]


@pytest.mark.logits
def test_transformers_loads_bin():
    """from_pretrained on a directory holding only config.json and the mount's
    pytorch_model.bin gives the same logits as the source."""
    import torch
    from transformers import AutoModelForCausalLM
    src = SOURCES["sample"]
    ref = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    ids = torch.arange(1, 17).reshape(1, 16)
    with torch.no_grad():
        want = ref(ids).logits
    tmp = tempfile.mkdtemp(prefix="unshardfs-bin-")
    try:
        with mount(src) as mnt:
            for n in ("config.json", BIN):
                os.symlink(os.path.join(mnt, n), os.path.join(tmp, n))
            model = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
            with torch.no_grad():
                got = model(ids).logits
            del model
            gc.collect()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert torch.equal(got, want)


def _write_sparse_st(path, tensors, total):
    """A safetensors file whose data buffer is sparse; tensors: [(name, dtype, shape, begin, end)]."""
    hdr = {n: {"dtype": d, "shape": s, "data_offsets": [b, e]} for n, d, s, b, e in tensors}
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    start = 8 + len(h)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(start + total)
    return start


def test_zip64_over_4gib(tmp_path):
    """A state dict over 4 GiB: zip64 sizes and offsets are right for zipfile, for
    torch's reader and for torch.load(mmap=True), without reading the big tensor."""
    import torch
    big = (1 << 32) + 100
    src = tmp_path / "src"
    src.mkdir()
    st = str(src / "model.safetensors")
    start = _write_sparse_st(st, [("a", "F32", [4], 0, 16), ("big", "U8", [big], 16, 16 + big),
                                  ("c", "I16", [7], 16 + big, 30 + big)], 30 + big)
    with open(st, "r+b") as f:
        f.seek(start)
        f.write(bytes(range(0xA0, 0xB0)))
        f.seek(start + 16 + big)
        f.write(bytes(range(0xC0, 0xCE)))
    with mount(str(src)) as mnt:
        p = os.path.join(mnt, BIN)
        infos = {i.filename: i for i in zipfile.ZipFile(p).infolist()}
        assert infos["archive/data/1"].file_size == big
        assert infos["archive/data/2"].header_offset > U32M
        _check_offsets_like_miniz(p, [16, big, 14])

        def load():
            sd = torch.load(p, weights_only=True, mmap=True)
            assert sd["big"].shape == (big,) and sd["big"].dtype == torch.uint8
            tail = sd["big"][-4:].clone()
            return sd["a"].clone(), tail, sd["c"].clone()

        a, tail, c = load()
        gc.collect()
    assert tensor_bytes(a) == bytes(range(0xA0, 0xB0))
    assert tail.tolist() == [0, 0, 0, 0]
    assert tensor_bytes(c) == bytes(range(0xC0, 0xCE))



def test_many_tensors_big_ints(tmp_path):
    """Past 1000 items (SETITEMS batches), past 255 memo entries (LONG_BINPUT/BINGET),
    sizes >= 2^31 (LONG1), 4-D and 5-D shapes: still torch.save's data.pkl, still loads."""
    import torch
    from safetensors.torch import save_file
    tensors = {f"t{i:04d}": torch.full((i % 3 + 1,), i, dtype=torch.int16) for i in range(1001)}
    tensors["wide"] = torch.empty(0, 3_000_000_000, dtype=torch.float32)
    tensors["wide2"] = torch.ones(2, 2, dtype=torch.float32)  # a late memo, fetched again
    tensors["huge"] = torch.empty(5_000_000_000_000, 0, dtype=torch.bfloat16)
    tensors["d4"] = torch.arange(24, dtype=torch.float64).reshape(1, 2, 3, 4)
    tensors["d5"] = torch.arange(48).to(torch.uint16).reshape(2, 1, 2, 3, 4)
    src = tmp_path / "src"
    src.mkdir()
    save_file(tensors, str(src / "model.safetensors"), metadata={"format": "pt"})
    with mount(str(src)) as mnt:
        with open(os.path.join(mnt, BIN), "rb") as f:
            whole = f.read()
    ours = zipfile.ZipFile(io.BytesIO(whole)).read("archive/data.pkl")
    ops = {op.name for op, _arg, _pos in pickletools.genops(ours)}
    assert {"LONG1", "LONG_BINPUT", "LONG_BINGET", "SETITEMS"} <= ops <= ALLOWED_OPCODES
    sd = torch.load(io.BytesIO(whole), weights_only=True)
    assert list(sd) == sorted(tensors)
    for k, t in tensors.items():
        assert sd[k].dtype == t.dtype and sd[k].shape == t.shape, k
        assert torch.equal(sd[k], t), k
    buf = io.BytesIO()
    torch.save(sd, buf)
    assert ours == zipfile.ZipFile(io.BytesIO(buf.getvalue())).read("archive/data.pkl")
