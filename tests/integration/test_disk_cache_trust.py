"""--cache-dir trusts nothing it reads (issue 28, item 5; docs/remote.md "--cache-dir:
what it trusts"): a block comes from disk only when its file is a regular file of this
user's that nobody else can write, of the expected size, and its checksum (keyed by the
block's identity) matches its bytes. Anything else is a miss, fetched again from the
store; a cache directory another user owns or could write is refused at mount.

- a world-writable (0777) --cache-dir: refused, exit status 2, one line naming it;
  one owned by another user (as root): refused the same way
- block files whose payload was overwritten (same size): the remount serves the
  store's bytes, and remote_stats shows the blocks fetched again (no disk hit)
- FIFOs planted at the blocks' names: the read completes (no hang), right bytes
- block files owned by another uid (as root), writable by others, or symlinks to
  whole valid blocks: not served
- after each, the next remount reads the rewritten blocks from disk again

The checkpoint is a tiny model.safetensors plus a passthrough file blob.bin of NBLK
blocks of --block-size, read whole from the mount and compared with the uploaded bytes.
Every read runs in a child process with a timeout, so a hang is a failure.
"""
import hashlib
import os
import subprocess
import sys

import pytest

import s3env
from conftest import mount, refuse

MOUNT_TIMEOUT = 60
BLOCK_SIZE = 256 << 10
NBLK = 12
BUCKET = "dcache-trust"
PREFIX = "ckpt"


@pytest.fixture(scope="module")
def source(tmp_path_factory, s3):
    """(the mount's SOURCE URL, blob.bin's bytes), uploaded once."""
    import torch
    from safetensors.torch import save_file
    d = tmp_path_factory.mktemp("trust")
    save_file({"w": torch.arange(16, dtype=torch.float32)}, str(d / "model.safetensors"),
              metadata={"format": "pt"})
    blob = os.urandom(NBLK * BLOCK_SIZE)
    (d / "blob.bin").write_bytes(blob)
    s3env.upload_tree(s3, str(d), BUCKET, PREFIX)
    return f"s3://{BUCKET}/{PREFIX}", blob


def opts(moto_server, cache):
    return s3env.remote_opts(moto_server.url, f"--block-size={BLOCK_SIZE}",
                             f"--cache-dir={cache}", "--cache-dir-size=64M")


def child_sha(path, timeout=60):
    """sha256 of @path read in 1 MiB reads by a child process; a read that does not end
    within @timeout fails the test."""
    code = ("import hashlib, sys\nh = hashlib.sha256()\n"
            "with open(sys.argv[1], 'rb', buffering=0) as f:\n"
            "    while (b := f.read(1 << 20)):\n        h.update(b)\n"
            "print(h.hexdigest())\n")
    try:
        r = subprocess.run([sys.executable, "-c", code, path], capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"a read of {path} hung: no answer within {timeout}s")
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def read_blob(src, moto_server, cache, timeout=60):
    """Mount, read blob.bin whole, unmount: (its sha256, the remote_stats deltas of
    the read)."""
    url, _blob = src
    with mount(url, *opts(moto_server, cache), timeout=MOUNT_TIMEOUT) as m:
        before = s3env.remote_stats(m)
        sha = child_sha(os.path.join(m, "blob.bin"), timeout=timeout)
        after = s3env.remote_stats(m)
    return sha, {k: after[k] - before[k] for k in s3env.STATS_KEYS}


def full_blocks(cache):
    """The block files of blob.bin: the largest ones (model.safetensors is one short
    block; whatever the file format adds to a block is the same for all)."""
    files = [e for e in os.scandir(cache) if len(e.name) == 64]
    big = max(e.stat(follow_symlinks=False).st_size for e in files)
    out = sorted(e.path for e in files if e.stat(follow_symlinks=False).st_size == big)
    assert len(out) >= NBLK - 1, f"{len(out)} full blocks in {cache}"
    return out


