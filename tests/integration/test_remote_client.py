"""The remote-storage client (lib/storage/remote.h) through build/tools/us-remote,
against moto's S3 server on a loopback port with signature checks on, and against a
small range-serving HTTP server of our own that injects faults.  Never the network.

moto enforces auth after INITIAL_NO_AUTH_ACTION_COUNT requests: the first three
create an IAM user, its policy and its access key; every request after that must
carry a valid SigV4 signature of that key (moto recomputes it with botocore), so
every listing and range read here also checks our signer.
"""
import concurrent.futures
import hashlib
import http.server
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from conftest import BUILD

US_REMOTE = os.path.join(BUILD, "tools", "us-remote")
MIB = 1 << 20
NMANY = 1010  # over 1000: ListObjectsV2 pages

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, log, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError("moto exited: %s" % log.read().decode())
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("moto did not start")


class Moto:
    def __init__(self, auth=True):
        self.port = free_port()
        self.endpoint = "http://127.0.0.1:%d" % self.port
        env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="3" if auth else "inf")
        # Its request log goes to a file: a pipe nobody reads would fill
        # and stop the server.
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            env=env, stdout=self.log, stderr=self.log)
        wait_port(self.port, self.proc, self.log)
        self.key_id = self.secret = "testing"
        if auth:
            self.make_user()
        self.s3 = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                               aws_access_key_id=self.key_id,
                               aws_secret_access_key=self.secret)

    def make_user(self):
        iam = boto3.client("iam", endpoint_url=self.endpoint, region_name="us-east-1",
                           aws_access_key_id="testing", aws_secret_access_key="testing")
        iam.create_user(UserName="tester")
        iam.put_user_policy(UserName="tester", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17",
             "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="tester")["AccessKey"]
        self.key_id, self.secret = key["AccessKeyId"], key["SecretAccessKey"]

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


BLOBS = {}


def blob(name, size):
    if name not in BLOBS:
        BLOBS[name] = random.Random(name).randbytes(size)
    return BLOBS[name]


OBJECTS = {
    "m/a.bin": 5 * MIB + 12345,
    "m/sub dir/b+c.bin": 3 * MIB,
    "m/nested/deep/x y+z&=~%.json": 1000,
    "m/\u00e9t\u00e9.txt": 10,
    "m/empty": 0,
    "m/dirmarker/": 0,      # a console "directory": skipped
    "m//double": 5,         # an empty component: skipped
    "m/./dot": 5,           # skipped
    "other/x": 3,           # outside the prefix
}


@pytest.fixture(scope="module")
def moto():
    m = Moto()
    try:
        m.s3.create_bucket(Bucket="ckpt")
        for k, n in OBJECTS.items():
            m.s3.put_object(Bucket="ckpt", Key=k, Body=blob(k, n))
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda i: m.s3.put_object(Bucket="ckpt", Key="many/k%04d" % i,
                                                  Body=b"%d" % i), range(NMANY)))
        yield m
    finally:
        m.close()


def env_for(m, **over):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=m.key_id, AWS_SECRET_ACCESS_KEY=m.secret,
               AWS_REGION="us-east-1", AWS_CONFIG_FILE="/nonexistent",
               AWS_SHARED_CREDENTIALS_FILE="/nonexistent")
    env.update(over)
    return {k: v for k, v in env.items() if v is not None}


def run(m, *args, env=None, check=True, timeout=120):
    cmd = [US_REMOTE, "--endpoint-url=" + m.endpoint, *args] if m else [US_REMOTE, *args]
    p = subprocess.run(cmd, env=env if env is not None else env_for(m), capture_output=True,
                       timeout=timeout)
    no_sanitizer_report(p.stderr)
    if check and p.returncode != 0:
        raise AssertionError("%s: rc %d: %s" % (cmd, p.returncode, p.stderr.decode()))
    return p


