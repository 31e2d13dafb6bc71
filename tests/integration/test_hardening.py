"""Hardening: concurrency, change detection, daemon lifecycle, read-only-ness, inert
pickles, and a valgrind run (docs/hardening.md).

(a) 8 threads of random preads on model.safetensors, pytorch_model.bin and tensors/*
    plus 2 processes mmap-reading, for a few seconds, on a DCP fixture and on the zstd
    fixture with --cache-size=4K: no mismatch against the bytes read sequentially first
    (themselves checked against the fixture's _ref), no deadlock.
(b) a shard rewritten in place makes reads that need it EIO; a shard replaced by rename
    serves the old bytes or EIO, never a mix.
(c) SIGTERM/SIGINT unmount cleanly; kill -9 leaves a dead mount that fusermount3 -u
    removes; bad mountpoints are one clear line and exit 1; allow_other only when asked;
    every mutating call answers EROFS.
(d) valgrind: no errors and no definite leaks through mount, read, unmount.
"""
import errno
import json
import mmap
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from conftest import (BINARY, FIXTURES, FUSERMOUNT, copy_source, mount, refuse,
                      require_binary, require_tool, tensor_bytes, unmount)

TORCH_FIX = os.path.join(FIXTURES, "torch")
REF = os.path.join(TORCH_FIX, "_ref")
CONCURRENCY_SECONDS = float(os.environ.get("UNSHARDFS_HARDENING_SECONDS", "4"))


def read_all(path):
    with open(path, "rb") as f:
        return f.read()


def ref_tensors(name):
    """{tensor name: raw bytes} of tests/fixtures/torch/_ref/<name>.safetensors."""
    from safetensors import safe_open
    out = {}
    with safe_open(os.path.join(REF, name + ".safetensors"), framework="pt") as f:
        for k in f.keys():
            out[k] = tensor_bytes(f.get_tensor(k))
    return out


def tensor_file(name):
    return name.replace("%", "%25").replace("/", "%2F")


# ------------------------------------------------------------------ (a) concurrency

MMAP_READER = r"""
import mmap, random, sys, time
path, expected_path, seconds, seed = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
expected = open(expected_path, "rb").read()
rnd = random.Random(seed)
bad = 0
with open(path, "rb") as f:
    m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    assert len(m) == len(expected), (len(m), len(expected))
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        off = rnd.randrange(len(expected))
        ln = rnd.randrange(1, min(len(expected) - off, 1 << 16) + 1)
        if m[off:off + ln] != expected[off:off + ln]:
            bad += 1
        n += 1
    m.close()
print(n, bad)
sys.exit(1 if bad else 0)
"""