@pytest.fixture
def warm(source, moto_server, tmp_path):
    """A cache dir filled by one full read, whose blocks a remount reads from disk:
    (cache, sha of blob.bin)."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    want = hashlib.sha256(source[1]).hexdigest()
    sha, first = read_blob(source, moto_server, cache)
    assert sha == want and first["disk_hits"] == 0, first
    sha, base = read_blob(source, moto_server, cache)
    assert sha == want, "a remount from an untouched cache serves other bytes"
    assert base["disk_hits"] >= NBLK - 1, base
    return cache, want


def assert_none_served(src, moto_server, cache, want, timeout=60):
    """Every block of blob.bin was tampered with: the remount serves the store's bytes,
    none of them from disk, and leaves good blocks behind (the next remount's hits)."""
    sha, now = read_blob(src, moto_server, cache, timeout=timeout)
    assert sha == want, "the remount served bytes the store does not hold"
    assert now["disk_hits"] == 0, f"a tampered block was served from disk: {now}"
    assert now["bytes_fetched"] >= (NBLK - 1) * BLOCK_SIZE, now
    sha, again = read_blob(src, moto_server, cache, timeout=timeout)
    assert sha == want and again["disk_hits"] >= NBLK - 1, again


# ---------------------------------------------------------------------------- the directory

def test_world_writable_cache_dir_is_refused(source, moto_server, tmp_path):
    cache = tmp_path / "open"
    cache.mkdir()
    os.chmod(cache, 0o777)
    path, reason = refuse(source[0], *opts(moto_server, cache), timeout=20)
    assert str(cache) in path + reason, (path, reason)
    assert "writable" in reason, reason
    assert not any(os.scandir(cache)), "a refused cache dir was written to"
    os.chmod(cache, 0o775)  # group-writable: refused too
    path, reason = refuse(source[0], *opts(moto_server, cache), timeout=20)
    assert str(cache) in path + reason and "writable" in reason, (path, reason)


def test_cache_dir_of_another_user_is_refused(source, moto_server, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    cache = tmp_path / "theirs"
    cache.mkdir(mode=0o700)
    os.chown(cache, 65534, 65534)
    path, reason = refuse(source[0], *opts(moto_server, cache), timeout=20)
    assert str(cache) in path + reason and "65534" in reason, (path, reason)


def test_created_cache_dir_is_private(source, moto_server, tmp_path):
    cache = tmp_path / "new" / "cache"
    sha, _ = read_blob(source, moto_server, cache)
    assert sha == hashlib.sha256(source[1]).hexdigest()
    assert os.stat(cache).st_mode & 0o777 == 0o700
    for e in os.scandir(cache):
        st = e.stat(follow_symlinks=False)
        assert st.st_mode & 0o777 == 0o600 and st.st_uid == os.geteuid(), e.name


# ---------------------------------------------------------------------------- the blocks
# Each test tampers with every block file of blob.bin (which blocks a read's first pages
# cover depends on timing; all of them do not), then asserts none was served.

def test_planted_block_bytes_are_not_served(source, moto_server, warm):
    cache, want = warm
    olds = {}
    for victim in full_blocks(cache):
        size = os.path.getsize(victim)
        with open(victim, "r+b") as f:  # the payload is at the end, whatever the format
            f.seek(size - 4096)
            olds[victim] = f.read(4096)
            f.seek(size - 4096)
            f.write(bytes(b ^ 0xFF for b in olds[victim]))
        assert os.path.getsize(victim) == size
    assert_none_served(source, moto_server, cache, want)
    for victim, old in olds.items():  # rewritten from the store
        with open(victim, "rb") as f:
            f.seek(-4096, os.SEEK_END)
            assert f.read(4096) == old


def test_fifo_at_a_block_name_does_not_hang(source, moto_server, warm):
    cache, want = warm
    victims = full_blocks(cache)
    for victim in victims:
        os.unlink(victim)
        os.mkfifo(victim, 0o600)
    try:
        assert_none_served(source, moto_server, cache, want, timeout=30)
    finally:
        # before the fix a worker is stuck in open(): a writer lets it go
        for victim in victims:
            try:
                os.close(os.open(victim, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
    for victim in victims:
        assert os.path.isfile(victim) and not os.path.islink(victim)


def test_block_of_another_user_is_not_served(source, moto_server, warm):
    if os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    cache, want = warm
    victims = full_blocks(cache)
    for victim in victims:
        os.chown(victim, 65534, 65534)  # its bytes are right: the owner alone refuses it
    assert_none_served(source, moto_server, cache, want)
    for victim in victims:
        assert os.stat(victim).st_uid == os.geteuid(), "the refused block was not replaced"


def test_block_writable_by_others_is_not_served(source, moto_server, warm):
    cache, want = warm
    victims = full_blocks(cache)
    for victim in victims:
        os.chmod(victim, 0o666)
    assert_none_served(source, moto_server, cache, want)
    for victim in victims:
        assert os.stat(victim).st_mode & 0o077 == 0, "the refused block was not replaced"


def test_symlink_at_a_block_name_is_not_followed(source, moto_server, warm, tmp_path):
    cache, want = warm
    victims = full_blocks(cache)
    for i, victim in enumerate(victims):
        elsewhere = tmp_path / f"elsewhere{i}"
        os.rename(victim, elsewhere)  # a whole, valid block, reached through a link
        os.symlink(elsewhere, victim)
    assert_none_served(source, moto_server, cache, want)
    for victim in victims:
        assert not os.path.islink(victim)
