"""model.safetensors through the mount, read by the real safetensors/torch/numpy clients,
checked tensor by tensor against the source files read directly."""
import gc
import json
import mmap
import os
import random
import struct

import pytest

from conftest import (DTYPE_SIZE, NUMPY_UNSUPPORTED, SOURCES, mount, parse_header,
                      source_tensors, tensor_bytes)


# Every source through the page cache (the default) and with --direct-io=on (read()
# straight into the reader's buffer; mmap through the page cache).
MODES = {"cached": (), "direct": ("--direct-io=on",)}


@pytest.fixture(scope="module", params=[(s, m) for s in sorted(SOURCES) for m in MODES],
                ids=[f"{s}-{m}" for s in sorted(SOURCES) for m in MODES])
def mounted(request):
    """(id, source, mountpoint, whole model.safetensors bytes, source tensors), one mount per
    source and mode."""
    name, mode = request.param
    src = SOURCES[name]
    expect = source_tensors(src)
    with mount(src, *MODES[mode]) as mnt:
        with open(os.path.join(mnt, "model.safetensors"), "rb") as f:
            whole = f.read()
        yield name, src, mnt, whole, expect


def test_size_matches_stat(mounted):
    _id, _src, mnt, whole, _expect = mounted
    st = os.stat(os.path.join(mnt, "model.safetensors"))
    assert st.st_size == len(whole)


def test_safe_open_pt(mounted):
    from safetensors import safe_open
    _id, _src, mnt, _whole, expect = mounted
    with safe_open(os.path.join(mnt, "model.safetensors"), framework="pt") as f:
        assert set(f.keys()) == set(expect)
        meta = f.metadata()
        assert meta is not None and meta.get("format") == "pt"
        for name, (dtype, shape, raw, _rel) in expect.items():
            t = f.get_tensor(name)
            assert list(t.shape) == shape, name
            assert tensor_bytes(t) == raw, name
            # the dtype the loader built matches the source dtype string
            assert f.get_slice(name).get_dtype() == dtype, name


def test_safe_open_numpy(mounted):
    from safetensors import safe_open
    _id, _src, mnt, _whole, expect = mounted
    with safe_open(os.path.join(mnt, "model.safetensors"), framework="numpy") as f:
        assert set(f.keys()) == set(expect)
        for name, (dtype, shape, raw, _rel) in expect.items():
            if dtype in NUMPY_UNSUPPORTED:
                continue
            a = f.get_tensor(name)
            assert list(a.shape) == shape, name
            assert a.dtype.itemsize == DTYPE_SIZE[dtype], name
            assert a.tobytes() == raw, name


def test_torch_load_whole_file(mounted):
    """safetensors' own validation over the whole file (tiling, sizes, header)."""
    from safetensors.torch import load
    _id, _src, mnt, _whole, expect = mounted
    with open(os.path.join(mnt, "model.safetensors"), "rb") as f:
        tensors = load(f.read())
    assert set(tensors) == set(expect)
    for name, (_dtype, shape, raw, _rel) in expect.items():
        assert list(tensors[name].shape) == shape
        assert tensor_bytes(tensors[name]) == raw, name


def test_header_self_consistent(mounted):
    """Parse the header ourselves: format, order, alignment, tiling, bytes at data_offsets."""
    _id, _src, _mnt, whole, expect = mounted
    n, hdr = parse_header(whole)
    assert n <= 100_000_000
    assert whole[8:9] == b"{"
    assert (8 + n) % 8 == 0, "header not padded so that the data buffer starts 8-aligned"
    meta = hdr.pop("__metadata__", None)
    assert isinstance(meta, dict) and meta.get("format") == "pt"
    assert all(isinstance(v, str) for v in meta.values())
    assert set(hdr) == set(expect)
    base = 8 + n
    buf_len = len(whole) - base
    spans = []
    for name, info in hdr.items():
        dtype, shape, raw, _rel = expect[name]
        assert info["dtype"] == dtype, name
        assert info["shape"] == shape, name
        b, e = info["data_offsets"]
        assert e - b == len(raw), name
        assert b % DTYPE_SIZE[dtype] == 0, f"{name} at {b} not aligned to {DTYPE_SIZE[dtype]}"
        assert whole[base + b:base + e] == raw, name
        spans.append((b, e, name))
    spans.sort()
    pos = 0
    for b, e, name in spans:
        assert b == pos, f"hole or overlap before {name}: {b} != {pos}"
        pos = e
    assert pos == buf_len, "trailing bytes after the last tensor"


