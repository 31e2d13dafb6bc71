"""The fault proxy of the remote-SOURCE tests (s3proxy.py), checked with real boto3
against the real moto server: each fault does to a real S3 client what test_s3_faults.py
relies on it doing to the daemon, and without a fault the proxy is invisible
(keep-alive kept, headers and bodies passed through unchanged, bytes counted)."""

import hashlib
import http.server
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError, ResponseStreamingError

import s3env
from s3proxy import Fault, FaultProxy

DATA = os.urandom(300_000)


@pytest.fixture
def obj(s3, bucket):
    s3.put_object(Bucket=bucket, Key="obj.bin", Body=DATA, ACL="public-read")  # raw GETs too
    return bucket, "obj.bin"


def boto(px, attempts=1, read_timeout=10):
    # total_max_attempts counts the first try (max_attempts would not); standard mode
    # retries 5xx answers and resets
    return s3env.client(px.url, retries={"total_max_attempts": attempts, "mode": "standard"},
                        read_timeout=read_timeout, connect_timeout=5)


def get(c, b, k, rng=None):
    kw = {"Range": rng} if rng else {}
    return c.get_object(Bucket=b, Key=k, **kw)["Body"].read()


def test_passthrough_keepalive_and_counts(fault_proxy, obj):
    b, k = obj
    c = boto(fault_proxy)
    c.put_object(Bucket=b, Key="via-proxy", Body=DATA[:1000])  # a PUT with a body
    assert get(c, b, "via-proxy") == DATA[:1000]
    fault_proxy.reset_stats()
    for i in range(10):
        assert get(c, b, k, f"bytes={i * 1000}-{i * 1000 + 999}") == DATA[i * 1000:i * 1000 + 1000]
    s = fault_proxy.snapshot()
    assert s["requests"] == 10 and s["range_gets"] == 10
    assert s["body_bytes"] == 10_000 == s["upstream_bytes"]
    assert s["connections"] == 0 and s["max_conn_requests"] == 12, \
        "keep-alive: the PUT's connection carried every request"
    assert s["max_inflight"] == 1 and s["open_connections"] == 1
    assert all(st == 206 for _m, _p, _r, st, _n in s["log"])
    assert get(c, b, k) == DATA
    head = c.head_object(Bucket=b, Key=k)
    assert head["ContentLength"] == len(DATA)


