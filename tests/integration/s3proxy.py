"""A fault-injecting reverse HTTP proxy on loopback, between the daemon and moto.

    with FaultProxy("http://127.0.0.1:MOTO") as px:      # px.url: --endpoint-url
        px.add(Fault("status", count=3, ranged_only=True))  # the next 3 range GETs: 503
        ...
        px.stats()                                          # requests, body bytes, ...

Each client connection gets its own thread and its own upstream connection: HTTP/1.1
keep-alive is kept on both sides (a client's connection stays open across requests
unless it says `Connection: close`). A request goes upstream with its request line and
headers exactly as the client sent them (the Host header included: a SigV4 signature
covers it) and its body byte for byte; the response comes back with its status and
headers as moto sent them, framed by Content-Length.

Faults (each matches GETs with a Range header only, or every request, and applies to
the next `count` matching responses, or to all while installed with count=None):
- status:  answer STATUS (503) with an S3 error body without asking upstream (a 5xx burst)
- delay:   sleep SECONDS before sending the response (a slow server)
- trickle: send the body CHUNK bytes at a time, SECONDS apart
- reset:   send the headers and AFTER bytes of the body, then close with SO_LINGER 0
           (the client sees a TCP RST mid-body)
- short:   send the headers (the full Content-Length) and AFTER bytes, then close
           normally (FIN): a short body
"""
import http.client
import socket
import socketserver
import struct
import threading
import time
import urllib.parse

HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
       "trailer", "upgrade", "content-length"}


class Fault:
    KINDS = ("status", "delay", "trickle", "reset", "short")

    def __init__(self, kind, count=1, ranged_only=True, status=503, seconds=0.0,
                 chunk=1024, after=None, path_contains=None):
        assert kind in self.KINDS, kind
        self.kind = kind
        self.count = count          # None: every matching response while installed
        self.ranged_only = ranged_only
        self.status = status
        self.seconds = seconds
        self.chunk = chunk
        self.after = after          # reset/short: body bytes sent first (None: half)
        self.path_contains = path_contains
        self.hits = 0

    def matches(self, method, path, headers):
        if self.count is not None and self.hits >= self.count:
            return False
        if self.ranged_only and not (method == "GET" and _header(headers, "range")):
            return False
        if self.path_contains and self.path_contains not in path:
            return False
        return True

    def __repr__(self):
        return f"Fault({self.kind}, count={self.count}, hits={self.hits})"


def _header(headers, name):
    for k, v in headers:
        if k.lower() == name:
            return v
    return None


class _Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.open_connections = getattr(self, "open_connections", 0)
        self.requests = 0
        self.range_gets = 0
        self.gets = 0
        self.body_bytes = 0      # response body bytes written to clients
        self.upstream_bytes = 0  # response body bytes read from upstream
        self.faults = 0
        self.connections = 0
        self.max_conn_requests = 0  # most requests served on one client connection
        # live counts survive a reset; their maxima start again from them
        self.inflight = getattr(self, "inflight", 0)  # received, not yet answered
        self.max_inflight = self.inflight
        self.max_open_connections = self.open_connections
        self.log = []            # (method, path, range, status, sent)
        self.requests_log = []   # (method, path, [(header, value), ...]) as received

    def snapshot(self):
        with self.lock:
            skip = ("lock", "log", "requests_log")
            return {k: v for k, v in self.__dict__.items() if k not in skip} | {
                "log": list(self.log), "requests_log": list(self.requests_log)}


