"""DCP items saved with torch's zstd extension ("stream.zstd/1"), served through the
bounded cache of decoded items (docs/zstd.md): every tensor equals torch's own
consolidation (_ref/zstd.safetensors) with the default cache, with a cache smaller than
any item (every read streams) and with one that holds only a few items (eviction), also
under concurrent readers; a corrupt item is refused at mount or answers EIO, never
wrong bytes; an unknown transform is refused."""
import concurrent.futures
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
