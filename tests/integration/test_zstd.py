"""DCP items saved with torch's zstd extension ("stream.zstd/1"), served through the
bounded cache of decoded items (docs/zstd.md): every tensor equals torch's own
consolidation (_ref/zstd.safetensors) with the default cache, with a cache smaller than
any item (every read streams) and with one that holds only a few items (eviction), also
under concurrent readers; a corrupt item is refused at mount or answers EIO, never
wrong bytes; an unknown transform is refused.  Checkpoints written by torch with pyzstd
and with zstandard equal torch's own loading of them, optimizer.json included; items of
several frames are served as torch reads them; structural damage to a large item's
frames is refused at mount."""
import concurrent.futures
import io
import errno
import gc
import os
import random
import shutil
import struct

import pytest

import torch  # noqa: E402

from conftest import mount, parse_header, refuse  # noqa: E402
from torchref import compare, load_ref, source  # noqa: E402

FIXTURE = source("zstd")
DISTCP = "__0_0.distcp"
CACHE_SIZES = [None, "1K", "16K"]


def storage_items():
    """[(fqn, offset, length)] of the fixture's items, from torch's own metadata reader."""
    from torch.distributed.checkpoint import FileSystemReader
    md = FileSystemReader(FIXTURE).read_metadata()
    return sorted((k.fqn, v.offset, v.length) for k, v in md.storage_data.items())


def opts(cache):
    return () if cache is None else (f"--cache-size={cache}",)


