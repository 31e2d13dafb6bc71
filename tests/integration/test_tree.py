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


def _copy_sample(tmp_path):
    import shutil
    src = str(tmp_path / "src")
    shutil.copytree(SOURCES["sample"], src)
    return src


def test_modes_follow_the_source_without_write_bits(tmp_path):
    """default_permissions enforces what the mount shows: a view has the read bits every
    source file grants (it shows bytes of all of them); a passed-through file or
    directory keeps its own mode, less the write bits."""
    import stat as st
    src = _copy_sample(tmp_path)
    shard = next(f for f in checkpoint_files(src) if f.endswith(".safetensors"))
    os.chmod(os.path.join(src, shard), 0o640)
    os.chmod(os.path.join(src, "config.json"), 0o600)
    os.mkdir(os.path.join(src, "private"), 0o700)
    with open(os.path.join(src, "private", "notes.txt"), "w") as f:
        f.write("x")
    with mount(src) as mnt:
        mode = {p: st.S_IMODE(os.stat(os.path.join(mnt, p)).st_mode)
                for p in ("model.safetensors", "config.json", "private", "private/notes.txt",
                          "tensors", ".")}
        tmode = {st.S_IMODE(os.stat(os.path.join(mnt, "tensors", n)).st_mode)
                 for n in os.listdir(os.path.join(mnt, "tensors"))}
    assert mode == {"model.safetensors": 0o440, "config.json": 0o400, "private": 0o500,
                    "private/notes.txt": 0o444, "tensors": 0o555, ".": 0o555}, mode
    assert tmode == {0o440}, tmode


def test_views_are_as_new_as_the_newest_source_file(tmp_path):
    """A shard rewritten in place changes its mtime, not the directory's: the views must
    look newer too, or rsync and cp -u keep a stale copy."""
    src = _copy_sample(tmp_path)
    shard = os.path.join(src, next(f for f in checkpoint_files(src)
                                   if f.endswith(".safetensors")))
    with mount(src) as mnt:
        before = os.stat(os.path.join(mnt, "model.safetensors"))
    later = before.st_mtime_ns + 10**10
    os.utime(shard, ns=(later, later))
    with mount(src) as mnt:
        after = os.stat(os.path.join(mnt, "model.safetensors"))
        tensor = os.stat(os.path.join(mnt, "tensors", os.listdir(os.path.join(mnt, "tensors"))[0]))
    assert after.st_mtime_ns == later and tensor.st_mtime_ns == later
    assert after.st_ctime_ns >= before.st_ctime_ns


def test_lookup_of_a_name_longer_than_namemax(tmp_path):
    with mount(SOURCES["sample"]) as mnt:
        namemax = os.statvfs(mnt).f_namemax
        with pytest.raises(OSError) as ei:
            os.stat(os.path.join(mnt, "a" * (namemax + 1)))
        assert ei.value.errno == errno.ENAMETOOLONG
        with pytest.raises(FileNotFoundError):
            os.stat(os.path.join(mnt, "a" * namemax))



def test_a_file_source_gives_searchable_directories(tmp_path):
    """SOURCE a single 0644 file: the root and tensors/ take its read bits and, for
    directories, the matching search bits (r-xr-xr-x), or nobody but root could look
    inside under default_permissions."""
    import shutil
    import stat as st
    src = str(tmp_path / "model.safetensors")
    shutil.copy(os.path.join(SOURCES["sample"], checkpoint_files(SOURCES["sample"])[0]), src)
    os.chmod(src, 0o644)
    with mount(src) as mnt:
        modes = {p: st.S_IMODE(os.stat(os.path.join(mnt, p)).st_mode)
                 for p in (".", "tensors", "model.safetensors")}
    assert modes == {".": 0o555, "tensors": 0o555, "model.safetensors": 0o444}, modes


def test_statfs_counts_the_inodes_that_can_be_reached(tmp_path):
    """A tensor whose name is longer than a file name may be has no file in tensors/:
    statfs's f_files must not count it."""
    import torch
    from safetensors.torch import save_file
    src = tmp_path / "src"
    src.mkdir()
    save_file({"a": torch.ones(2), "b" * 300: torch.zeros(3), "c": torch.ones(2)},
              str(src / "model.safetensors"))
    with mount(str(src)) as mnt:
        seen = {os.stat(mnt).st_ino}
        for dp, dns, fns in os.walk(mnt):
            for n in dns + fns:
                seen.add(os.stat(os.path.join(dp, n)).st_ino)
        files = os.statvfs(mnt).f_files
    assert files == len(seen), (files, len(seen))
