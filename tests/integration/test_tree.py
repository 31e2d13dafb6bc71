"""The tree under MOUNTPOINT: passthrough files, hidden checkpoint files, read-only."""
import errno
import os

import pytest

from conftest import INDEX_NAME, SOURCES, checkpoint_files, mount, passthrough_files

# Views the contract allows besides model.safetensors (not every source/version has them).
OPTIONAL_VIEWS = {"pytorch_model.bin", "tensors", "optimizer.safetensors", "optimizer.json"}


def test_root_listing(source):
    _id, src = source
    with mount(src) as mnt:
        names = set(os.listdir(mnt))
    assert "model.safetensors" in names
    for rel in passthrough_files(src):
        assert rel in names, f"passthrough file {rel} missing from the mount"
    for rel in checkpoint_files(src):
        if rel != "model.safetensors":
            assert rel not in names, f"shard {rel} shown in the mount"
    assert INDEX_NAME not in names, "the index is shown in the mount"
    extra = names - set(passthrough_files(src)) - {"model.safetensors"}
    assert extra <= OPTIONAL_VIEWS, f"unexpected entries: {sorted(extra)}"


def test_passthrough_bytes(source):
    _id, src = source
    files = passthrough_files(src)
    with mount(src) as mnt:
        for rel in files:
            with open(os.path.join(src, rel), "rb") as f:
                want = f.read()
            p = os.path.join(mnt, rel)
            assert os.stat(p).st_size == len(want), rel
            with open(p, "rb") as f:
                assert f.read() == want, rel
            if want:
                fd = os.open(p, os.O_RDONLY)
                try:
                    assert os.pread(fd, 5, len(want) // 2) == want[len(want) // 2:len(want) // 2 + 5]
                finally:
                    os.close(fd)


def test_hidden_names_do_not_resolve():
    src = SOURCES["sample"]
    with mount(src) as mnt:
        for rel in checkpoint_files(src) + [INDEX_NAME]:
            assert not os.path.exists(os.path.join(mnt, rel)), rel
        assert not os.path.exists(os.path.join(mnt, "no-such-file"))


def test_stat_of_model_file():
    import stat
    src = SOURCES["sample"]
    with mount(src) as mnt:
        st = os.stat(os.path.join(mnt, "model.safetensors"))
        assert stat.S_ISREG(st.st_mode)
        assert stat.S_ISDIR(os.stat(mnt).st_mode)


def _expect_erofs(fn, *args):
    with pytest.raises(OSError) as ei:
        fn(*args)
    assert ei.value.errno in (errno.EROFS,), f"{fn.__name__}{args}: {ei.value!r}"


def test_read_only():
    src = SOURCES["sample"]
    with mount(src) as mnt:
        model = os.path.join(mnt, "model.safetensors")
        cfg = os.path.join(mnt, "config.json")
        _expect_erofs(os.open, os.path.join(mnt, "new-file"), os.O_WRONLY | os.O_CREAT, 0o644)
        _expect_erofs(os.open, model, os.O_WRONLY)
        _expect_erofs(os.open, model, os.O_RDWR)
        _expect_erofs(os.open, cfg, os.O_WRONLY | os.O_APPEND)
        _expect_erofs(os.open, cfg, os.O_RDONLY | os.O_TRUNC)
        _expect_erofs(os.truncate, model, 0)
        _expect_erofs(os.unlink, model)
        _expect_erofs(os.unlink, cfg)
        _expect_erofs(os.mkdir, os.path.join(mnt, "d"))
        _expect_erofs(os.rename, cfg, os.path.join(mnt, "config2.json"))
        _expect_erofs(os.chmod, model, 0o644)
        _expect_erofs(os.symlink, "model.safetensors", os.path.join(mnt, "link"))
        _expect_erofs(os.link, model, os.path.join(mnt, "hard"))
        _expect_erofs(os.utime, model, (0, 0))
        with open(model, "rb") as f:
            assert f.read(8)  # still readable
        sv = os.statvfs(mnt)
        assert sv.f_bsize > 0
    assert not os.path.exists(os.path.join(src, "new-file"))
