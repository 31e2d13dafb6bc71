"""A read-only S3 endpoint over a local directory, for tests/bench/s3_bench.py.

moto (the tests' endpoint) keeps every object as one Python value and copies the whole
object to answer any range GET: 0.12 s for 64 KiB of a 250 MB object, about 1 s for a
2 GB one. That measures moto, not a remote SOURCE, and no real store behaves so. This
server answers a range with a pread of just those bytes, as S3 or MinIO serve from
disk, so the benchmark's figures are the client's: the requests it makes, their sizes,
their parallelism.

    ROOT/BUCKET/KEY...      files served as s3://BUCKET/KEY

What it speaks, path-style only, no authentication (it checks nothing): ListObjectsV2
and ListObjects (v1, which s3fs uses) with prefix, delimiter, max-keys and
continuation; HEAD and GET of objects with Range (206, Content-Range) and If-Match
(412); HEAD of a bucket. ETags are "<size>-<mtime ns>" in hex: stable, and changed by a
rewrite. HTTP/1.1 keep-alive, a thread per connection, TCP_NODELAY (without it every
response under one segment waits for the client's delayed ACK: a mount's 16 KiB pages
took 6 s instead of 0.27 s).

One Python process serves every request under one GIL, at about 0.3 ms of CPU each:
that measures CPython, not a client.  (It listened with socketserver's backlog of 5 at
first: of 16 connections opened at once some lost their SYN and waited 1 s for its
retransmission, a mount 1.2 s instead of 0.2 s; now 128.)  When nginx is installed (Debian's
nginx-light, tools/setup.sh), FileS3 puts it in front, as S3's or MinIO's own front end
is: nginx serves every object GET and HEAD (Range, If-Match, sendfile, a process per
CPU), and passes only listings and misses to the Python server, which names each object
by nginx's own ETag ("<mtime s>-<size>" in hex), so that If-Match agrees.

S3SERVE_LATENCY_MS=N makes the Python server wait N ms before each answer, a store's
time to first byte (front=None only: nginx has no such knob).
"""
import email.utils
import html
import os
import re
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer

import gen  # noqa: E402 (tests/bench: the free-port helper)


LATENCY = float(os.environ.get("S3SERVE_LATENCY_MS", "0")) / 1000


def _etag(st):
    # nginx's: "%xT-%xO", last modification in whole seconds, then the size
    return '"%x-%x"' % (int(st.st_mtime), st.st_size)


