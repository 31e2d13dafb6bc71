"""--direct-io=on (issue 5): read() of a view bypasses the FUSE page cache, shared mmap
still works (the daemon negotiates FUSE_DIRECT_IO_ALLOW_MMAP, which Debian 12's libfuse
does not know: fs/init_ext.c), and every byte is the same as through the page cache.
test_safetensors_view.py runs its whole module in both modes; this adds the page-cache
behaviour itself, the torch fixtures' other views, and the option's spelling."""
import ctypes
import errno
import hashlib
import os

import pytest

from conftest import FIXTURES, SOURCES, mount, run_cli

TORCH_FIX = os.path.join(FIXTURES, "torch")
NR_CACHESTAT = 451  # x86-64 and the generic table (Linux 6.5)


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in
                ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")]


def cached_pages(fd):
    """Pages of the open file @fd in the page cache, by cachestat(2) (no mmap: mapping a
    direct-io file invalidates its cache)."""
    libc = ctypes.CDLL(None, use_errno=True)
    rng, st = _Range(0, 0), _Stat()
    if libc.syscall(NR_CACHESTAT, fd, ctypes.byref(rng), ctypes.byref(st), 0) != 0:
        e = ctypes.get_errno()
        if e == errno.ENOSYS:  # a kernel before 6.5: a machine capability
            pytest.skip("cachestat(2) needs Linux 6.5+")
        pytest.fail(f"cachestat(2): {os.strerror(e)}")
    return st.nr_cache


def read_through(mnt, name):
    fd = os.open(os.path.join(mnt, name), os.O_RDONLY)
    try:
        data = b""
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            data += b
        return data, cached_pages(fd)
    finally:
        os.close(fd)


def files_of(mnt):
    out = []
    for root, _dirs, files in os.walk(mnt):
        out += [os.path.relpath(os.path.join(root, f), mnt) for f in files]
    return sorted(out)


def test_read_skips_the_page_cache():
    src = SOURCES["sample"]
    with mount(src) as mnt:
        cached, pages_cached = read_through(mnt, "model.safetensors")
    with mount(src, "--direct-io=on") as mnt:
        direct, pages_direct = read_through(mnt, "model.safetensors")
    assert direct == cached
    assert pages_cached >= len(cached) // 4096 - 1
    assert pages_direct == 0


@pytest.mark.parametrize("fixture", ["fsdp2_2rank", "dtensor_2d", "llama_fsdp2", "zstd"])
def test_every_file_the_same(fixture):
    """Every file of the tree, read() and mmap, the same bytes in both modes."""
    import mmap
    src = os.path.join(TORCH_FIX, fixture)
    with mount(src) as mnt:
        want = {}
        for rel in files_of(mnt):
            with open(os.path.join(mnt, rel), "rb") as f:
                want[rel] = hashlib.sha256(f.read()).hexdigest()
    with mount(src, "--direct-io=on") as mnt:
        assert files_of(mnt) == sorted(want)
        for rel, digest in want.items():
            with open(os.path.join(mnt, rel), "rb") as f:
                assert hashlib.sha256(f.read()).hexdigest() == digest, rel
                if os.fstat(f.fileno()).st_size:
                    with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
                        assert hashlib.sha256(m).hexdigest() == digest, rel


def test_torch_load_mmap_and_from_pretrained():
    import gc
    import torch
    from transformers import AutoModelForCausalLM
    src = SOURCES["sample"]
    ref = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).state_dict()
    with mount(src, "--direct-io=on") as mnt:
        sd = torch.load(os.path.join(mnt, "pytorch_model.bin"), mmap=True, weights_only=True)
        model = AutoModelForCausalLM.from_pretrained(mnt, dtype=torch.float32)
        got = {k: v.clone() for k, v in model.state_dict().items()}
        assert all(torch.equal(sd[k], got[k]) for k in sd if k in got)
        del model, sd
        gc.collect()
    assert set(got) == set(ref)
    assert all(torch.equal(got[k], ref[k]) for k in ref)


def test_fstab_spelling_and_bad_value():
    src = SOURCES["sample"]
    with mount(src, "-o", "direct_io=on") as mnt:
        _data, pages = read_through(mnt, "model.safetensors")
        assert pages == 0
    r = run_cli("--direct-io=yes", src, "/nonexistent")
    assert r.returncode == 1
    assert "--direct-io" in r.stderr