def test_tensor_order(mounted):
    """Ordered as the safetensors writer orders them: dtype alignment, largest first, then
    name (checked as: alignment never increases; names sorted within each dtype)."""
    _id, _src, _mnt, whole, _expect = mounted
    _n, hdr = parse_header(whole)
    hdr.pop("__metadata__", None)
    order = sorted(hdr, key=lambda k: tuple(hdr[k]["data_offsets"]))
    # zero-size tensors share an offset with their neighbour: order them as the writer would
    aligns = [DTYPE_SIZE[hdr[k]["dtype"]] for k in order if hdr[k]["data_offsets"][0] != hdr[k]["data_offsets"][1]]
    assert aligns == sorted(aligns, reverse=True), f"not largest alignment first: {order}"
    by_dtype = {}
    for k in order:
        by_dtype.setdefault(hdr[k]["dtype"], []).append(k)
    for dtype, names in by_dtype.items():
        nonempty = [k for k in names if hdr[k]["data_offsets"][0] != hdr[k]["data_offsets"][1]]
        assert nonempty == sorted(nonempty), f"{dtype} tensors not ordered by name: {nonempty}"


def test_pread_random(mounted):
    _id, _src, mnt, whole, _expect = mounted
    size = len(whole)
    n, hdr = parse_header(whole)
    hdr.pop("__metadata__", None)
    base = 8 + n
    rng = random.Random(1234)
    cases = [(0, 8), (0, 1), (7, 2), (base - 3, 6), (base - 1, 1), (base, 1), (size - 1, 1),
             (size - 1, 100), (size, 10), (size + 4096, 10), (0, size), (0, size + 100)]
    for info in hdr.values():
        b, e = info["data_offsets"]
        cases += [(base + b - 1, 2) if b else (base, 2), (base + e - 1, 2), (base + b, e - b)]
    while len(cases) < 200 + 12:
        off = rng.randrange(0, size)
        length = rng.choice([1, 2, 3, 7, 8, 64, 4096, 65536, rng.randrange(1, size + 1)])
        cases.append((off, length))
    fd = os.open(os.path.join(mnt, "model.safetensors"), os.O_RDONLY)
    try:
        for off, length in cases:
            if off < 0:
                continue
            got = os.pread(fd, length, off)
            assert got == whole[off:off + length], f"pread({length}, {off}) differs"
    finally:
        os.close(fd)


def test_sequential_small_reads(mounted):
    _id, _src, mnt, whole, _expect = mounted
    chunks = []
    with open(os.path.join(mnt, "model.safetensors"), "rb", buffering=0) as f:
        while True:
            b = f.read(4093)
            if not b:
                break
            chunks.append(b)
    assert b"".join(chunks) == whole


def test_mmap(mounted):
    _id, _src, mnt, whole, _expect = mounted
    with open(os.path.join(mnt, "model.safetensors"), "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        try:
            assert len(m) == len(whole)
            assert m[:] == whole
            assert m[len(whole) - 1:] == whole[-1:]
        finally:
            m.close()


def test_deterministic_across_mounts(mounted):
    _id, src, _mnt, whole, _expect = mounted
    with mount(src) as mnt2:
        with open(os.path.join(mnt2, "model.safetensors"), "rb") as f:
            again = f.read()
    assert again == whole


@pytest.mark.logits
def test_transformers_loads_sample():
    """The real client: from_pretrained on the mount gives the same model as on the source."""
    import torch
    from transformers import AutoModelForCausalLM
    src = SOURCES["sample"]
    ref = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    ids = torch.arange(1, 17).reshape(1, 16)
    with torch.no_grad():
        want = ref(ids).logits
    with mount(src) as mnt:
        model = AutoModelForCausalLM.from_pretrained(mnt, dtype=torch.float32).eval()
        with torch.no_grad():
            got = model(ids).logits
        sd = {k: v.clone() for k, v in model.state_dict().items()}
        # the model's tensors map the mounted file: release them before unmounting
        del model
        gc.collect()
    assert torch.equal(got, want)
    sd_ref = ref.state_dict()
    assert sd.keys() == sd_ref.keys()
    for k in sd:
        assert torch.equal(sd[k], sd_ref[k]), k