class _Handler(socketserver.BaseRequestHandler):
    def setup(self):
        if hasattr(self.request, "do_handshake"):
            try:
                self.request.settimeout(10)
                self.request.do_handshake()
                self.request.settimeout(None)
            except OSError:
                pass  # handle() then reads nothing and ends the connection
        self.rfile = self.request.makefile("rb")
        self.up = None
        self.served = 0
        st = self.server.px.stats
        with st.lock:
            st.connections += 1
            st.open_connections += 1
            st.max_open_connections = max(st.max_open_connections, st.open_connections)

    def finish(self):
        st = self.server.px.stats
        with st.lock:
            st.open_connections -= 1
        try:
            self.rfile.close()
        except OSError:
            pass
        if self.up is not None:
            self.up.close()

    def handle(self):
        px = self.server.px
        while True:
            try:
                req = self._read_request()
            except (OSError, ValueError):
                return
            if req is None:
                return
            method, target, version, headers, body = req
            self.served += 1
            with px.stats.lock:
                px.stats.requests += 1
                px.stats.requests_log.append((method, target, headers))
                px.stats.inflight += 1
                px.stats.max_inflight = max(px.stats.max_inflight, px.stats.inflight)
                px.stats.max_conn_requests = max(px.stats.max_conn_requests, self.served)
                if method == "GET":
                    px.stats.gets += 1
                    if _header(headers, "range"):
                        px.stats.range_gets += 1
            fault = px._take_fault(method, target, headers)
            keep = version == "HTTP/1.1" and \
                (_header(headers, "connection") or "").lower() != "close"
            try:
                if not self._respond(method, target, headers, body, fault, keep):
                    return
            except OSError:
                return
            finally:
                with px.stats.lock:
                    px.stats.inflight -= 1
            if not keep:
                return

    # -- request side

    def _read_request(self):
        line = self.rfile.readline(65537)
        while line in (b"\r\n", b"\n"):
            line = self.rfile.readline(65537)
        if not line:
            return None
        method, target, version = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
        headers = []
        while True:
            h = self.rfile.readline(65537)
            if h in (b"\r\n", b"\n", b""):
                break
            k, _, v = h.decode("latin-1").rstrip("\r\n").partition(":")
            headers.append((k, v.strip()))
        body = b""
        if (_header(headers, "expect") or "").lower() == "100-continue":
            # botocore waits (1 s) for this before sending a PUT's body; upstream's
            # own 100 is skipped by http.client
            self.request.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if (_header(headers, "transfer-encoding") or "").lower() == "chunked":
            body = self._read_chunked_raw()
        else:
            n = int(_header(headers, "content-length") or 0)
            if n:
                body = self.rfile.read(n)
        return method, target, version, headers, body

    def _read_chunked_raw(self):
        """A chunked request body, kept framed as it came (forwarded as is)."""
        out = bytearray()
        while True:
            size_line = self.rfile.readline(65537)
            out += size_line
            n = int(size_line.split(b";")[0].strip(), 16)
            if n == 0:
                while True:  # trailers, then the empty line
                    t = self.rfile.readline(65537)
                    out += t
                    if t in (b"\r\n", b"\n", b""):
                        return bytes(out)
            out += self.rfile.read(n + 2)

    # -- response side

    def _upstream(self):
        if self.up is None:
            u = self.server.px.upstream
            self.up = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        return self.up

    def _forward(self, method, target, headers, body):
        """Send the request upstream unchanged; return the http.client response.
        Retries once on a stale keep-alive connection."""
        for attempt in (0, 1):
            c = self._upstream()
            try:
                c.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
                for k, v in headers:
                    c.putheader(k, v)
                c.endheaders(body if body else None)
                return c.getresponse()
            except (http.client.HTTPException, OSError):
                c.close()
                self.up = None
                if attempt:
                    raise

    def _respond(self, method, target, headers, body, fault, keep):
        px = self.server.px
        sock = self.request
        if fault is not None and fault.kind == "status":
            msg = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>'
                   f'{"SlowDown" if fault.status == 503 else "InternalError"}</Code>'
                   f'<Message>injected by the test proxy</Message></Error>').encode()
            head = (f"HTTP/1.1 {fault.status} {http.client.responses.get(fault.status, '')}"
                    f"\r\nContent-Type: application/xml\r\nContent-Length: {len(msg)}\r\n"
                    f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n")
            # logged before sending: a client that has its answer finds it in the log
            px._log(method, target, headers, fault.status, len(msg))
            sock.sendall(head.encode("latin-1") + (msg if method != "HEAD" else b""))
            return True
        resp = self._forward(method, target, headers, body)
        data = resp.read()  # the body, whatever upstream's framing was
        if resp.will_close:
            self.up.close()
            self.up = None
        with px.stats.lock:
            px.stats.upstream_bytes += len(data)
        out_headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP]
        length = len(data)
        if method == "HEAD":
            length = int(resp.getheader("content-length") or 0)
            data = b""
        head = f"HTTP/1.1 {resp.status} {resp.reason}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in out_headers)
        head += f"Content-Length: {length}\r\n"
        head += f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n"
        head = head.encode("latin-1")
        if fault is not None and fault.kind == "delay":
            time.sleep(fault.seconds)
        if fault is not None and fault.kind in ("reset", "short") and data:
            after = len(data) // 2 if fault.after is None else min(fault.after, len(data) - 1)
            px._count_body(after)
            px._log(method, target, headers, resp.status, after)
            sock.sendall(head + data[:after])
            if fault.kind == "reset":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
            else:
                sock.shutdown(socket.SHUT_RDWR)
            return False
        px._log(method, target, headers, resp.status, len(data))
        if fault is not None and fault.kind == "trickle":
            sock.sendall(head)
            for i in range(0, len(data), fault.chunk):
                time.sleep(fault.seconds)
                sock.sendall(data[i:i + fault.chunk])
                px._count_body(min(fault.chunk, len(data) - i))
        else:
            px._count_body(len(data))
            sock.sendall(head + data)
        return True


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    tls = None  # an ssl.SSLContext: serve https (the handshake runs in the handler thread)

    def get_request(self):
        sock, addr = super().get_request()
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_side=True,
                                        do_handshake_on_connect=False)
        return sock, addr


class FaultProxy:
    def __init__(self, upstream_url, port=0, tls=None):
        """@tls: (certfile, keyfile): listen for https (upstream stays plain)."""
        self.upstream = urllib.parse.urlsplit(upstream_url)
        self.stats = _Stats()
        self.lock = threading.Lock()
        self.faults = []
        self.server = _Server(("127.0.0.1", port), _Handler)
        self.server.px = self
        if tls is not None:
            import ssl
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.server.tls = ctx
        self.port = self.server.server_address[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    # -- faults

    def add(self, fault):
        with self.lock:
            self.faults.append(fault)
        return fault

    def clear(self):
        with self.lock:
            self.faults = []

    def _take_fault(self, method, path, headers):
        with self.lock:
            for f in self.faults:
                if f.matches(method, path, headers):
                    f.hits += 1
                    with self.stats.lock:
                        self.stats.faults += 1
                    return f
        return None

    # -- counting

    def _count_body(self, n):
        with self.stats.lock:
            self.stats.body_bytes += n

    def _log(self, method, target, headers, status, sent):
        with self.stats.lock:
            self.stats.log.append((method, target, _header(headers, "range"), status, sent))

    def snapshot(self):
        return self.stats.snapshot()

    def reset_stats(self):
        with self.stats.lock:
            self.stats.reset()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