def hammer(mnt, ref_name, seconds):
    files = ["model.safetensors", "pytorch_model.bin"]
    files += [os.path.join("tensors", n) for n in sorted(os.listdir(os.path.join(mnt, "tensors")))]
    expected = {f: read_all(os.path.join(mnt, f)) for f in files}
    # the sequential bytes are right to begin with
    for name, data in ref_tensors(ref_name).items():
        assert expected[os.path.join("tensors", tensor_file(name))] == data, name

    tmp = tempfile.mkdtemp(prefix="unshardfs-hammer-")
    procs = []
    try:
        for i, f in enumerate(["model.safetensors", "pytorch_model.bin"]):
            exp = os.path.join(tmp, f"expected{i}")
            with open(exp, "wb") as out:
                out.write(expected[f])
            procs.append(subprocess.Popen(
                [sys.executable, "-c", MMAP_READER, os.path.join(mnt, f), exp,
                 str(seconds), str(i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE))

        mismatches, errors, reads = [], [], [0] * 8
        stop = time.monotonic() + seconds

        def worker(k):
            rnd = random.Random(100 + k)
            fds = {f: os.open(os.path.join(mnt, f), os.O_RDONLY) for f in files}
            try:
                while time.monotonic() < stop:
                    f = rnd.choice(files)
                    data = expected[f]
                    if not data:
                        continue
                    off = rnd.randrange(len(data))
                    ln = rnd.randrange(1, min(len(data) - off, 1 << 17) + 1)
                    got = os.pread(fds[f], ln, off)
                    if got != data[off:off + ln]:
                        mismatches.append((f, off, ln))
                    reads[k] += 1
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
            finally:
                for fd in fds.values():
                    os.close(fd)

        threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=seconds + 60)
        assert not any(t.is_alive() for t in threads), "a reader thread hangs: deadlock?"
        for p in procs:
            try:
                out, err = p.communicate(timeout=seconds + 60)
            except subprocess.TimeoutExpired:
                p.kill()
                raise AssertionError("an mmap reader hangs: deadlock?")
            assert p.returncode == 0, f"mmap reader: {out!r} {err!r}"
        assert not errors, errors[:5]
        assert not mismatches, f"{len(mismatches)} mismatching preads, e.g. {mismatches[:5]}"
        assert sum(reads) > 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def test_concurrent_reads_dcp():
    with mount(os.path.join(TORCH_FIX, "fsdp2_2rank")) as mnt:
        hammer(mnt, "fsdp2_2rank", CONCURRENCY_SECONDS)


def test_concurrent_reads_dcp_direct_io():
    """--direct-io=on: the preads bypass the page cache while the mmap readers fill it
    (and each mapping drops it): still every byte right."""
    with mount(os.path.join(TORCH_FIX, "fsdp2_2rank"), "--direct-io=on") as mnt:
        hammer(mnt, "fsdp2_2rank", CONCURRENCY_SECONDS)


def test_concurrent_reads_zstd_tiny_cache():
    with mount(os.path.join(TORCH_FIX, "zstd"), "--cache-size=4K") as mnt:
        hammer(mnt, "zstd", CONCURRENCY_SECONDS)


# ------------------------------------------------------------------ (b) change detection

def _st_tensor_ranges(path):
    """{name: (file, begin, end)} of a safetensors file's tensors (absolute offsets)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
    return {k: (8 + n + v["data_offsets"][0], 8 + n + v["data_offsets"][1])
            for k, v in hdr.items() if k != "__metadata__"}


def _biggest_tensor_of(src, shard):
    ranges = _st_tensor_ranges(os.path.join(src, shard))
    return max(ranges, key=lambda k: ranges[k][1] - ranges[k][0]), ranges


def test_shard_rewritten_in_place_answers_eio(tmp_path):
    src = copy_source(os.path.join(FIXTURES, "sample"), str(tmp_path / "src"))
    changed, unchanged = "model-00002-of-00003.safetensors", "model-00001-of-00003.safetensors"
    victim, ranges = _biggest_tensor_of(src, changed)
    keeper, _ = _biggest_tensor_of(src, unchanged)
    with mount(src) as mnt:
        # nothing of the shard has been read through the mount yet: no page is cached
        p = os.path.join(src, changed)
        st = os.stat(p)
        with open(p, "r+b") as f:
            b, e = ranges[victim]
            f.seek(b)
            f.write(bytes(x ^ 0xFF for x in f.read(e - b)))
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
        assert os.path.getsize(p) == st.st_size
        with pytest.raises(OSError) as ei:
            read_all(os.path.join(mnt, "tensors", tensor_file(victim)))
        assert ei.value.errno == errno.EIO
        with pytest.raises(OSError) as ei:
            read_all(os.path.join(mnt, "model.safetensors"))
        assert ei.value.errno == errno.EIO
        # EIO for the files that need the changed shard only
        ref = _st_tensor_ranges(os.path.join(src, unchanged))[keeper]
        with open(os.path.join(src, unchanged), "rb") as f:
            f.seek(ref[0])
            want = f.read(ref[1] - ref[0])
        assert read_all(os.path.join(mnt, "tensors", tensor_file(keeper))) == want


@pytest.mark.parametrize("what", ["shard", "passthrough"])
def test_rewrite_that_restores_the_mtime_answers_eio(tmp_path, what):
    """An in-place rewrite followed by utime back to the old times (rsync --inplace -t):
    size and mtime match what was recorded, the ctime does not (user space cannot set it),
    so the reads that need the file say EIO instead of serving old and new bytes mixed."""
    src = copy_source(os.path.join(FIXTURES, "sample"), str(tmp_path / "src"))
    shard = "model-00002-of-00003.safetensors"
    victim, ranges = _biggest_tensor_of(src, shard)
    with mount(src) as mnt:
        p = os.path.join(src, shard if what == "shard" else "config.json")
        st = os.stat(p)
        with open(p, "r+b") as f:
            b, e = ranges[victim] if what == "shard" else (0, st.st_size)
            f.seek(b)
            data = f.read(e - b)
            f.seek(b)
            f.write(data[::-1])
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
        now = os.stat(p)
        assert (now.st_size, now.st_mtime_ns) == (st.st_size, st.st_mtime_ns)
        assert now.st_ctime_ns != st.st_ctime_ns
        target = (os.path.join(mnt, "tensors", tensor_file(victim)) if what == "shard"
                  else os.path.join(mnt, "config.json"))
        with pytest.raises(OSError) as ei:
            read_all(target)
        assert ei.value.errno == errno.EIO


def test_shard_replaced_by_rename_never_mixes(tmp_path):
    src = copy_source(os.path.join(FIXTURES, "sample"), str(tmp_path / "src"))
    with mount(os.path.join(FIXTURES, "sample")) as mnt:
        before = read_all(os.path.join(mnt, "model.safetensors"))
    shard = "model-00003-of-00003.safetensors"
    with mount(src) as mnt:
        p = os.path.join(src, shard)
        data = bytearray(read_all(p))
        (n,) = struct.unpack("<Q", data[:8])
        for i in range(8 + n, len(data)):
            data[i] ^= 0x5A
        with open(p + ".new", "wb") as f:
            f.write(data)
        os.rename(p + ".new", p)
        try:
            after = read_all(os.path.join(mnt, "model.safetensors"))
        except OSError as e:
            assert e.errno == errno.EIO, e
        else:
            # the daemon still holds the old file open: it serves the old bytes, all of them
            assert after == before, "old and new bytes mixed in model.safetensors"


# ------------------------------------------------------------------ (c) lifecycle

def _start(source, mnt, *opts):
    proc = subprocess.Popen([require_binary(), "-f", *opts, source, mnt],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while not os.path.ismount(mnt):
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {proc.stderr.read()!r}")
        assert time.monotonic() < deadline, "not mounted"
        time.sleep(0.02)
    return proc


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_unmounts_cleanly(tmp_path, sig, relative):
    # relative: the daemon changes directory; it used to unmount "mnt" from there
    # and leave a dead mount behind
    mnt = str(tmp_path / "mnt")
    os.mkdir(mnt)
    if relative:
        proc = subprocess.Popen([require_binary(), "-f", os.path.join(FIXTURES, "single"),
                                 "mnt"], cwd=str(tmp_path), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while not os.path.ismount(mnt):
            assert proc.poll() is None and time.monotonic() < deadline, "not mounted"
            time.sleep(0.02)
        with open("/proc/self/mountinfo") as f:
            line = next(x for x in f if f" {mnt} " in x)
        assert f" {os.path.join(FIXTURES, 'single')} " in line, line  # fsname: absolute
    else:
        proc = _start(os.path.join(FIXTURES, "single"), mnt)
    try:
        assert os.listdir(mnt)
        proc.send_signal(sig)
        rc = proc.wait(timeout=15)
        assert not os.path.ismount(mnt)
        err = proc.stderr.read().decode(errors="replace")
        assert rc == 0, (rc, err)
    finally:
        if proc.poll() is None:
            unmount(mnt, proc)


def test_kill_9_leaves_a_dead_mount_that_fusermount_removes(tmp_path):
    mnt = str(tmp_path / "mnt")
    os.mkdir(mnt)
    proc = _start(os.path.join(FIXTURES, "single"), mnt)
    proc.kill()
    proc.wait(timeout=15)
    try:
        with pytest.raises(OSError) as ei:
            os.listdir(mnt)
        assert ei.value.errno == errno.ENOTCONN
    finally:
        r = subprocess.run([FUSERMOUNT, "-u", mnt], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert not os.path.ismount(mnt)
    assert os.listdir(mnt) == []


def _bad_mountpoint(mnt):
    r = subprocess.run([require_binary(), "-f", os.path.join(FIXTURES, "single"), mnt],
                       capture_output=True, text=True, timeout=15, stdin=subprocess.DEVNULL)
    lines = r.stderr.splitlines()
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert len(lines) == 1 and lines[0].startswith("unshardfs: ") and mnt in lines[0], lines
    return lines[0]


def test_missing_mountpoint(tmp_path):
    _bad_mountpoint(str(tmp_path / "nope"))


def test_mountpoint_is_a_regular_file(tmp_path):
    p = tmp_path / "file"
    p.write_text("x")
    assert "not a directory" in _bad_mountpoint(str(p))


def test_mounting_twice_on_one_mountpoint(tmp_path):
    mnt = str(tmp_path / "mnt")
    os.mkdir(mnt)
    first = _start(os.path.join(FIXTURES, "single"), mnt)
    second = None
    try:
        second = subprocess.Popen([require_binary(), "-f", os.path.join(FIXTURES, "sample"), mnt],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL)
        try:
            _out, err = second.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            # it stacked a second mount on the first: take it down before failing
            unmount(mnt, second)
            pytest.fail("a second mount stacked on a busy mountpoint instead of refusing")
        lines = err.decode(errors="replace").splitlines()
        assert second.returncode == 1, (second.returncode, lines)
        assert len(lines) == 1 and lines[0].startswith("unshardfs: ") and mnt in lines[0], lines
        assert os.path.ismount(mnt)  # the first mount is untouched
        assert "model.safetensors" in os.listdir(mnt)
    finally:
        unmount(mnt, first)


def _mount_options(mnt):
    with open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[1] == mnt:
                return fields[3].split(",")
    raise AssertionError(f"{mnt} not in /proc/mounts")


def test_allow_other_only_when_asked():
    with mount(os.path.join(FIXTURES, "single")) as mnt:
        opts = _mount_options(mnt)
        assert "allow_other" not in opts and "ro" in opts, opts
    with mount(os.path.join(FIXTURES, "single"), "-o", "allow_other") as mnt:
        assert "allow_other" in _mount_options(mnt)


def test_every_mutating_call_is_erofs(tmp_path):
    other = tmp_path / "other"
    other.write_text("x")
    with mount(os.path.join(FIXTURES, "single")) as mnt:
        f = os.path.join(mnt, "model.safetensors")
        t = os.path.join(mnt, "tensors", sorted(os.listdir(os.path.join(mnt, "tensors")))[0])
        calls = {
            "open for write": lambda: os.open(f, os.O_WRONLY),
            "open read-write": lambda: os.open(t, os.O_RDWR),
            "create": lambda: os.open(os.path.join(mnt, "new"), os.O_WRONLY | os.O_CREAT, 0o644),
            "mkdir": lambda: os.mkdir(os.path.join(mnt, "d")),
            "rmdir": lambda: os.rmdir(os.path.join(mnt, "tensors")),
            "unlink": lambda: os.unlink(f),
            "rename": lambda: os.rename(f, os.path.join(mnt, "x")),
            "chmod": lambda: os.chmod(f, 0o600),
            "chown": lambda: os.chown(f, 1, 1),
            "utime": lambda: os.utime(f, (1, 1)),
            "truncate": lambda: os.truncate(f, 0),
            "setxattr": lambda: os.setxattr(t, "user.x", b"1"),
            "removexattr": lambda: os.removexattr(t, "user.unshardfs.dtype"),
            "symlink": lambda: os.symlink("model.safetensors", os.path.join(mnt, "s")),
            "link": lambda: os.link(f, os.path.join(mnt, "l")),
            "mknod": lambda: os.mkfifo(os.path.join(mnt, "p")),
            "rename into": lambda: os.rename(str(other), os.path.join(mnt, "o")),
        }
        wrong = {}
        for what, call in calls.items():
            try:
                call()
                wrong[what] = "succeeded"
            except OSError as e:
                # a rename across filesystems is EXDEV before the mount is asked
                if e.errno != errno.EROFS and not (what == "rename into" and e.errno == errno.EXDEV):
                    wrong[what] = errno.errorcode.get(e.errno, e.errno)
        assert not wrong, wrong
        assert sorted(os.listdir(mnt)) == sorted(os.listdir(mnt))  # still serving


# ------------------------------------------------------------------ inert pickles

class _Call:
    """Pickles as fn(*args): what an executing unpickler would run at load."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def test_pickle_globals_are_never_executed(tmp_path):
    import builtins
    import torch
    marker = tmp_path / "PWNED"
    src = tmp_path / "src"
    src.mkdir()
    cmd = f"touch {marker}"
    torch.save({"w": torch.arange(4, dtype=torch.float32),
                "hook": _Call(os.system, cmd),
                "hook2": _Call(builtins.eval, f"__import__('os').system({cmd!r})"),
                "hook3": _Call(subprocess.Popen, ["sh", "-c", cmd])},
               str(src / "pytorch_model.bin"))
    with mount(str(src)) as mnt:
        # unknown globals are opaque values: not tensors, never called
        assert os.listdir(os.path.join(mnt, "tensors")) == ["w"]
        assert read_all(os.path.join(mnt, "tensors", "w")) == \
            tensor_bytes(torch.arange(4, dtype=torch.float32))
    assert not marker.exists(), "a pickle global was executed"


def test_empty_dict_beside_the_model_mounts(tmp_path):
    # regression: an empty dict was a node without its collection, dereferenced by
    # the container rule's search (segfault at mount; found by fuzz_torch)
    import torch
    src = tmp_path / "src"
    src.mkdir()
    torch.save({"epoch": 1, "model": {"w": torch.ones(3)}, "extra": {}, "lst": [{}]},
               str(src / "pytorch_model.bin"))
    with mount(str(src)) as mnt:
        assert os.listdir(os.path.join(mnt, "tensors")) == ["w"]


def test_shared_reference_dag_is_refused_quickly(tmp_path):
    # regression: {"a": x, "b": x} nested 40 deep is 2 KiB of pickle (memo) but 2^40
    # paths: the mount used to walk them forever
    import torch
    src = tmp_path / "src"
    src.mkdir()
    x = {}
    for _ in range(40):
        x = {"a": x, "b": x}
    torch.save({"model": {"w": torch.ones(3), "extra": x}}, str(src / "pytorch_model.bin"))
    path, why = refuse(str(src), timeout=30)
    assert path == "pytorch_model.bin" and "shared references" in why, why
    # under keys that cannot be names, every key's search for tensors draws on the one
    # bound of the walk (each used to get its own: 1.5 s per key of a 100 KB file)
    torch.save({"model": {"w": torch.ones(3)}, **{float(i) + .5: x for i in range(64)}},
               str(src / "pytorch_model.bin"))
    path, why = refuse(str(src), timeout=30)
    assert path == "pytorch_model.bin" and "shared references" in why, why
    # beside a model key too: the container rule's search for other weights is bounded
    torch.save({"model": {"w": torch.ones(3)}, "extra": x}, str(src / "pytorch_model.bin"))
    path, why = refuse(str(src), timeout=30)
    assert path == "pytorch_model.bin" and "shared references" in why, why



def test_optimizer_of_many_parameters_mounts_quickly(tmp_path):
    # regression: each state entry's name was looked up by scanning every group's
    # params, and "params" were indexed one by one in cJSON lists: quadratic, 25 s for
    # 50k parameters (100 s here for 100k)
    import torch
    n = 100_000
    src = tmp_path / "src"
    src.mkdir()
    osd = {"state": {i: {"step": 1.0} for i in range(n)},
           "param_groups": [{"lr": 0.1, "params": list(range(n)),
                             "param_names": [f"module.p{i}" for i in range(n)]}]}
    torch.save({"model": {"w": torch.ones(2)}, "optimizer": osd}, str(src / "ck.pt"))
    with mount(str(src), timeout=20) as mnt:
        with open(os.path.join(mnt, "optimizer.json")) as f:
            got = json.load(f)
    assert got["param_groups"][0]["params"][-1] == f"p{n - 1}"
    assert got["scalars"][f"state.p{n - 1}.step"] == 1.0

# ------------------------------------------------------------------ (d) valgrind

def test_valgrind_mount_read_unmount(tmp_path):
    require_tool("valgrind")
    if "asan" in os.path.basename(os.path.dirname(os.path.dirname(BINARY))):
        pytest.skip("valgrind cannot run an ASan build")
    log = tmp_path / "valgrind.log"
    wrapper = ["valgrind", "--leak-check=full", "--errors-for-leak-kinds=definite",
               "--error-exitcode=99", f"--log-file={log}"]
    # check_exit: rc 99 (an error or a definite leak) fails the unmount's exit check
    with mount(os.path.join(TORCH_FIX, "zstd"), "--cache-size=64K", wrapper=wrapper,
               timeout=120) as mnt:
        for f in ("model.safetensors", "pytorch_model.bin"):
            assert read_all(os.path.join(mnt, f))
        for n in sorted(os.listdir(os.path.join(mnt, "tensors")))[:4]:
            read_all(os.path.join(mnt, "tensors", n))
    text = log.read_text()
    assert "ERROR SUMMARY: 0 errors" in text, text[-3000:]
    assert "definitely lost: 0 bytes" in text or "no leaks are possible" in text, text[-3000:]
