"""The loader's trust model (docs/loader.md, "Trust model"; issue 28 items 1 and 7).

A directory's user.unshardfs.* xattrs are believed only on the root of a live
unshardfs mount made by this user or root: a plain directory carrying them (tar
--xattrs, rsync -X, cp -a) is loaded as the plain directory it is, and the store its
xattrs name is never contacted. A real mount still resolves to its SOURCE. And a
closed Loader, or one given bad numbers or buffers, raises instead of crashing.
"""
import http.server
import os
import shutil
import subprocess
import sys
import threading

import pytest

from conftest import BUILD, FIXTURES, REPO, SOURCES, mount, tensor_bytes

sys.path.insert(0, os.path.join(REPO, "lib", "python"))
# As test_loader.py: an ASan library cannot load into a plain Python, so a sanitizer
# build's run (build-asan/) uses its normal sibling's library (build/).
_LIB_BUILD = BUILD.rstrip("/")
if _LIB_BUILD.endswith("-asan"):
    _LIB_BUILD = _LIB_BUILD[:-len("-asan")]
os.environ["UNSHARDFS_LIB"] = os.path.join(_LIB_BUILD, "lib", "loader", "libunshard.so")

import unshardfs  # noqa: E402


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen = []

    def _any(self):
        self.seen.append((self.command, self.path, dict(self.headers)))
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = do_PUT = do_POST = _any

    def log_message(self, *a):
        pass


@pytest.fixture
def recorder():
    _Recorder.seen = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv, _Recorder.seen
    finally:
        srv.shutdown()
        srv.server_close()


def _names_and_bytes(sd):
    return {n: tensor_bytes(t) for n, t in sd.items()}


def test_planted_xattrs_are_ignored(tmp_path, recorder, monkeypatch):
    """A plain copy of a mount root's xattrs, pointing at another SOURCE on an
    endpoint the test records, loads the directory's own tensors; nothing is sent."""
    srv, seen = recorder
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDPLANTED")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token-that-must-not-leave")
    plain = tmp_path / "plain"
    shutil.copytree(SOURCES["single"], plain)
    with mount(SOURCES["sample"]) as mnt:
        real_opts = os.getxattr(mnt, "user.unshardfs.options").decode()
        identity = os.getxattr(mnt, "user.unshardfs.identity")
    endpoint = f"http://127.0.0.1:{srv.server_address[1]}"
    opts = ",".join(o for o in real_opts.split(",") if not o.startswith("endpoint-url="))
    os.setxattr(plain, "user.unshardfs.source", b"s3://bucket/ckpt")
    os.setxattr(plain, "user.unshardfs.options",
                f"{opts},endpoint-url={endpoint}".encode())
    os.setxattr(plain, "user.unshardfs.identity", identity)
    with unshardfs.Loader(str(plain)) as ld:
        assert not ld.mounted
        assert ld.source == os.path.realpath(plain)
    got = _names_and_bytes(unshardfs.load(str(plain)))
    assert got == _names_and_bytes(unshardfs.load(SOURCES["single"]))
    assert got != _names_and_bytes(unshardfs.load(SOURCES["sample"]))
    assert seen == []


def test_real_mount_still_resolves_to_its_source():
    src = SOURCES["sample"]
    with mount(src) as mnt:
        with unshardfs.Loader(mnt) as ld:
            assert ld.mounted and ld.source == os.path.realpath(src)
        assert _names_and_bytes(unshardfs.load(mnt)) == \
            _names_and_bytes(unshardfs.load(src))
        # a subdirectory of a mount is no mount root
        with pytest.raises(unshardfs.UnshardfsError):
            unshardfs.Loader(os.path.join(mnt, "tensors"))


MISUSE = r"""
import sys, ctypes, unshardfs
src = sys.argv[1]
ld = unshardfs.Loader(src)
buf = bytearray(64)
calls = {
    "chunks": lambda: ld.chunks(0),
    "read_many": lambda: ld.read_many([(0, 0, 4, buf)]),
    "read_many_empty": lambda: ld.read_many([]),
    "read_slice": lambda: ld.read_slice(0, 0, 0, 1, 0, 1, buf),
    "_info": lambda: ld._info(0),
    "enter": lambda: ld.__enter__(),
}
# open: bad numbers and buffers are refused before C
bad = {
    "negative index": lambda: ld.read_many([(-1, 0, 4, buf)]),
    "huge index": lambda: ld.chunks(1 << 70),
    "huge offset": lambda: ld.read_many([(0, (1 << 64) + 1, 4, buf)]),
    "short buffer": lambda: ld.read_many([(0, 0, 4096, bytearray(8))]),
    "readonly buffer": lambda: ld.read_many([(0, 0, 4, b"abcd")]),
    "wrong type": lambda: ld.read_many([(0, 0, 4, "abcd")]),
    "negative address": lambda: ld.read_many([(0, 0, 4, -8)]),
    "short slice": lambda: ld.read_slice(0, 0, 0, 1, 0, 1, bytearray(1), 1 << 20),
}
for name, fn in bad.items():
    try:
        fn()
    except (ValueError, TypeError) as e:
        pass
    else:
        sys.exit(f"open loader: {name} was not refused")
ld.close()
ld.close()  # twice: fine
assert ld.closed
for name, fn in calls.items():
    try:
        fn()
    except ValueError as e:
        assert isinstance(e, unshardfs.UnshardfsError), name
        assert "closed" in str(e), (name, str(e))
    else:
        sys.exit(f"closed loader: {name} did not raise")
with unshardfs.Loader(src) as ld2:
    assert ld2.chunks(0) is not None
try:
    ld2.chunks(0)
except ValueError:
    pass
else:
    sys.exit("closed by with: chunks did not raise")
print("survived")
"""


def test_closed_loader_raises_and_the_interpreter_survives():
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "lib", "python"))
    r = subprocess.run([sys.executable, "-c", MISUSE, SOURCES["sample"]],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != -11, "SIGSEGV: " + r.stderr[-2000:]
    assert r.returncode == 0, r.stderr[-2000:]
    assert "survived" in r.stdout