def no_sanitizer_report(err):
    # build-asan (UNSHARDFS_BUILD=build-asan): leaks and UB fail the test.
    assert b"Sanitizer" not in err and b"runtime error" not in err, err.decode()


def stats(p):
    m = re.search(rb"stats: (.*)", p.stderr)
    assert m, p.stderr
    return {k.decode(): int(v) for k, v in (kv.split(b"=") for kv in m.group(1).split())}


def listing(p):
    out = []
    for line in p.stdout.decode().splitlines():
        key, size, etag = line.rsplit(" ", 2)
        out.append((key, int(size), etag))
    return out


def boto_listing(m, prefix):
    out = []
    for page in m.s3.get_paginator("list_objects_v2").paginate(Bucket="ckpt", Prefix=prefix):
        for o in page.get("Contents", []):
            rel = o["Key"][len(prefix):]
            parts = rel.split("/")
            if rel and all(c not in ("", ".", "..") for c in parts):
                out.append((rel, o["Size"], o["ETag"]))
    return sorted(out)


def test_listing_equals_boto3(moto):
    got = listing(run(moto, "ls", "s3://ckpt/m"))
    assert got == boto_listing(moto, "m/")
    keys = [k for k, _, _ in got]
    assert "sub dir/b+c.bin" in keys and "nested/deep/x y+z&=~%.json" in keys
    assert "empty" in keys and not any(k.startswith("dirmarker") for k in keys)
    assert "double" not in keys and "dot" not in keys and keys == sorted(keys)


def test_pagination(moto):
    p = run(moto, "ls", "s3://ckpt/many/")
    got = listing(p)
    assert [k for k, _, _ in got] == ["k%04d" % i for i in range(NMANY)]
    assert got == boto_listing(moto, "many/")
    assert stats(p)["requests"] == 2  # two pages of 1000


def test_whole_bucket_and_single_object(moto):
    keys = [k for k, _, _ in listing(run(moto, "ls", "s3://ckpt"))]
    assert "other/x" in keys and "m/a.bin" in keys and len(keys) > NMANY
    p = run(moto, "ls", "s3://ckpt/m/sub dir/b+c.bin")
    assert listing(p) == [("b+c.bin", 3 * MIB, boto_listing(moto, "m/sub dir/")[0][2])]
    p = run(moto, "cat", "s3://ckpt/m/sub dir/b+c.bin", "b+c.bin", "100", "50")
    assert p.stdout == blob("m/sub dir/b+c.bin", 3 * MIB)[100:150]


def test_random_ranges(moto):
    data = blob("m/a.bin", OBJECTS["m/a.bin"])
    rng = random.Random(7)
    ranges = [(0, 1), (MIB - 3, 7), (len(data) - 5, 5), (0, len(data))]
    ranges += [(o, rng.randrange(1, len(data) - o)) for o in
               (rng.randrange(len(data)) for _ in range(6))]
    for off, n in ranges:
        p = run(moto, "--block-size=1048576", "cat", "s3://ckpt/m", "a.bin", str(off), str(n))
        assert p.stdout == data[off:off + n], (off, n)
    # Many threads through one small cache: same bytes, blocks fetched once or so.
    p = run(moto, "--block-size=262144", "--cache-bytes=2097152", "--chunk=65536",
            "--threads=8", "cat", "s3://ckpt/m", "a.bin")
    assert hashlib.sha256(p.stdout).digest() == hashlib.sha256(data).digest()
    s = stats(p)
    assert s["bytes_read"] == len(data)
    assert len(data) <= s["bytes_fetched"] < 2 * len(data)


def test_reads_after_fork(moto):
    # The daemon forks after open (fuse_daemonize): open must start no
    # thread, and the child must read through the handles open made.
    data = blob("m/a.bin", OBJECTS["m/a.bin"])
    p = run(moto, "--fork", "--block-size=1048576", "--threads=4", "--chunk=262144",
            "cat", "s3://ckpt/m", "a.bin")
    assert b"threads at fork" not in p.stderr
    assert p.stdout == data


