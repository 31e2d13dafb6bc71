"""What a hostile HTTP/S3 server sends as metadata (issue 28): control bytes in listed
keys and ETags, XML comments, objects without validators, and documents built to cost
time or memory (docs/remote.md, "What a server's replies can and cannot do").

A small server on loopback answers HEAD and ranged GET for OBJECTS and ListObjectsV2 for
LISTING (pages of XML, built on demand). It ignores If-Match and If-Unmodified-Since, as
a naive server does: the client's own reply checks are what is tested.
"""
import errno
import http.server
import json
import os
import struct
import subprocess
import tempfile
import threading
import time
import urllib.parse

import pytest

from conftest import BUILD, mount, refuse, require_binary

MIB = 1 << 20
DATE = "Mon, 01 Jan 2024 00:00:00 GMT"


def safetensors_bytes(n_floats):
    hdr = json.dumps({"w": {"dtype": "F32", "shape": [n_floats],
                            "data_offsets": [0, 4 * n_floats]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    return struct.pack("<Q", len(hdr)) + hdr + bytes(range(256)) * (n_floats // 64)


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    OBJECTS = {}   # path -> (body, [(header, value)])
    LISTING = {}   # bucket path -> function(page number) -> (xml bytes, more?)

    def log_message(self, *a):
        pass

    def _send(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        o = self.OBJECTS.get(urllib.parse.urlsplit(self.path).path)
        if o is None:
            return self._send(404)
        self.send_response(200)
        for k, v in o[1]:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(o[0])))
        self.end_headers()

    def do_GET(self):
        u = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(u.query)
        if "list-type" in q:
            page = int(q.get("continuation-token", ["0"])[0])
            return self._send(200, self.LISTING[u.path](page)[0])
        o = self.OBJECTS.get(u.path)
        if o is None:
            return self._send(404)
        body, hdrs = o
        r = self.headers.get("Range", "")
        if not r.startswith("bytes="):
            return self._send(200, body, hdrs)
        a, b = (int(x) for x in r[6:].split("-"))
        b = min(b, len(body) - 1)
        self._send(206, body[a:b + 1], [*hdrs, ("Content-Range", f"bytes {a}-{b}/{len(body)}")])


@pytest.fixture(scope="module")
def srv():
    s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{s.server_address[1]}"
    s.shutdown()


def s3_opts(url):
    return (f"--endpoint-url={url}", "--no-sign-request")


def contents(key, size, etag='"e"'):
    return (f"<Contents><Key>{key}</Key><Size>{size}</Size><ETag>{etag}</ETag>"
            f"<LastModified>2024-01-01T00:00:00.000Z</LastModified></Contents>")


def page(records, token=None):
    tail = (f"<IsTruncated>true</IsTruncated><NextContinuationToken>{token}"
            "</NextContinuationToken>" if token else "<IsTruncated>false</IsTruncated>")
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult '
            'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>'
            + "".join(records) + tail + "</ListBucketResult>").encode()


def one_page(bucket, records):
    H.LISTING["/" + bucket] = lambda n: (page(records), False)


def put_model(path, extra=(("ETag", '"m"'),)):
    H.OBJECTS[path] = (safetensors_bytes(1024), list(extra))
    return len(H.OBJECTS[path][0])


def peak_mib(argv, timeout=120):
    """Run argv (a refusal expected); its exit status, stderr and peak RSS in MiB."""
    with tempfile.NamedTemporaryFile() as t:
        p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", t.name, *argv],
                           capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return p.returncode, p.stderr.decode(errors="replace"), int(open(t.name).read().split()[-1]) / 1024


# Sanitizer builds hold freed memory in quarantine: their peaks are not the program's.
PEAKS = "asan" not in os.path.basename(BUILD)


def refuse_argv(*args):
    mnt = tempfile.mkdtemp(prefix="unshardfs-hostile-")
    return [require_binary(), "-f", *args, mnt]


# ------------------------------------------------------------- control bytes, XML

def test_etag_with_crlf_is_refused(srv):
    size = put_model("/crlf/p/model.safetensors")
    one_page("crlf", [contents("p/model.safetensors", size,
                               '"e"&#13;&#10;X-Smuggled: 1')])
    path, why = refuse("s3://crlf/p", *s3_opts(srv))
    assert "ETag" in why and "control" in why


def test_key_with_control_bytes_is_refused_and_shown_escaped(srv):
    size = put_model("/ctl/p/model.safetensors")
    one_page("ctl", [contents("p/model.safetensors", size),
                     contents("p/evil&#27;[31m.json", 2)])
    path, why = refuse("s3://ctl/p", *s3_opts(srv))
    assert "p/evil\\x1b[31m.json" in why and "control character" in why


def test_comment_neither_adds_nor_drops_a_file(srv):
    size = put_model("/cmt/p/model.safetensors")
    H.OBJECTS["/cmt/p/config.json"] = (b"{}", [("ETag", '"c"')])
    # An unterminated record inside a comment: a scanner that reads tags in
    # comments took p/ghost.json and lost the record after it.
    ghost = ("<!-- <Contents><Key>p/ghost.json</Key><Size>2</Size><ETag>\"g\"</ETag>"
             "<LastModified>2024-01-01T00:00:00Z</LastModified> -->")
    one_page("cmt", [ghost, contents("p/config.json", 2, '"c"'),
                     '<?pi <Contents><Key>p/pi.json</Key></Contents>?>',
                     contents("p/model.safetensors", size, '"m"')])
    with mount("s3://cmt/p", *s3_opts(srv)) as mnt:
        names = set(os.listdir(mnt))
    assert "config.json" in names and "model.safetensors" in names
    assert "ghost.json" not in names and "pi.json" not in names


@pytest.mark.parametrize("doc", [
    '<Contents note="<Key>">',                      # '<' in an attribute value
    "<![CDATA[<Contents></Contents>]]>",            # CDATA
    "<Contents><Key>p/a</Key>",                     # unterminated record
])
def test_malformed_listing_is_refused(srv, doc):
    size = put_model("/mal/p/model.safetensors")
    one_page("mal", [contents("p/model.safetensors", size), doc])
    path, why = refuse("s3://mal/p", *s3_opts(srv))
    assert "ListObjectsV2" in why


# ------------------------------------------------------------------- validators

@pytest.mark.parametrize("hdrs", [[], [("ETag", 'W/"weak"')]], ids=["none", "weak"])
def test_https_object_without_validator_is_refused(srv, hdrs):
    put_model("/nv/model.safetensors", hdrs)
    path, why = refuse(srv + "/nv/model.safetensors?X-Amz-Signature=s3cr3t")
    assert "neither ETag nor Last-Modified" in why and "cannot tell if it changes" in why
    assert "s3cr3t" not in path + why


def test_userinfo_is_not_shown(srv):
    p = subprocess.run([require_binary(), "-f", "http://user:hunter2@127.0.0.1:1/x/m.safetensors",
                        tempfile.mkdtemp()], capture_output=True, text=True, timeout=10)
    assert p.returncode == 1 and "hunter2" not in p.stderr and "***" in p.stderr, p.stderr


def test_last_modified_only_rewrite_is_eio_not_mixed(srv):
    body = safetensors_bytes(768 * 1024)  # 3 MiB of data
    H.OBJECTS["/lm/model.safetensors"] = (body, [("Last-Modified", DATE)])
    with mount(srv + "/lm/model.safetensors", "--block-size=1M") as mnt:
        new = bytes(b ^ 0xFF for b in body)
        H.OBJECTS["/lm/model.safetensors"] = (new, [("Last-Modified",
                                                     "Tue, 02 Jan 2024 00:00:00 GMT")])
        with pytest.raises(OSError) as e:
            with open(os.path.join(mnt, "tensors", "w"), "rb") as f:
                f.read()
        assert e.value.errno == errno.EIO


# ----------------------------------------------------------------------- budgets

def index_refusal(srv, name, weight_map, pad=None):
    doc = {"metadata": {}, "weight_map": weight_map}
    if pad is not None:
        doc["pad"] = pad
    H.OBJECTS[f"/{name}/model.safetensors.index.json"] = (
        json.dumps(doc, separators=(",", ":")).encode(), [("ETag", '"i"')])
    t = time.monotonic()
    rc, err, peak = peak_mib(refuse_argv(f"{srv}/{name}/"))
    return rc, err, peak, time.monotonic() - t


def test_index_dedup_is_not_quadratic(srv):
    n = 30000
    # The shards are absent: the mount is refused at the first HEAD after the
    # names are deduplicated, so the time is the index's. The peer has the same
    # number of tensors naming one shard.
    rc, err, _, t_many = index_refusal(srv, "dd", {f"t{i}": f"s{i:06d}.safetensors"
                                                   for i in range(n)})
    assert rc == 2 and "no such object" in err, err
    rc, err, _, t_one = index_refusal(srv, "d1", {f"t{i}": "s.safetensors" for i in range(n)})
    assert rc == 2, err
    print(f"dedup: {t_many:.2f} s, peer {t_one:.2f} s")
    assert t_many < 2.0 and t_many < 3 * t_one + 0.5, (t_many, t_one)


def test_big_index_memory_is_bounded(srv):
    # 22 MiB of 2-byte values: cJSON would take ~40 times that (975 MiB before).
    rc, err, peak, _ = index_refusal(srv, "bigpad", {"a": "s.safetensors"},
                                     pad=[0] * (11 * MIB))
    print(f"2-byte values: peak {peak:.0f} MiB: {err.strip()}")
    assert rc == 2 and "MiB of memory to parse" in err, err
    assert not PEAKS or peak < 128, peak
    # A real-shaped index of 22 MiB (270k tensors, names of 80 bytes) is parsed.
    wm = {f"model.layers.{i}.mlp.experts.{i % 64}.gate_proj.weight": "model-00001-of-00002.safetensors"
          for i in range(270000)}
    rc, err, peak, _ = index_refusal(srv, "bigreal", wm)
    print(f"real-shaped index: peak {peak:.0f} MiB")
    assert rc == 2 and "no such object" in err, err
    assert not PEAKS or peak < 256, peak


def test_listing_of_long_keys_stays_bounded(srv):
    n, per = 200000, 1000
    pad = "k" * 1000

    def pages(i):
        recs = [contents(f"p/{pad}{j:08d}", 1) for j in range(i * per, (i + 1) * per)]
        more = (i + 1) * per < n
        return page(recs, str(i + 1) if more else None), more
    H.LISTING["/long"] = pages
    rc, err, peak = peak_mib(refuse_argv("s3://long/p", *s3_opts(srv)), timeout=300)
    print(f"long keys: peak {peak:.0f} MiB: {err.strip()}")
    assert rc == 2 and "over 64 MiB" in err, err
    assert not PEAKS or peak < 256, peak