def _keys(root, bucket, prefix):
    base = os.path.join(root, bucket)
    out = []
    for d, _dirs, files in os.walk(base, followlinks=True):
        for f in files:
            p = os.path.join(d, f)
            key = os.path.relpath(p, base).replace(os.sep, "/")
            if key.startswith(prefix):
                out.append(key)
    return sorted(out)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *_a):
        pass

    def _send(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, code, s3code):
        body = f"<Error><Code>{s3code}</Code><Message>{s3code}</Message></Error>".encode()
        self._send(code, body, [("Content-Type", "application/xml")])

    def _split(self):
        u = urllib.parse.urlsplit(self.path)
        parts = urllib.parse.unquote(u.path).lstrip("/").split("/", 1)
        q = dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
        return parts[0], parts[1] if len(parts) > 1 else "", q

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        if LATENCY:
            time.sleep(LATENCY)  # a store's time to first byte (S3: 10-30 ms)
        bucket, key, q = self._split()
        root = self.server.root
        if not bucket or "/" in bucket or not os.path.isdir(os.path.join(root, bucket)):
            return self._error(404, "NoSuchBucket")
        if not key:
            if self.command == "HEAD":
                return self._send(200)
            return self._list(bucket, q)
        path = os.path.join(root, bucket, *key.split("/"))
        if ".." in key.split("/") or not os.path.isfile(path):
            return self._error(404, "NoSuchKey")
        self._object(path)

    def _list(self, bucket, q):
        prefix, delim = q.get("prefix", ""), q.get("delimiter", "")
        maxk = max(1, min(int(q.get("max-keys", "1000")), 1000))
        after = q.get("continuation-token") or q.get("start-after") or q.get("marker", "")
        keys = [k for k in _keys(self.server.root, bucket, prefix) if k > after]
        items, prefixes, last = [], [], None
        for k in keys:
            if len(items) + len(prefixes) >= maxk:
                break
            rest = k[len(prefix):]
            if delim and delim in rest:
                cp = prefix + rest.split(delim, 1)[0] + delim
                if cp not in prefixes:
                    prefixes.append(cp)
                last = k
                continue
            items.append(k)
            last = k
        truncated = bool(keys) and last is not None and last != keys[-1]
        body = ["<?xml version=\"1.0\" encoding=\"UTF-8\"?>",
                "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">",
                f"<Name>{bucket}</Name><Prefix>{html.escape(prefix)}</Prefix>",
                f"<MaxKeys>{maxk}</MaxKeys><KeyCount>{len(items) + len(prefixes)}</KeyCount>",
                f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"]
        if truncated:
            tok = html.escape(last)
            body.append(f"<NextContinuationToken>{tok}</NextContinuationToken>"
                        f"<NextMarker>{tok}</NextMarker>")
        base = os.path.join(self.server.root, bucket)
        for k in items:
            st = os.stat(os.path.join(base, *k.split("/")))
            iso = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(st.st_mtime))
            body.append(f"<Contents><Key>{html.escape(k)}</Key><LastModified>{iso}"
                        f"</LastModified><ETag>{html.escape(_etag(st))}</ETag>"
                        f"<Size>{st.st_size}</Size><StorageClass>STANDARD</StorageClass>"
                        f"</Contents>")
        for p in prefixes:
            body.append(f"<CommonPrefixes><Prefix>{html.escape(p)}</Prefix></CommonPrefixes>")
        body.append("</ListBucketResult>")
        self._send(200, "".join(body).encode(), [("Content-Type", "application/xml")])

    def _object(self, path):
        st = os.stat(path)
        tag, size = _etag(st), st.st_size
        im = self.headers.get("If-Match")
        if im and im.strip() != tag and im.strip() != "*":
            return self._error(412, "PreconditionFailed")
        hdrs = [("ETag", tag), ("Accept-Ranges", "bytes"),
                ("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True)),
                ("Content-Type", "application/octet-stream")]
        rng = self.headers.get("Range")
        start, end, code = 0, size - 1, 200
        if rng:
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
            if not m or (not m.group(1) and not m.group(2)):
                return self._error(416, "InvalidRange")
            if m.group(1):
                start = int(m.group(1))
                end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            else:
                start, end = max(0, size - int(m.group(2))), size - 1
            if start >= size or start > end:
                return self._error(416, "InvalidRange")
            code = 206
            hdrs.append(("Content-Range", f"bytes {start}-{end}/{size}"))
        n = end - start + 1 if size else 0
        self.send_response(code)
        for k, v in hdrs:
            self.send_header(k, v)
        self.send_header("Content-Length", str(n))
        self.end_headers()
        if self.command == "HEAD" or n == 0:
            return
        with open(path, "rb") as f:
            off = start
            while off <= end:
                chunk = os.pread(f.fileno(), min(1 << 20, end + 1 - off), off)
                if not chunk:
                    break
                self.wfile.write(chunk)
                off += len(chunk)


class _Server(socketserver.ThreadingMixIn, HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default listen backlog is 5: a client opening 16 connections at
    # once had SYNs dropped and waited 1 s for their retransmission
    request_queue_size = 128


NGINX_CONF = """
daemon off;
worker_processes 2;
{user}
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    types {{ }}
    default_type application/octet-stream;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 600s;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    upstream py {{ server 127.0.0.1:{py}; keepalive 16; }}
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{
            error_page 418 = @py;
            if ($args) {{ return 418; }}
            try_files $uri @py;
        }}
        location @py {{
            proxy_pass http://py;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


class FileS3:
    """The server in its own process (its threads must not share the benchmark's
    GIL), on a free loopback port, behind nginx when there is one (front=None: the
    Python server alone): .url, .front, .stop()."""

    def __init__(self, root, front="auto"):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), root],
                                     stdout=subprocess.PIPE, text=True)
        port = self.proc.stdout.readline().strip()
        if not port.isdigit():
            self.proc.kill()
            raise RuntimeError("s3serve.py did not start")
        self.url = f"http://127.0.0.1:{port}"
        self.front, self.nginx, self.prefix = None, None, None
        exe = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
        if front == "auto" and exe:
            try:
                self._start_nginx(exe, os.path.abspath(root), int(port))
            except Exception:
                self.stop()
                raise

    def _start_nginx(self, exe, root, py):
        self.prefix = tempfile.mkdtemp(prefix="s3serve-nginx-")
        port = gen._free_port()
        user = "user root;" if os.geteuid() == 0 else ""  # the bench's temp dirs are 0700
        conf = os.path.join(self.prefix, "nginx.conf")
        with open(conf, "w") as f:
            f.write(NGINX_CONF.format(user=user, prefix=self.prefix, py=py, port=port,
                                      root=root))
        self.nginx = subprocess.Popen([exe, "-p", self.prefix, "-c", conf],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if self.nginx.poll() is not None or time.monotonic() > deadline:
                    log = open(os.path.join(self.prefix, "error.log")).read()[-400:]
                    raise RuntimeError("nginx did not start: " + log)
                time.sleep(0.02)
        self.url, self.front = f"http://127.0.0.1:{port}", "nginx"

    def stop(self):
        if self.nginx is not None:
            self.nginx.terminate()
            try:
                self.nginx.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.nginx.kill()
                self.nginx.wait()
            shutil.rmtree(self.prefix, ignore_errors=True)
            self.nginx = None
        self.proc.terminate()
        self.proc.wait(timeout=10)


if __name__ == "__main__":
    httpd = _Server(("127.0.0.1", 0), Handler)
    httpd.root = sys.argv[1]
    print(httpd.server_address[1], flush=True)
    httpd.serve_forever()