def test_names_that_need_encoding(moto):
    k = "nested/deep/x y+z&=~%.json"
    p = run(moto, "cat", "s3://ckpt/m", k)
    assert p.stdout == blob("m/" + k, 1000)
    p = run(moto, "cat", "s3://ckpt/m", "\u00e9t\u00e9.txt")
    assert p.stdout == blob("m/\u00e9t\u00e9.txt", 10)
    assert run(moto, "cat", "s3://ckpt/m", "empty").stdout == b""


def test_past_the_end_fails(moto):
    p = run(moto, "cat", "s3://ckpt/m", "nested/deep/x y+z&=~%.json", "990", "20", check=False)
    assert p.returncode == 2 and p.stdout == b""


def test_rewritten_object_fails_not_mixed(moto):
    moto.s3.put_object(Bucket="ckpt", Key="rw/obj", Body=b"A" * (2 * MIB))
    proc = subprocess.Popen([US_REMOTE, "--endpoint-url=" + moto.endpoint, "--pause",
                             "--block-size=1048576", "cat", "s3://ckpt/rw", "obj"],
                            env=env_for(moto), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr.readline() == b"opened\n"
    moto.s3.put_object(Bucket="ckpt", Key="rw/obj", Body=b"B" * (2 * MIB))
    out, err = proc.communicate(b"\n", timeout=60)
    no_sanitizer_report(err)
    assert proc.returncode == 2, err
    assert b"B" not in out and out == b""
    assert b"read failed" in err and b"changed since open (HTTP 412" in err
    assert stats(subprocess.CompletedProcess([], 0, out, err))["retries"] == 0  # 412: no retry


def test_auth_refusals(moto):
    p = run(moto, "ls", "s3://ckpt/m", env=env_for(moto, AWS_SECRET_ACCESS_KEY="wrong"),
            check=False)
    assert p.returncode == 2 and b"SignatureDoesNotMatch" in p.stderr
    assert p.stderr.count(b"\n") == 1
    p = run(moto, "ls", "s3://ckpt/m", env=env_for(moto, AWS_ACCESS_KEY_ID="AKIANOTKNOWN"),
            check=False)
    assert p.returncode == 2 and b"InvalidAccessKeyId" in p.stderr
    assert b"AKIANOTKNOWN" in p.stderr
    # Anonymous requests are refused by an auth-enforcing store (moto 5.2
    # answers 500, its auth code wanting an Authorization header: retried).
    p = run(moto, "--no-sign-request", "--retries=1", "ls", "s3://ckpt/m", check=False)
    assert p.returncode == 2 and p.stderr.count(b"\n") == 1
    # No credentials at all: one line.
    p = run(moto, "ls", "s3://ckpt/m", env=env_for(moto, AWS_ACCESS_KEY_ID=None,
                                                   AWS_SECRET_ACCESS_KEY=None), check=False)
    assert p.returncode == 2 and b"no AWS credentials" in p.stderr
    assert p.stderr.count(b"\n") == 1


def test_profile_credentials(moto, tmp_path):
    cred = tmp_path / "credentials"
    cred.write_text("[default]\naws_access_key_id = AKIAWRONGWRONG\naws_secret_access_key = x\n"
                    "[work]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
                    % (moto.key_id, moto.secret))
    cfg = tmp_path / "config"
    cfg.write_text("[profile work]\nregion = us-east-1\n")
    env = env_for(moto, AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None, AWS_REGION=None,
                  AWS_SHARED_CREDENTIALS_FILE=str(cred), AWS_CONFIG_FILE=str(cfg))
    assert listing(run(moto, "--profile=work", "ls", "s3://ckpt/m", env=env)) == \
        boto_listing(moto, "m/")
    assert listing(run(moto, "ls", "s3://ckpt/m", env=dict(env, AWS_PROFILE="work"))) == \
        boto_listing(moto, "m/")
    p = run(moto, "ls", "s3://ckpt/m", env=env, check=False)  # default: wrong key
    assert p.returncode == 2 and b"InvalidAccessKeyId" in p.stderr
    p = run(moto, "--profile=nope", "ls", "s3://ckpt/m", env=env, check=False)
    assert p.returncode == 1 and b"nope" in p.stderr


def test_store_errors(moto):
    p = run(moto, "ls", "s3://nosuchbucket/x", check=False)
    assert p.returncode == 2 and b"no such bucket" in p.stderr
    p = run(moto, "ls", "s3://ckpt/nothing/here", check=False)
    assert p.returncode == 2 and b"nothing under s3://ckpt/nothing/here" in p.stderr
    p = run(moto, "ls", "s3://ckpt/a/../b", check=False)
    assert p.returncode == 1
    p = run(None, "--endpoint-url=http://127.0.0.1:%d" % free_port(), "--retries=2",
            "ls", "s3://ckpt/m", env=env_for(moto), check=False)
    assert p.returncode == 2 and b"cannot reach" in p.stderr
    assert stats_or_none(p) is None
    p = run(None, "ls", "ftp://x/y", env=env_for(moto), check=False)
    assert p.returncode == 1


def stats_or_none(p):
    return re.search(rb"stats:", p.stderr)


def test_disk_cache_survives(moto, tmp_path):
    cache = tmp_path / "cache"
    data = blob("m/a.bin", OBJECTS["m/a.bin"])
    args = ["--block-size=1048576", "--cache-dir=" + str(cache), "cat", "s3://ckpt/m", "a.bin"]
    p1 = run(moto, *args)
    assert p1.stdout == data and stats(p1)["disk_hits"] == 0
    nblocks = -(-len(data) // MIB)
    assert len([f for f in os.listdir(cache) if len(f) == 64]) == nblocks
    p2 = run(moto, *args)
    assert p2.stdout == data
    s = stats(p2)
    assert s["disk_hits"] == nblocks and s["requests"] == 1  # the listing only
    # A block file cut short is a miss, not bad bytes.
    victim = sorted(os.listdir(cache))[0]
    with open(cache / victim, "r+b") as f:
        f.truncate(10)
    p3 = run(moto, *args)
    assert p3.stdout == data and stats(p3)["disk_hits"] == nblocks - 1
    # Bounded: 2 MiB of cache keeps at most two 1 MiB blocks.
    small = tmp_path / "small"
    run(moto, "--block-size=1048576", "--cache-dir=" + str(small), "--cache-dir-size=2097152",
        "cat", "s3://ckpt/m", "a.bin")
    assert sum(os.path.getsize(small / f) for f in os.listdir(small)) <= 2 * MIB
    # A cache dir that cannot be created: one line at open.
    p = run(moto, "--cache-dir=/proc/nope/cache", "ls", "s3://ckpt/m", check=False)
    assert p.returncode == 1 and p.stderr.count(b"\n") == 1 and b"cache" in p.stderr


@pytest.fixture(scope="module")
def moto_open():
    # moto with auth on answers unsigned requests 500 (it wants an
    # Authorization header), public ACL or not: https URLs use one without.
    m = Moto(auth=False)
    try:
        m.s3.create_bucket(Bucket="ckpt")
        yield m
    finally:
        m.close()


def test_https_single_and_index(moto_open):
    moto = moto_open
    base = "hf/"
    shards = {"model-00001-of-00002.safetensors": 2 * MIB + 7,
              "model-00002-of-00002.safetensors": 100}
    index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                            "b": "model-00002-of-00002.safetensors",
                                            "c": "model-00001-of-00002.safetensors"}}
    files = {"config.json": b"{}", "model.safetensors.index.json": json.dumps(index).encode()}
    for n, size in shards.items():
        files[n] = blob(base + n, size)
    for n, body in files.items():
        moto.s3.put_object(Bucket="ckpt", Key=base + n, Body=body, ACL="public-read")
    url = moto.endpoint + "/ckpt/" + base
    p = run(None, "ls", url, env=env_for(moto))
    got = listing(p)
    assert [k for k, _, _ in got] == sorted(files)
    assert {k: s for k, s, _ in got} == {n: len(b) for n, b in files.items()}
    n = "model-00001-of-00002.safetensors"
    p = run(None, "--block-size=1048576", "cat", url, n, "1048570", "20", env=env_for(moto))
    assert p.stdout == files[n][1048570:1048590]
    # One object by its URL.
    p = run(None, "ls", url + n, env=env_for(moto))
    assert listing(p) == [(n, len(files[n]), got[1][2])]
    assert run(None, "cat", url + n, n, env=env_for(moto)).stdout == files[n]
    # An index naming a path outside the directory is refused.
    bad = {"weight_map": {"a": "../escape.safetensors"}}
    moto.s3.put_object(Bucket="ckpt", Key="bad/model.safetensors.index.json",
                       Body=json.dumps(bad).encode(), ACL="public-read")
    p = run(None, "ls", moto.endpoint + "/ckpt/bad/", env=env_for(moto), check=False)
    assert p.returncode == 2 and b"unsafe shard path" in p.stderr
    p = run(None, "ls", moto.endpoint + "/ckpt/none/", env=env_for(moto), check=False)
    assert p.returncode == 2 and b"no index" in p.stderr