def read_model(mnt):
    from safetensors import safe_open
    path = os.path.join(mnt, "model.safetensors")
    with safe_open(path, framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata() or {}


@pytest.fixture(scope="module")
def whole_default():
    """model.safetensors' bytes with the default cache: what every other mount must give."""
    with mount(FIXTURE) as mnt:
        with open(os.path.join(mnt, "model.safetensors"), "rb") as f:
            return f.read()


@pytest.mark.parametrize("cache", CACHE_SIZES, ids=lambda c: c or "default")
def test_every_tensor_equals_reference(cache):
    ref, ties = load_ref("zstd")
    with mount(FIXTURE, *opts(cache)) as mnt:
        got, meta = read_model(mnt)
        compare(got, ref, ties, meta, what=f"model.safetensors (cache {cache})")
        del got  # safe_open maps the file: let go before unmounting
        gc.collect()


@pytest.mark.parametrize("cache", CACHE_SIZES[1:])
def test_same_bytes_whatever_the_cache(cache, whole_default):
    with mount(FIXTURE, *opts(cache)) as mnt:
        path = os.path.join(mnt, "model.safetensors")
        with open(path, "rb") as f:
            assert f.read() == whole_default
        # odd, unaligned, backwards ranges: streamed reads restart or resume
        fd = os.open(path, os.O_RDONLY)
        try:
            rnd = random.Random(5)
            for _ in range(200):
                off = rnd.randrange(len(whole_default))
                n = rnd.randrange(1, 9000)
                assert os.pread(fd, n, off) == whole_default[off:off + n]
        finally:
            os.close(fd)


@pytest.mark.parametrize("cache", ["1K", "16K"])
def test_concurrent_readers(cache, whole_default):
    """Many threads at once through the multithreaded FUSE loop: cache, eviction and
    parked streams stay consistent."""
    with mount(FIXTURE, *opts(cache)) as mnt:
        path = os.path.join(mnt, "model.safetensors")

        def worker(seed):
            rnd = random.Random(seed)
            fd = os.open(path, os.O_RDONLY)
            try:
                for _ in range(60):
                    off = rnd.randrange(len(whole_default))
                    n = rnd.randrange(1, 20000)
                    if os.pread(fd, n, off) != whole_default[off:off + n]:
                        return f"seed {seed}: bytes differ at [{off}, +{n})"
            finally:
                os.close(fd)
            return None

        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            errors = [e for e in ex.map(worker, range(16)) if e]
        assert not errors, errors


def test_pytorch_model_bin_loads(whole_default):
    ref, ties = load_ref("zstd")
    with mount(FIXTURE, "--cache-size=1K") as mnt:
        sd = torch.load(os.path.join(mnt, "pytorch_model.bin"), weights_only=True, mmap=True)
        compare(sd, ref, ties, what="pytorch_model.bin")
        del sd  # mmap=True: let go before unmounting
        gc.collect()


def flip_in_item(tmp_path, fqn_suffix, where):
    """A copy of the fixture with 8 bytes flipped at `where` (0..1) of an item."""
    dst = tmp_path / "zstd"
    shutil.copytree(FIXTURE, dst)
    fqn, off, length = next(i for i in storage_items() if i[0].endswith(fqn_suffix))
    pos = off + int(length * where)
    with open(dst / DISTCP, "r+b") as f:
        f.seek(pos)
        b = bytearray(f.read(8))
        f.seek(pos)
        f.write(bytes(x ^ 0x5A for x in b))
    return str(dst), fqn


def tensor_range(mnt, name):
    """(offset, length) of `name`'s bytes in model.safetensors."""
    n, hdr = parse_header(os.path.join(mnt, "model.safetensors"))
    b, e = hdr[name]["data_offsets"]
    return 8 + n + b, e - b


@pytest.mark.parametrize("where", [0.02, 0.5, 0.9])
@pytest.mark.parametrize("cache", [None, "1K"], ids=lambda c: c or "default")
def test_corrupt_item_is_refused_or_eio(tmp_path, where, cache):
    """Bytes flipped inside a compressed item: refused at mount (items small enough are
    decoded and CRC-checked there), or reads of that tensor say EIO -- never other bytes."""
    src, fqn = flip_in_item(tmp_path, "noise.weight", where)
    ref, _ties = load_ref("zstd")
    name = fqn.split(".", 1)[1]  # the container "model." is unwrapped
    try:
        ctx = mount(src, *opts(cache))
        mnt = ctx.__enter__()
    except AssertionError as e:
        assert "exited with status 2" in str(e) and DISTCP in str(e), e
        path, reason = refuse(src, *opts(cache))
        assert path == DISTCP and fqn in reason, (path, reason)
        return
    try:
        off, n = tensor_range(mnt, name)
        fd = os.open(os.path.join(mnt, "model.safetensors"), os.O_RDONLY)
        try:
            with pytest.raises(OSError) as ei:
                os.pread(fd, n, off)
            assert ei.value.errno == errno.EIO
        finally:
            os.close(fd)
    finally:
        ctx.__exit__(None, None, None)


def test_small_corrupt_item_is_refused_at_mount(tmp_path):
    """The fixture's items decode to well under 1 MiB, so mount decodes them whole and
    checks their storage's CRC-32: the refusal names the file and the tensor."""
    src, fqn = flip_in_item(tmp_path, "noise.weight", 0.5)
    path, reason = refuse(src)
    assert path == DISTCP and fqn in reason and "corrupt" in reason, reason


def test_corrupt_head_is_refused(tmp_path):
    src, fqn = flip_in_item(tmp_path, "embed.weight", 0.01)
    path, reason = refuse(src)
    assert path == DISTCP and fqn in reason, reason


def test_unknown_transform_is_refused(tmp_path):
    dst = tmp_path / "zstd"
    shutil.copytree(FIXTURE, dst)
    meta = (dst / ".metadata").read_bytes()
    assert b"stream.zstd/1" in meta
    # same length, so the pickle stays well formed
    (dst / ".metadata").write_bytes(meta.replace(b"stream.zstd/1", b"stream.lz4x/1"))
    path, reason = refuse(str(dst))
    assert path == ".metadata" and "unknown storage transform" in reason, reason


def test_inspect_lists_zstd_tensors():
    import subprocess
    from conftest import require_binary
    out = subprocess.run([require_binary(), "inspect", FIXTURE], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "noise.weight" in out.stdout


# ------------------------------------------------------- items too large to verify at mount

@pytest.fixture(scope="module")
def large_ckpt(tmp_path_factory):
    """A zstd DCP checkpoint written by torch here, whose items decode to more than the
    1 MiB that mount verifies whole: mount reads only their heads, reads check them.
    Returns (path, {name: tensor})."""
    import sys
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint._extension import ZStandard
    sys.path.insert(0, os.path.join(os.path.dirname(FIXTURE), os.pardir))
    from make_torch_fixtures import install_zstd
    install_zstd()
    path = str(tmp_path_factory.mktemp("zstd_large") / "ckpt")
    g = torch.Generator().manual_seed(11)
    sd = {
        "noise": torch.randn(600, 700, generator=g),              # incompressible, 1.6 MiB
        "ramp": (torch.arange(512 * 640, dtype=torch.float32) % 251).reshape(512, 640),
        "t": torch.randn(300, 1200, generator=g).t(),             # a transposed storage
        "small": torch.arange(10, dtype=torch.int64),
    }
    dcp.save({"model": sd}, storage_writer=dcp.FileSystemWriter(path, _extensions=[ZStandard()]),
             no_dist=True)
    return path, sd


def _check_large(mnt, want):
    from safetensors import safe_open
    with safe_open(os.path.join(mnt, "model.safetensors"), framework="pt") as f:
        assert sorted(f.keys()) == sorted(want)
        for k, t in want.items():
            assert torch.equal(f.get_tensor(k), t), k
    gc.collect()


@pytest.mark.parametrize("cache", [None, "1K", "2M"], ids=lambda c: c or "default")
def test_large_items(large_ckpt, cache):
    path, want = large_ckpt
    with mount(path, *opts(cache)) as mnt:
        _check_large(mnt, want)


@pytest.mark.parametrize("cache", [None, "1K"], ids=lambda c: c or "default")
def test_large_corrupt_item_reads_eio(large_ckpt, tmp_path, cache):
    """Not verified at mount (too long), so the mount succeeds; then reads of that
    tensor answer EIO (zstd's own checks, or the storage record's CRC-32), never other
    bytes, and the other tensors read fine.  EIO covers a whole FUSE request, so the
    reads here avoid readahead (FADV_RANDOM) and pages shared with a neighbour."""
    path, want = large_ckpt
    from torch.distributed.checkpoint import FileSystemReader
    md = FileSystemReader(path).read_metadata()
    info = next(v for k, v in md.storage_data.items() if k.fqn == "model.noise")
    dst = tmp_path / "ckpt"
    shutil.copytree(path, dst)
    with open(dst / info.relative_path, "r+b") as f:
        pos = info.offset + info.length // 2
        f.seek(pos)
        b = f.read(4)
        f.seek(pos)
        f.write(bytes(x ^ 0x01 for x in b))
    with mount(path) as clean:  # the same layout, read from the intact source
        ranges = {k: tensor_range(clean, k) for k in want}
    page = 4096
    with mount(str(dst), *opts(cache)) as mnt:
        fd = os.open(os.path.join(mnt, "model.safetensors"), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            off, n = ranges["noise"]
            first = (off + page - 1) // page * page
            for o in (first, first + n // 2 // page * page, (off + n) // page * page - 2 * page):
                with pytest.raises(OSError) as ei:
                    os.pread(fd, page, o)
                assert ei.value.errno == errno.EIO
            for k in ("ramp", "t"):
                o, m = ranges[k]
                lo = (o + page - 1) // page * page + page
                hi = (o + m) // page * page - page
                data = want[k].contiguous().numpy().tobytes()
                assert os.pread(fd, hi - lo, lo) == data[lo - o:hi - o], k
        finally:
            os.close(fd)


# ------------------------------------------- what torch writes with pyzstd and with zstandard

# tests/fixtures/make_zstd_fixtures.py: FSDP2 on CPU ranks, model + AdamW state, written by
# torch's ZStandard extension with each library (pyzstd: a data frame and an empty frame
# per tensor item).  References are torch's own DCP loading, here, in this run.
WRITERS = ["zstd_pyzstd", "zstd_zstandard"]
WRITER_DIR = os.path.join(os.path.dirname(FIXTURE))


def writer_source(name):
    return os.path.join(WRITER_DIR, name)


def _fixtures_module(name):
    import importlib
    import sys
    here = os.path.join(WRITER_DIR, os.pardir)
    if here not in sys.path:
        sys.path.insert(0, here)
    return importlib.import_module(name)


def torch_load(path):
    """The whole checkpoint as torch's own DCP reader loads it (dcp_to_torch_save minus
    the torch.save).  The venv has neither zstd library: the generator's stand-in over
    libzstd is what torch's extension reads with (it reads every frame of an item)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
    _fixtures_module("make_torch_fixtures").install_zstd()
    sd = {}
    _load_state_dict(sd, storage_reader=FileSystemReader(path),
                     planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    return sd


_REF = {}


def torch_ref(name):
    if name not in _REF:
        _REF[name] = torch_load(writer_source(name))
    return _REF[name]


def same_bytes(got, want, what):
    assert got.dtype == want.dtype and tuple(got.shape) == tuple(want.shape), \
        (what, got.dtype, want.dtype, tuple(got.shape), tuple(want.shape))
    raw = lambda t: t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()  # noqa: E731
    assert raw(got) == raw(want), what


def check_model(mnt, want):
    from safetensors import safe_open
    with safe_open(os.path.join(mnt, "model.safetensors"), framework="pt") as f:
        assert sorted(f.keys()) == sorted(want)
        for k, t in want.items():
            same_bytes(f.get_tensor(k), t, k)
    gc.collect()


def read_items(path):
    """{fqn: (relative_path, offset, length, item bytes)} from torch's metadata reader."""
    from torch.distributed.checkpoint import FileSystemReader
    md = FileSystemReader(path).read_metadata()
    out = {}
    for k, v in md.storage_data.items():
        with open(os.path.join(path, v.relative_path), "rb") as f:
            f.seek(v.offset)
            out.setdefault(k.fqn, []).append((v.relative_path, v.offset, v.length,
                                              f.read(v.length)))
    return out


def test_writer_fixtures_are_what_the_writers_write():
    """The fixtures hold what they claim: pyzstd's tensor items are a data frame and an
    empty 9-byte frame, zstandard's one frame; some items decode to more than 1 MiB."""
    frames = _fixtures_module("make_zstd_fixtures").frames
    for name in WRITERS:
        items = read_items(writer_source(name))
        for fqn, parts in items.items():
            for _rel, _off, _n, item in parts:
                fr = frames(item)
                if name == "zstd_pyzstd" and not fqn.startswith("optim.param_groups"):
                    assert len(fr) == 2 and item[-9:] == bytes.fromhex("28b52ffd2000010000")
                else:
                    assert fr == [("zstd", len(item))], (name, fqn, fr)
        big = [len(zdecompress(p[3])) for p in items["model.table"]]
        assert min(big) > 1 << 20, big


@pytest.mark.parametrize("cache", [None, "1K"], ids=lambda c: c or "default")
@pytest.mark.parametrize("name", WRITERS)
def test_writer_model_equals_torch(name, cache):
    ref = torch_ref(name)
    with mount(writer_source(name), *opts(cache)) as mnt:
        check_model(mnt, ref["model"])
        sd = torch.load(os.path.join(mnt, "pytorch_model.bin"), weights_only=True)
        assert sorted(sd) == sorted(ref["model"])
        for k, t in ref["model"].items():
            same_bytes(sd[k], t, f"pytorch_model.bin {k}")


@pytest.mark.parametrize("name", WRITERS)
def test_writer_optimizer_equals_torch(name):
    """optimizer.safetensors: every Adam moment and step; optimizer.json: the param
    group's lr, betas, eps, weight_decay, params ... as torch loads them (zstd byte
    items: they were all null)."""
    import json
    from safetensors.torch import load
    ref = torch_ref(name)["optim"]
    with mount(writer_source(name), "--cache-size=1K") as mnt:
        with open(os.path.join(mnt, "optimizer.safetensors"), "rb") as f:
            got = load(f.read())  # a copy: nothing maps the mount when it goes
        with open(os.path.join(mnt, "optimizer.json")) as f:
            groups = json.load(f)["param_groups"]
    want = {f"state.{p}.{slot}": v for p, slots in ref["state"].items()
            for slot, v in slots.items()}
    assert sorted(got) == sorted(want)
    for k, t in want.items():
        same_bytes(got[k], t, k)
    assert len(groups) == len(ref["param_groups"]) == 1
    g, r = groups[0], ref["param_groups"][0]
    for key in ("lr", "eps", "weight_decay", "amsgrad", "maximize", "foreach",
                "capturable", "differentiable", "fused", "decoupled_weight_decay"):
        assert g[key] == r[key], (key, g[key], r[key])
    assert g["betas"] == list(r["betas"]) and g["params"] == list(r["params"])
    assert (g["lr"], g["betas"], g["eps"], g["weight_decay"]) == \
        (0.01, [0.85, 0.995], 1e-7, 0.01)  # what the generator asked for


# ------------------------------------------------- hostile frames, made from the fixtures

def _lib():
    import ctypes
    mtf = _fixtures_module("make_torch_fixtures")
    lib = mtf._libzstd()
    lib.ZSTD_compress.restype = ctypes.c_size_t
    lib.ZSTD_compress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                  ctypes.c_size_t, ctypes.c_int]
    lib.ZSTD_compressBound.restype = ctypes.c_size_t
    lib.ZSTD_compressBound.argtypes = [ctypes.c_size_t]
    return lib


def zcompress(data, sized=False):
    """One zstd frame of `data`: streamed as torch's writers do (no content size), or
    sized (ZSTD_compress declares the content size)."""
    import ctypes
    if not sized:
        out = io.BytesIO()
        w = _fixtures_module("make_torch_fixtures")._ShimWriter(_lib(), out)
        w.write(data)
        w._run(b"", 2)  # ZSTD_e_end
        return out.getvalue()
    lib = _lib()
    cap = lib.ZSTD_compressBound(len(data))
    dst = ctypes.create_string_buffer(cap)
    n = lib.ZSTD_compress(dst, cap, data, len(data), 3)
    assert not lib.ZSTD_isError(n)
    return dst.raw[:n]


def zdecompress(item):
    shim = _fixtures_module("make_torch_fixtures")._ZstdShim
    return shim.ZstdDecompressor().stream_reader(io.BytesIO(item)).read()


def block_headers(item):
    """[(offset, header)] of every block header of a one-frame item."""
    fhd = item[4]
    single = fhd >> 5 & 1
    q = 5 + (0 if single else 1) + [0, 1, 2, 4][fhd & 3] + [single, 2, 4, 8][fhd >> 6]
    out = []
    while True:
        bh = int.from_bytes(item[q:q + 3], "little")
        out.append((q, bh))
        q += 3 + (1 if (bh >> 1 & 3) == 1 else bh >> 3)
        if bh & 1:
            return out


HOSTILE_SRC = "zstd_zstandard"
HOSTILE_FQN = "model.table"


def with_item(tmp_path, make):
    """A copy of the zstandard fixture whose rank-0 `model.table` item is replaced by
    make(item, decoded): appended to its file, .metadata pointed at it (pickled again,
    as torch's FileSystemWriter writes it).  Returns the copy's path."""
    import dataclasses
    import pickle
    src = writer_source(HOSTILE_SRC)
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    with open(dst / ".metadata", "rb") as f:
        md = pickle.load(f)
    key = next(k for k, v in md.storage_data.items()
               if k.fqn == HOSTILE_FQN and v.relative_path == DISTCP)
    info = md.storage_data[key]
    with open(dst / DISTCP, "rb") as f:
        f.seek(info.offset)
        item = f.read(info.length)
    new = make(item, zdecompress(item))
    at = os.path.getsize(dst / DISTCP)
    with open(dst / DISTCP, "ab") as f:
        f.write(new)
    md.storage_data[key] = dataclasses.replace(info, offset=at, length=len(new))
    with open(dst / ".metadata", "wb") as f:
        pickle.dump(md, f)
    return str(dst)


def split(decoded, where=0.6):
    k = int(len(decoded) * where)
    return decoded[:k], decoded[k:]


SERVED = {
    # two frames, as `zstd a b` or a writer flushing mid-item would leave them
    "two_frames": lambda item, d: b"".join(zcompress(p) for p in split(d)),
    # ... with skippable frames around them and pyzstd's empty frame at the end
    "skippable_frames": lambda item, d: (
        struct.pack("<II", 0x184D2A5E, 5) + b"seek!" + zcompress(split(d)[0]) +
        struct.pack("<II", 0x184D2A50, 0) + zcompress(split(d)[1]) +
        bytes.fromhex("28b52ffd2000010000")),
    # two frames that declare their content sizes
    "two_sized_frames": lambda item, d: b"".join(zcompress(p, sized=True) for p in split(d)),
}


@pytest.mark.parametrize("cache", [None, "1K"], ids=lambda c: c or "default")
@pytest.mark.parametrize("case", sorted(SERVED))
def test_multi_frame_large_item_is_served_as_torch_reads_it(tmp_path, case, cache):
    """A large item (over 1 MiB decoded, so not decoded whole at mount) made of several
    frames mounts and every byte equals torch's own loading of the same files (it used
    to mount and then answer EIO to every read)."""
    src = with_item(tmp_path, SERVED[case])
    ref = torch_load(src)
    with mount(src, *opts(cache)) as mnt:
        check_model(mnt, ref["model"])


def _fcs_field(frame):
    fhd = frame[4]
    single = fhd >> 5 & 1
    width = [single, 2, 4, 8][fhd >> 6]
    at = 5 + (0 if single else 1) + [0, 1, 2, 4][fhd & 3]
    return at, width


def _declare(frame, size):
    at, width = _fcs_field(frame)
    assert width in (4, 8), width
    return frame[:at] + size.to_bytes(width, "little") + frame[at + width:]


def _corrupt_header(item, set_bits):
    """The block header nearest 85 % of the item with its type bits set to `set_bits`."""
    heads = block_headers(item)
    q, bh = min(heads, key=lambda h: abs(h[0] - 0.85 * len(item)))
    assert 0.5 * len(item) < q < len(item) - 3, (q, len(item))
    bh = bh & ~0b110 | set_bits << 1
    return item[:q] + bh.to_bytes(3, "little") + item[q + 3:]


def _grow_block(item):
    """The block header nearest 85 % of the item claiming 1 byte more content."""
    heads = block_headers(item)
    q, bh = min(heads, key=lambda h: abs(h[0] - 0.85 * len(item)))
    return item[:q] + (bh + 8).to_bytes(3, "little") + item[q + 3:]


REFUSED = {
    # two frames whose declared sizes disagree: the first declares 128 KiB + 1 more
    # than its blocks can decode to
    "frame_size_disagrees": (lambda item, d: (
        _declare(zcompress(split(d)[0], sized=True), len(split(d)[0]) + (128 << 10) + 1) +
        zcompress(split(d)[1])), "declared content size"),
    # declared sizes that add up to less than the zip records need (frame 2 missing)
    "declared_sizes_short": (lambda item, d: zcompress(split(d)[0], sized=True),
                             "fewer bytes than its zip records need"),
    # the same without declared sizes: blocks that cannot decode to enough
    "frames_short": (lambda item, d: zcompress(split(d, 0.3)[0]),
                     "fewer bytes than its zip records need"),
    "block_header_85_reserved_type": (lambda item, d: _corrupt_header(item, 3),
                                      "reserved type"),
    "block_header_85_size": (lambda item, d: _grow_block(item), "zstd data"),
    "truncated_85": (lambda item, d: item[:int(len(item) * 0.85)], "truncated"),
    "truncated_last_byte": (lambda item, d: item[:-1], "truncated"),
    "trailing_garbage": (lambda item, d: item + b"garbage!", "not a frame"),
    "trailing_bytes": (lambda item, d: item + b"\0\0", "not a frame"),
    "reserved_bit": (lambda item, d: item[:4] + bytes([item[4] | 0x08]) + item[5:],
                     "reserved bit"),
    "dictionary": (lambda item, d: item[:4] + bytes([item[4] | 0x01]) + item[5:6] +
                   b"\x07" + item[6:], "dictionary"),
    "window_too_large": (lambda item, d: item[:5] + bytes([(28 - 10) << 3]) + item[6:]
                         if not item[4] & 0x20 else pytest.skip("single segment"),
                         "window"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_damaged_large_item_is_refused_at_mount(tmp_path, case):
    """Structural damage anywhere in a large item -- even past the first MiB, which
    mount does not decode -- is refused at mount with one line naming the file and the
    tensor, never found at read time (mmap readers would get SIGBUS)."""
    make, word = REFUSED[case]
    src = with_item(tmp_path, make)
    path, reason = refuse(src)
    assert path == DISTCP and HOSTILE_FQN in reason and word in reason, (path, reason)
