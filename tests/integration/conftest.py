"""Shared helpers for the integration tests: they drive the real binary through a real
FUSE mount and read it with the real Python clients (safetensors, torch, transformers).

Binary: $UNSHARDFS_BUILD/fs/unshardfs (UNSHARDFS_BUILD defaults to "build", relative to
the repository root). Build it with `bash tools/setup.sh` or
`meson setup build && meson compile -C build`.
"""
import contextlib
import glob
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(REPO, "tests", "fixtures")
BUILD = os.path.join(REPO, os.environ.get("UNSHARDFS_BUILD", "build"))
BINARY = os.path.join(BUILD, "fs", "unshardfs")
FUSERMOUNT = shutil.which("fusermount3") or "fusermount3"

INDEX_NAME = "model.safetensors.index.json"

# The tests never touch the network: transformers/huggingface_hub stay offline.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# safetensors dtype string -> element size in bytes (the natural alignment)
DTYPE_SIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
    "F8_E4M3FNUZ": 1, "F8_E5M2FNUZ": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8, "C64": 8,
}
# dtypes numpy cannot represent (safe_open(framework="numpy") refuses them)
NUMPY_UNSUPPORTED = {"BF16", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ"}


def hub_snapshot():
    repo = os.path.join(FIXTURES, "hubcache", "models--tiny--llama")
    with open(os.path.join(repo, "refs", "main")) as f:
        rev = f.read().strip()
    return os.path.join(repo, "snapshots", rev)


# The checkpoint fixtures every view test runs on (see tests/fixtures/README.md).
SOURCES = {
    "sample": os.path.join(FIXTURES, "sample"),
    "single": os.path.join(FIXTURES, "single"),
    "noindex": os.path.join(FIXTURES, "noindex"),
    "hubcache": hub_snapshot(),
}


def require_tool(name):
    """The path of the program @name, which tools/setup.sh installs: a test that needs it
    fails when it is missing (a skip would hide that the check never ran)."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run `bash tools/setup.sh` (it installs it)")
    return path


def require_binary():
    if not os.access(BINARY, os.X_OK):
        pytest.fail(f"{BINARY} is not built: run `bash tools/setup.sh` "
                    f"(or `meson setup build && meson compile -C build`)")
    return BINARY


# ---------------------------------------------------------------------------- sources

def checkpoint_files(source):
    """The safetensors files a source is made of, relative to it (index order, else sorted)."""
    index = os.path.join(source, INDEX_NAME)
    if os.path.exists(index):
        with open(index) as f:
            wm = json.load(f)["weight_map"]
        return sorted(set(wm.values()))
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(source, "*.safetensors")))


def passthrough_files(source):
    """Top-level regular files (symlinks followed) of a source that are not checkpoint files."""
    ckpt = set(checkpoint_files(source))
    if os.path.exists(os.path.join(source, INDEX_NAME)):
        ckpt.add(INDEX_NAME)
    return sorted(n for n in os.listdir(source)
                  if n not in ckpt and os.path.isfile(os.path.join(source, n)))


def parse_header(data_or_path):
    """(header_len, header_dict) of a safetensors file given as bytes or a path."""
    if isinstance(data_or_path, (bytes, bytearray, memoryview)):
        head = bytes(data_or_path[:8])
        (n,) = struct.unpack("<Q", head)
        hdr = json.loads(bytes(data_or_path[8:8 + n]))
    else:
        with open(data_or_path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            hdr = json.loads(f.read(n))
    return n, hdr


def tensor_bytes(t):
    """Raw little-endian row-major bytes of a torch tensor (any dtype, scalars, empty)."""
    import torch
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def source_tensors(source):
    """{name: (dtype_str, shape, raw_bytes, file_rel)} read straight from the source files."""
    from safetensors import safe_open
    out = {}
    for rel in checkpoint_files(source):
        path = os.path.join(source, rel)
        _n, hdr = parse_header(path)
        with safe_open(path, framework="pt") as f:
            for name in f.keys():
                assert name not in out, f"fixture has {name} twice"
                t = f.get_tensor(name)
                out[name] = (hdr[name]["dtype"], list(hdr[name]["shape"]), tensor_bytes(t), rel)
    return out


# ---------------------------------------------------------------------------- mounting

def read_log(path):
    """What a log file holds so far ("" if it cannot be read): a daemon's stderr,
    a test server's log."""
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def unmount(mnt, proc=None, timeout=10):
    """fusermount3 -u, retrying while busy; then wait for the daemon. Returns its status."""
    last = None
    for _ in range(20):
        if not os.path.ismount(mnt):
            break
        last = subprocess.run([FUSERMOUNT, "-u", mnt], capture_output=True, text=True)
        if last.returncode == 0:
            break
        time.sleep(0.25)
    else:
        subprocess.run([FUSERMOUNT, "-uz", mnt], capture_output=True)
    if proc is None:
        return None
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"unshardfs did not exit within {timeout}s of fusermount3 -u "
                             f"({last.stderr if last else ''})")