# ---------------------------------------------------------------- fault injection

class Faulty(http.server.BaseHTTPRequestHandler):
    """Serves FILES with Range/If-Match; FAULTS is a list of one-shot faults
    consumed by range GETs: '503', 'short', 'badrange', 'stall'."""
    protocol_version = "HTTP/1.1"
    FILES = {}
    FAULTS = []
    DELAY = 0.0  # seconds before each range reply: a far-away store
    LOCK = threading.Lock()
    ACTIVE = 0   # range replies in progress, and the most at once
    PEAK = 0
    PEERS = set()  # client (address, port) pairs: one per connection

    def log_message(self, *a):
        pass

    def _head(self, code, length, extra=()):
        self.send_response(code)
        self.send_header("Content-Length", str(length))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()

    # Paths under /noetag/ have no ETag, only a Last-Modified (MTIMES).
    MTIMES = {}

    def _validators(self, body):
        lm = self.MTIMES.get(self.path, "Sun, 06 Nov 1994 08:49:37 GMT")
        if self.path.startswith("/noetag/"):
            return [("Last-Modified", lm)]
        return [("ETag", '"%s"' % hashlib.md5(body).hexdigest()), ("Last-Modified", lm)]

    def do_HEAD(self):
        self.PEERS.add(self.client_address)
        if self.path.startswith("/nohead/"):  # a presigned GET URL
            return self._head(403, 0)
        body = self.FILES.get(self.path)
        if body is None:
            return self._head(404, 0)
        self._head(200, len(body), self._validators(body))

    def do_GET(self):
        self.PEERS.add(self.client_address)
        body = self.FILES.get(self.path)
        if body is None:
            return self._head(404, 0)
        etag = '"%s"' % hashlib.md5(body).hexdigest()
        if self.headers.get("If-Match") not in (None, etag):
            return self._head(412, 0)
        ius = self.headers.get("If-Unmodified-Since")
        lm = self.MTIMES.get(self.path, "Sun, 06 Nov 1994 08:49:37 GMT")
        if ius is not None and ius != lm:  # exact: enough for a test
            return self._head(412, 0)
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if not m:
            self._head(200, len(body), [("ETag", etag)])
            return self.wfile.write(body)
        a, b = int(m.group(1)), int(m.group(2))
        if a >= len(body):
            return self._head(416, 0, [("Content-Range", "bytes */%d" % len(body))])
        with self.LOCK:
            fault = self.FAULTS.pop(0) if self.FAULTS else None
        if fault == "503":
            return self._head(503, 0)
        with self.LOCK:
            Faulty.ACTIVE += 1
            Faulty.PEAK = max(Faulty.PEAK, Faulty.ACTIVE)
        time.sleep(self.DELAY)
        with self.LOCK:
            Faulty.ACTIVE -= 1
        part = body[a:b + 1]
        cr = "bytes %d-%d/%d" % (a, b, len(body))
        if fault == "badrange":
            cr = "bytes %d-%d/%d" % (a, b, len(body) + 1)
        self._head(206, len(part), [*self._validators(body), ("Content-Range", cr)])
        if fault == "short":
            self.wfile.write(part[:len(part) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if fault == "stall":
            self.wfile.write(part[:10])
            self.wfile.flush()
            time.sleep(4)
            self.close_connection = True
            return
        self.wfile.write(part)


@pytest.fixture(scope="module")
def faulty():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Faulty)
    Faulty.FILES["/d/blob.bin"] = random.Random(3).randbytes(3 * MIB)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield "http://127.0.0.1:%d" % srv.server_address[1]
    srv.shutdown()


def fcat(url, *args, off=0, n=MIB):
    p = subprocess.run([US_REMOTE, "--block-size=1048576", *args, "cat", url + "/d/blob.bin",
                        "blob.bin", str(off), str(n)], capture_output=True, timeout=60)
    no_sanitizer_report(p.stderr)
    return p


@pytest.mark.parametrize("fault", ["503", "short"])
def test_transient_faults_are_retried(faulty, fault):
    data = Faulty.FILES["/d/blob.bin"]
    Faulty.FAULTS[:] = [fault, fault]
    p = fcat(faulty)
    assert p.returncode == 0, p.stderr
    assert p.stdout == data[:MIB]
    assert stats(p)["retries"] == 2


def test_retries_run_out_then_next_read_works(faulty):
    Faulty.FAULTS[:] = ["503"] * 3
    p = fcat(faulty, "--retries=2")
    assert p.returncode == 2 and p.stdout == b"" and b"HTTP 503" in p.stderr
    assert stats(p)["retries"] == 2
    Faulty.FAULTS[:] = []
    assert fcat(faulty, "--retries=2").returncode == 0


def test_content_range_mismatch_is_eio(faulty):
    Faulty.FAULTS[:] = ["badrange"]
    p = fcat(faulty)
    assert p.returncode == 2 and p.stdout == b""
    assert b"changed since open (another size)" in p.stderr


def test_stalled_body_times_out(faulty):
    Faulty.FAULTS[:] = ["stall"]
    t = time.time()
    p = fcat(faulty, "--timeout=1")
    assert p.returncode == 0, p.stderr
    assert p.stdout == Faulty.FILES["/d/blob.bin"][:MIB]
    assert stats(p)["retries"] == 1 and time.time() - t < 30


def test_no_etag_uses_last_modified(faulty):
    # A server without ETags: the recorded Last-Modified is the precondition.
    data = random.Random(5).randbytes(2 * MIB)
    Faulty.FILES["/noetag/f.bin"] = data
    Faulty.MTIMES["/noetag/f.bin"] = "Mon, 01 Jan 2024 00:00:00 GMT"
    proc = subprocess.Popen([US_REMOTE, "--pause", "--block-size=1048576", "cat",
                             faulty + "/noetag/f.bin", "f.bin"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr.readline() == b"opened\n"
    Faulty.MTIMES["/noetag/f.bin"] = "Tue, 02 Jan 2024 00:00:00 GMT"
    out, err = proc.communicate(b"\n", timeout=60)
    no_sanitizer_report(err)
    assert proc.returncode == 2 and out == b""
    p = subprocess.run([US_REMOTE, "cat", faulty + "/noetag/f.bin", "f.bin"],
                       capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout == data
    assert listing(subprocess.run([US_REMOTE, "ls", faulty + "/noetag/f.bin"],
                                  capture_output=True))[0][2] == ""


def test_presigned_url_without_head(faulty):
    # HEAD refused (signed for GET only): the size comes from bytes=0-0.
    data = random.Random(9).randbytes(MIB + 3)
    url = "/nohead/m.safetensors?X-Amz-Signature=ab%2Fc&X-Amz-Expires=60"
    Faulty.FILES[url] = data
    p = subprocess.run([US_REMOTE, "ls", faulty + url], capture_output=True, timeout=60)
    no_sanitizer_report(p.stderr)
    assert p.returncode == 0, p.stderr
    assert listing(p) == [("m.safetensors", len(data), '"%s"' % hashlib.md5(data).hexdigest())]
    p = subprocess.run([US_REMOTE, "--block-size=65536", "cat", faulty + url, "m.safetensors"],
                       capture_output=True, timeout=60)
    assert p.returncode == 0 and p.stdout == data
    Faulty.FILES["/nohead/empty?sig=1"] = b""
    p = subprocess.run([US_REMOTE, "ls", faulty + "/nohead/empty?sig=1"], capture_output=True)
    assert p.returncode == 0 and listing(p)[0][:2] == ("empty", 0), p.stderr
    p = subprocess.run([US_REMOTE, "ls", faulty + "/d/?x=1"], capture_output=True)
    assert p.returncode == 1


def test_sequential_prefetch(faulty):
    data = Faulty.FILES["/d/blob.bin"]
    nblocks = len(data) // 262144
    Faulty.DELAY = 0.1
    Faulty.PEAK = 0
    try:
        p = subprocess.run([US_REMOTE, "--block-size=262144", "--chunk=131072", "cat",
                            faulty + "/d/blob.bin", "blob.bin"], capture_output=True,
                           timeout=60)
        no_sanitizer_report(p.stderr)
    finally:
        Faulty.DELAY = 0.0
    assert p.returncode == 0 and p.stdout == data
    s = stats(p)
    # Every block fetched about once although the workers ran ahead, and
    # several at once (a one-thread cat alone would make one at a time).
    # (+10: the stream's first 128 KiB read is no run yet, so it fetches its
    # eight 16 KiB pages, in parallel, before the blocks take over: remote.c
    # SMALL_PAGE; and the object's HEAD.)
    assert s["requests"] <= nblocks + 10
    assert Faulty.PEAK >= 3, Faulty.PEAK
    # One read of many blocks fetches them in parallel too.
    Faulty.DELAY = 0.1
    Faulty.PEAK = 0
    try:
        p = fcat(faulty, "--block-size=262144", "--chunk=%d" % (3 * MIB), off=0, n=3 * MIB)
    finally:
        Faulty.DELAY = 0.0
    assert p.returncode == 0 and p.stdout == data[:3 * MIB]
    assert Faulty.PEAK >= 3 and stats(p)["requests"] == 1 + nblocks, Faulty.PEAK
    # Random reads do not prefetch: one block each.
    Faulty.PEAK = 0
    for off in (2 * MIB, 5000, MIB + 7):
        p = fcat(faulty, "--block-size=262144", off=off, n=100)
        assert p.returncode == 0 and stats(p)["requests"] == 2  # HEAD + one block
    assert Faulty.PEAK == 1


def test_connections_are_reused(faulty):
    data = Faulty.FILES["/d/blob.bin"]
    Faulty.PEERS.clear()
    p = subprocess.run([US_REMOTE, "--block-size=262144", "--connections=2", "cat",
                        faulty + "/d/blob.bin", "blob.bin"], capture_output=True, timeout=60)
    no_sanitizer_report(p.stderr)
    assert p.returncode == 0 and p.stdout == data
    # A HEAD and 12 range GETs over at most the two connections allowed.
    assert stats(p)["requests"] == 1 + len(data) // 262144
    assert 1 <= len(Faulty.PEERS) <= 2, Faulty.PEERS
