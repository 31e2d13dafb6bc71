"""A hostile HTTP endpoint on loopback: it serves objects with range reads, answers S3's
ListObjectsV2, and misbehaves on demand. Every request is recorded, so a test can check
what the client sent (and where it did not go).

    with Hostile() as srv:                        # srv.url: http://127.0.0.1:PORT
        srv.put("/b/ckpt/model.safetensors", data, etag='"abc"')
        srv.on("/b/ckpt/model.safetensors", lambda h: h.redirect("http://..."))
        srv.listing("/b", [("ckpt/model.safetensors", len(data), '"abc"')])
        srv.requests                              # [(method, path, headers), ...]

A behaviour is a function of the request handler that answers (returns True) or lets the
object be served (returns False). Nothing here leaves loopback.
"""
import http.server
import socketserver
import threading
import time
import urllib.parse
from email.utils import formatdate
from xml.sax.saxutils import escape


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    # -- answers a behaviour can give
    def answer(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        return True

    def redirect(self, location, status=302):
        return self.answer(status, b"", [("Location", location)])

    def trickle(self, body, rate, status=200, headers=()):
        """Send BODY at RATE bytes a second (a slow-loris server)."""
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        step = max(1, rate // 10)
        try:
            for i in range(0, len(body), step):
                self.wfile.write(body[i:i + step])
                self.wfile.flush()
                time.sleep(0.1)
        except OSError:
            pass
        return True

    def byte_range(self, size):
        """The Range asked for, (first, last) with last cut to SIZE, or None."""
        rng = self.headers.get("Range", "")
        if not rng.startswith("bytes="):
            return None
        a, b = rng[6:].split("-")
        return int(a), min(int(b), size - 1)

    # -- the plain object server
    def serve_object(self):
        srv = self.server.owner
        path = urllib.parse.urlsplit(self.path).path
        obj = srv.objects.get(path)
        if obj is None:
            return self.answer(404, b"<Error><Code>NoSuchKey</Code></Error>")
        data, extra = obj
        r = self.byte_range(len(data))
        if r:
            a, b = r
            return self.answer(206, data[a:b + 1], extra + [
                ("Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))])
        return self.answer(200, data, extra)

    def handle_any(self):
        srv = self.server.owner
        path = urllib.parse.urlsplit(self.path).path
        with srv.lock:
            srv.requests.append((self.command, self.path, dict(self.headers)))
        fn = srv.behaviours.get(path) or srv.behaviours.get("*")
        if fn and fn(self):
            return
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        if "list-type" in query and path in srv.listings:
            return self.answer(200, srv.listings[path](query),
                               [("Content-Type", "application/xml")])
        self.serve_object()

    do_GET = do_HEAD = handle_any


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64


class Hostile:
    def __init__(self):
        self.objects = {}
        self.behaviours = {}
        self.listings = {}
        self.requests = []
        self.lock = threading.Lock()
        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.httpd.owner = self
        self.port = self.httpd.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def put(self, path, data, etag='"e1"', last_modified=True, headers=()):
        extra = list(headers)
        if etag:
            extra.append(("ETag", etag))
        if last_modified:
            extra.append(("Last-Modified", formatdate(1700000000, usegmt=True)))
        self.objects[path] = (data, extra)

    def on(self, path, fn):
        self.behaviours[path] = fn

    def listing(self, bucket_path, entries, raw=None):
        """ListObjectsV2 of BUCKET_PATH: ENTRIES are (key, size, etag); RAW, if given,
        is the whole XML body (a hostile one)."""
        def body(query):
            if raw is not None:
                return raw.encode() if isinstance(raw, str) else raw
            prefix = query.get("prefix", [""])[0]
            items = "".join(
                "<Contents><Key>%s</Key><LastModified>2024-01-01T00:00:00.000Z"
                "</LastModified><ETag>%s</ETag><Size>%d</Size></Contents>"
                % (escape(k), escape(e), n)
                for k, n, e in entries if k.startswith(prefix))
            return ('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult>'
                    "<Name>b</Name><Prefix>%s</Prefix><KeyCount>%d</KeyCount>"
                    "<IsTruncated>false</IsTruncated>%s</ListBucketResult>"
                    % (escape(prefix), len(entries), items)).encode()
        self.listings[bucket_path] = body

    def seen(self, pred=lambda m, p, h: True):
        with self.lock:
            return [r for r in self.requests if pred(*r)]