@contextlib.contextmanager
def mount(source, *opts, wrapper=(), timeout=10, check_exit=True):
    """Mount SOURCE with `unshardfs -f [opts] SOURCE MNT`; yield MNT; unmount on exit.

    wrapper: argv prefix (e.g. strace) to run the daemon under.
    """
    binary = require_binary()
    tmp = tempfile.mkdtemp(prefix="unshardfs-test-")
    mnt = os.path.join(tmp, "mnt")
    os.mkdir(mnt)
    errpath = os.path.join(tmp, "stderr")
    outpath = os.path.join(tmp, "stdout")
    argv = list(wrapper) + [binary, "-f", *opts, source, mnt]
    with open(errpath, "wb") as err, open(outpath, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while not os.path.ismount(mnt):
            rc = proc.poll()
            if rc is not None:
                raise AssertionError(f"unshardfs exited with status {rc} before mounting "
                                     f"{source}: {read_log(errpath).strip()!r}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{source} not mounted after {timeout}s: "
                                     f"{read_log(errpath).strip()!r}")
            time.sleep(0.02)
        mounted_ok = True
        yield mnt
    except BaseException:
        mounted_ok = False
        raise
    finally:
        if proc.poll() is None or os.path.ismount(mnt):
            rc = unmount(mnt, proc)
        else:
            rc = proc.returncode
        try:
            os.rmdir(mnt)
        except OSError:
            pass
        stderr = read_log(errpath)
        shutil.rmtree(tmp, ignore_errors=True)
    if check_exit and mounted_ok:
        assert rc == 0, f"unshardfs exited {rc} after unmount: {stderr.strip()!r}"
        # sanitizer builds (UNSHARDFS_BUILD=build-asan): UBSan reports do not change the status
        assert "runtime error:" not in stderr, stderr


REFUSAL_RE = re.compile(r"^unshardfs: (.+?): (.+)$")


def refuse(source, *opts, timeout=5):
    """Run `unshardfs -f [opts] SOURCE MNT` expecting a refusal.

    Asserts exit status 2 within `timeout` seconds, exactly one stderr line
    `unshardfs: <path>: <reason>` and nothing mounted. Returns (path, reason).
    """
    binary = require_binary()
    tmp = tempfile.mkdtemp(prefix="unshardfs-refuse-")
    mnt = os.path.join(tmp, "mnt")
    os.mkdir(mnt)
    proc = subprocess.Popen([binary, "-f", *opts, source, mnt], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        mounted = os.path.ismount(mnt)
        unmount(mnt, proc)
        proc.kill()
        out, err = proc.communicate()
        shutil.rmtree(tmp, ignore_errors=True)
        raise AssertionError(f"unshardfs did not refuse {source} within {timeout}s "
                             f"(mounted={mounted}); stderr={err.decode(errors='replace')!r}")
    mounted = os.path.ismount(mnt)
    if mounted:
        unmount(mnt)
    shutil.rmtree(tmp, ignore_errors=True)
    err = err.decode(errors="replace")
    assert not mounted, "a refused source was left mounted"
    assert proc.returncode == 2, f"expected exit status 2, got {proc.returncode}; stderr={err!r}"
    lines = err.splitlines()
    assert len(lines) == 1, f"expected exactly one stderr line, got {lines!r}"
    m = REFUSAL_RE.match(lines[0])
    assert m, f"stderr line not of the form 'unshardfs: <path>: <reason>': {lines[0]!r}"
    return m.group(1), m.group(2)


def run_cli(*args, timeout=30):
    binary = require_binary()
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(params=sorted(SOURCES), ids=sorted(SOURCES))
def source(request):
    """Each checkpoint fixture, as (id, path)."""
    return request.param, SOURCES[request.param]


def copy_source(src, dst):
    """Copy a fixture (symlinks resolved) so a test can break the copy."""
    shutil.copytree(src, dst, symlinks=False)
    return dst


# ---------------------------------------------------------------------------- S3 (issue 21)
# A real moto server on loopback for the remote-SOURCE tests (test_s3*.py); see s3env.py.
# Started once per session, only by the tests that ask for it; killed at the end.

@pytest.fixture(scope="session")
def moto_server():
    """The session's moto server (s3env.MotoServer): .url is its endpoint URL. The
    dummy credentials it needs are in os.environ from here on (daemons inherit them)."""
    import sys
    import s3env
    venv = os.environ.get("UNSHARDFS_VENV")
    py = os.path.join(venv, "bin", "python") if venv else sys.executable
    try:
        import moto  # noqa: F401
    except ImportError:
        pytest.fail("moto[server] is not installed in this venv: run `bash tools/setup.sh`")
    server = s3env.MotoServer(python=py)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3(moto_server):
    """A boto3 S3 client of the moto server (path-style, dummy credentials)."""
    import s3env
    return s3env.client(moto_server.url)


@pytest.fixture
def bucket(s3, request):
    """A fresh bucket of this test's own (a name S3 accepts: lowercase, 3-63 chars)."""
    import s3env
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower()).strip("-")[:40]
    name = f"t{next(_BUCKET_SEQ)}-{name}".rstrip("-")
    return s3env.make_bucket(s3, name)


_BUCKET_SEQ = iter(range(1, 1 << 30))


@pytest.fixture
def fault_proxy(moto_server):
    """A s3proxy.FaultProxy in front of the moto server, faults cleared at the end."""
    import s3proxy
    px = s3proxy.FaultProxy(moto_server.url)
    yield px
    px.close()


# ---- a mount's daemon, for memory tests (test_memory.py, test_s3_faults.py)

def daemon_pid(mnt):
    """The pid of the unshardfs daemon serving @mnt."""
    out = subprocess.run(["pgrep", "-f", "--", mnt], capture_output=True, text=True).stdout
    for pid in out.split():
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"unshardfs" in f.read().split(b"\0")[0]:
                return int(pid)
    raise AssertionError(f"no unshardfs daemon found for {mnt}")


def hwm_mib(pid):
    """The peak RSS (VmHWM) of process @pid, in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")