def test_headers_pass_through_unchanged():
    """The request line, every header (Host included, in the client's case and order)
    and the body reach upstream as the client sent them."""
    seen = {}

    class Echo(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_PUT(self):
            seen["path"] = self.path
            seen["headers"] = list(self.headers.items())
            seen["body"] = self.rfile.read(int(self.headers["Content-Length"]))
            out = json.dumps({"ok": 1}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.send_header("ETag", '"abc"')
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *a):
            pass

    up = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    try:
        with FaultProxy(f"http://127.0.0.1:{up.server_address[1]}") as px:
            s = socket.create_connection(("127.0.0.1", px.port))
            req = (b"PUT /bkt/a%2Fb?x=1 HTTP/1.1\r\nHost: my.bucket.example:9000\r\n"
                   b"X-Amz-Date: 20260101T000000Z\r\nauthorization: AWS4-HMAC-SHA256 sig\r\n"
                   b"Content-Length: 5\r\n\r\nhello")
            s.sendall(req + req)  # two requests, pipelined on one connection
            got = b""
            s.settimeout(5)
            while got.count(b'{"ok": 1}') < 2:
                chunk = s.recv(65536)
                assert chunk, got
                got += chunk
            s.close()
    finally:
        up.shutdown()
    assert got.startswith(b"HTTP/1.1 200 ")
    assert b'ETag: "abc"' in got
    assert seen["path"] == "/bkt/a%2Fb?x=1"
    assert seen["headers"][:4] == [("Host", "my.bucket.example:9000"),
                                   ("X-Amz-Date", "20260101T000000Z"),
                                   ("authorization", "AWS4-HMAC-SHA256 sig"),
                                   ("Content-Length", "5")]
    assert seen["body"] == b"hello"


def test_5xx_burst_shorter_and_longer_than_the_retries(fault_proxy, obj):
    b, k = obj
    c = boto(fault_proxy, attempts=4)
    fault_proxy.add(Fault("status", count=3))
    assert get(c, b, k, "bytes=0-9999") == DATA[:10000]
    s = fault_proxy.snapshot()
    assert [st for *_x, st, _n in s["log"]] == [503, 503, 503, 206]
    fault_proxy.add(Fault("status", count=4, status=500))
    with pytest.raises(ClientError) as ei:
        get(c, b, k, "bytes=0-9999")
    assert ei.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    assert get(c, b, k, "bytes=0-9999") == DATA[:10000]  # the burst is over


def test_ranged_only_leaves_other_requests_alone(fault_proxy, obj):
    b, k = obj
    c = boto(fault_proxy)
    fault_proxy.add(Fault("status", count=None, ranged_only=True))
    assert get(c, b, k) == DATA                       # whole-object GET: untouched
    c.head_object(Bucket=b, Key=k)                     # HEAD: untouched
    with pytest.raises(ClientError):
        get(c, b, k, "bytes=0-1")
    fault_proxy.clear()
    fault_proxy.add(Fault("status", count=1, ranged_only=False))
    with pytest.raises(ClientError):
        c.head_object(Bucket=b, Key=k)
    assert get(c, b, k, "bytes=0-1") == DATA[:2]


def test_delay_under_and_over_the_client_timeout(fault_proxy, obj):
    b, k = obj
    fault_proxy.add(Fault("delay", seconds=0.5, count=1))
    t = time.monotonic()
    assert get(boto(fault_proxy, read_timeout=3), b, k, "bytes=0-99") == DATA[:100]
    assert time.monotonic() - t >= 0.5
    fault_proxy.add(Fault("delay", seconds=3, count=1))
    t = time.monotonic()
    with pytest.raises(ReadTimeoutError):
        get(boto(fault_proxy, read_timeout=1), b, k, "bytes=0-99")
    assert time.monotonic() - t < 2.5


def test_trickle(fault_proxy, obj):
    b, k = obj
    fault_proxy.add(Fault("trickle", chunk=10_000, seconds=0.05, count=1))
    t = time.monotonic()
    assert get(boto(fault_proxy), b, k, "bytes=0-99999") == DATA[:100_000]
    assert time.monotonic() - t >= 10 * 0.05 * 0.9


def _root_errno(e):
    while e is not None:
        if isinstance(e, OSError) and e.errno:
            return e.errno
        e = e.__cause__ or e.__context__ or (e.args[1] if len(e.args) > 1 and
                                              isinstance(e.args[1], BaseException) else None)
    return None


def test_reset_mid_body_is_a_tcp_reset(fault_proxy, obj):
    b, k = obj
    fault_proxy.add(Fault("reset", after=5000, count=1))
    with pytest.raises(ResponseStreamingError) as ei:
        get(boto(fault_proxy), b, k, "bytes=0-99999")
    assert "reset" in str(ei.value).lower()
    assert fault_proxy.snapshot()["log"][-1][-1] == 5000
    assert get(boto(fault_proxy), b, k, "bytes=0-99999") == DATA[:100_000]
    # and at the socket level: ECONNRESET, not an orderly end
    fault_proxy.add(Fault("reset", after=5000, count=1))
    s = socket.create_connection(("127.0.0.1", fault_proxy.port), timeout=10)
    s.sendall(f"GET /{b}/{k} HTTP/1.1\r\nHost: 127.0.0.1:{fault_proxy.port}\r\nRange: bytes=0-99999\r\n\r\n".encode())
    with pytest.raises(ConnectionResetError):
        while s.recv(65536):
            pass
    s.close()


def test_short_body(fault_proxy, obj):
    b, k = obj
    fault_proxy.add(Fault("short", after=7000, count=1))
    with pytest.raises(ResponseStreamingError) as ei:
        get(boto(fault_proxy), b, k, "bytes=0-99999")
    assert "IncompleteRead" in str(ei.value)
    s = socket.create_connection(("127.0.0.1", fault_proxy.port), timeout=10)
    fault_proxy.add(Fault("short", after=7000, count=1))
    s.sendall(f"GET /{b}/{k} HTTP/1.1\r\nHost: 127.0.0.1:{fault_proxy.port}\r\nRange: bytes=0-99999\r\n\r\n".encode())
    got = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    head, _, body = got.partition(b"\r\n\r\n")
    assert b"Content-Length: 100000" in head and len(body) == 7000


def test_anonymous_get_needs_public_read(moto_server, s3, bucket):
    """What the http:// tests rely on: moto answers an unsigned GET of a public-read
    object, and refuses (403) one of a private object."""
    s3.put_object(Bucket=bucket, Key="pub", Body=b"abc", ACL="public-read")
    s3.put_object(Bucket=bucket, Key="priv", Body=b"abc")
    assert urllib.request.urlopen(f"{moto_server.url}/{bucket}/pub").read() == b"abc"
    with pytest.raises(urllib.error.HTTPError) as ei:
        urllib.request.urlopen(f"{moto_server.url}/{bucket}/priv")
    assert ei.value.code == 403


def test_moto_enforces_if_match(s3, bucket):
    """What the rewrite test relies on: a range GET whose If-Match is an old ETag is
    refused (412), so a correct daemon can only answer EIO."""
    etag = s3.put_object(Bucket=bucket, Key="o", Body=b"one" * 100)["ETag"]
    assert s3.get_object(Bucket=bucket, Key="o", Range="bytes=0-2",
                         IfMatch=etag)["Body"].read() == b"one"
    s3.put_object(Bucket=bucket, Key="o", Body=b"two" * 100)
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key="o", Range="bytes=0-2", IfMatch=etag)
    assert ei.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert hashlib.md5(b"two" * 100).hexdigest() in s3.head_object(Bucket=bucket,
                                                                    Key="o")["ETag"]



def test_tls_front(moto_server, obj, tmp_path):
    """tls=(cert, key): the proxy serves https with that certificate (the https SOURCE
    case); a client that trusts it reads the object, one that does not is refused."""
    import ssl
    from test_s3 import _self_signed
    b, k = obj
    crt, key = _self_signed(str(tmp_path))
    with FaultProxy(moto_server.url, tls=(crt, key)) as px:
        assert px.url.startswith("https://")
        ctx = ssl.create_default_context(cafile=crt)
        with urllib.request.urlopen(f"{px.url}/{b}/{k}", context=ctx) as r:
            assert r.read() == DATA
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"{px.url}/{b}/{k}",
                                   context=ssl.create_default_context())
