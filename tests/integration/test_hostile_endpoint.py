"""A hostile endpoint (tests/integration/hostile.py, loopback only) against the remote
store: where requests may go, what a request may carry, how long one may take, and
what a message, the log or /proc/mounts may show (issue 28; docs/remote.md "Trust
model").

- redirects: followed only for unsigned requests, only to the same scheme, host and
  port, never to another port or host (that server sees no request)
- --timeout bounds each try, all of it: a server trickling 2 KiB/s cannot stretch it
- secrets: a presigned URL's signature and token never reach /proc/mounts, the
  daemon's messages or a refusal; user:password@ is refused without the password; an
  error body quoting the session token is not printed
- the documented option ranges (--retries 1 to 100) and the true reason of a refusal
  (a listing page over 16 MiB says so; a read failing at mount says why)
"""
import io
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import BINARY, mount, read_log, refuse, run_cli
from hostile import Hostile

SECRETS = ("SIGSECRET0123456789", "TOKSECRET0123456789", "CREDSECRET0123456789")
PRESIGNED = ("?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=%s"
             "&X-Amz-Security-Token=%s&X-Amz-Signature=%s"
             % (SECRETS[2], SECRETS[1], SECRETS[0]))


def st_bytes(nbytes=1 << 20):
    """A safetensors file of one float32 tensor of NBYTES bytes, and the tensor."""
    from safetensors.numpy import save
    t = np.arange(nbytes // 4, dtype=np.float32)
    return save({"w": t}), t


def tensor_range(h, size):
    """A range GET past the header (over 64 KiB: a tensor's block), or None: the
    header, read at mount, is served plainly."""
    r = h.byte_range(size)
    return r if r and r[1] - r[0] >= 65536 else None


def read_in_child(path, timeout):
    """Read PATH whole in a child process; (returncode, seconds, stderr)."""
    code = ("import sys\ntry:\n open(sys.argv[1],'rb').read()\nexcept OSError as e:\n"
            " print(e.errno, file=sys.stderr); sys.exit(3)\n")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, time.monotonic() - t0, p.stderr


def no_secret(text):
    for s in SECRETS:
        assert s not in text, "a secret was shown: %r" % text


# ---------------------------------------------------------------- redirects

def test_redirect_to_another_port_is_not_followed():
    data, _ = st_bytes(4096)
    with Hostile() as a, Hostile() as b:
        b.put("/model.safetensors", data)
        a.on("/model.safetensors", lambda h: h.redirect(b.url + "/model.safetensors"))
        path, why = refuse(a.url + "/model.safetensors", "--retries=1", timeout=20)
        assert "redirect" in why and "same scheme, host and port" in why, why
        assert b.seen() == [], "a request went to a host the user did not give"


def test_redirect_to_another_scheme_is_not_followed():
    data, _ = st_bytes(4096)
    with Hostile() as a:
        a.put("/model.safetensors", data)
        a.on("/x.safetensors", lambda h: h.redirect(
            "https://127.0.0.1:%d/model.safetensors" % a.port))
        path, why = refuse(a.url + "/x.safetensors", "--retries=1", timeout=20)
        assert "redirect" in why, why
        assert not a.seen(lambda m, p, h: p.startswith("/model")), a.requests


def test_redirect_to_the_same_origin_is_followed(tmp_path):
    data, t = st_bytes(1 << 16)
    with Hostile() as a:
        a.put("/model.safetensors", data)
        a.on("/old.safetensors", lambda h: h.redirect("/model.safetensors", 301))
        with mount(a.url + "/old.safetensors") as mnt:
            with open(os.path.join(mnt, "tensors", "w"), "rb") as f:
                assert f.read() == t.tobytes()


def test_a_signed_request_is_never_redirected(monkeypatch):
    data, _ = st_bytes(4096)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "SECRETKEYEXAMPLE0123456789")
    with Hostile() as a:
        a.put("/b2/ckpt/model.safetensors", data)
        a.on("/b", lambda h: h.redirect(a.url + "/b2?list-type=2&prefix=ckpt/"))
        path, why = refuse("s3://b/ckpt", "--endpoint-url=" + a.url, "--retries=1",
                           "--region=us-east-1", timeout=20)
        assert "signed request is never redirected" in why, why
        assert not a.seen(lambda m, p, h: p.startswith("/b2")), a.requests


# ---------------------------------------------------------------- timeouts

def test_timeout_bounds_a_trickling_server():
    """2 KiB/s is above the old low-speed limit (1 KiB/s): each try lasted 10 x
    --timeout. Now one read fails within (retries + 1) x timeout, twice (the kernel
    retries a failed read once), plus slack."""
    data, _ = st_bytes(1 << 20)

    def slow(h):
        r = tensor_range(h, len(data))
        if not r:
            return False
        a_, b_ = r
        return h.trickle(data[a_:b_ + 1], 2048, 206, [
            ("ETag", '"e1"'), ("Content-Range", "bytes %d-%d/%d" % (a_, b_, len(data)))])

    with Hostile() as a:
        a.put("/model.safetensors", data)
        a.on("/model.safetensors", slow)
        with mount(a.url + "/model.safetensors", "--timeout=2", "--retries=1",
                   "--block-size=256K") as mnt:
            rc, secs, err = read_in_child(os.path.join(mnt, "tensors", "w"), timeout=60)
        assert rc == 3 and err.strip() == "5", (rc, err)  # EIO
        # (1 + 1) tries x 2 s, twice (the kernel retries), backoff: well under
        # the 40 s it took before (20 s a try)
        assert secs < 15, "a read took %.1f s with --timeout=2 --retries=1" % secs


# ---------------------------------------------------------------- secrets

def test_presigned_url_secrets_stay_out_of_mounts_and_messages():
    data, t = st_bytes(4096)
    with Hostile() as a:
        a.put("/model.safetensors", data)
        url = a.url + "/model.safetensors" + PRESIGNED
        with mount(url) as mnt:
            with open("/proc/mounts") as f:
                mounts = f.read()
            with open("/proc/self/mountinfo") as f:
                mounts += f.read()
            assert a.url + "/model.safetensors" in mounts  # the fsname, public part
            no_secret(mounts)
            with open(os.path.join(mnt, "tensors", "w"), "rb") as f:
                assert f.read() == t.tobytes()
        # the query did reach the server: it is the URL the user gave
        assert any(SECRETS[0] in p for _, p, _ in a.requests)
        path, why = refuse(a.url + "/missing.safetensors" + PRESIGNED, timeout=20)
        no_secret(path + why)
        assert "REDACTED" in path + why
        r = run_cli("inspect", a.url + "/missing.safetensors" + PRESIGNED)
        assert r.returncode == 2
        no_secret(r.stdout + r.stderr)


def test_userinfo_refusal_does_not_print_the_password():
    r = run_cli("inspect", "http://alice:hunter2pass@127.0.0.1:9/model.safetensors")
    assert r.returncode != 0
    assert "hunter2pass" not in r.stdout + r.stderr, r.stderr
    assert "***@127.0.0.1" in r.stderr, r.stderr


def test_an_error_body_quoting_the_session_token_is_not_printed(monkeypatch):
    token = "FQoGZXIvYXdzEXAMPLESESSIONTOKEN0123456789abcdef"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "SECRETKEYEXAMPLE0123456789")
    monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    body = ("<Error><Code>InvalidRequest</Code><Message>bad token %s</Message></Error>"
            % token[5:40]).encode()
    with Hostile() as a:
        a.on("/b", lambda h: h.answer(400, body))
        path, why = refuse("s3://b/ckpt", "--endpoint-url=" + a.url, "--retries=1",
                           "--region=us-east-1", timeout=20)
        assert token[5:40] not in why and "not shown" in why, why
        # it was sent, to the endpoint the user named
        assert {k.lower(): v for k, v in a.requests[0][2].items()}.get("x-amz-security-token") == token


# ---------------------------------------------------------------- ranges, reasons

def test_retries_take_the_documented_range():
    data, _ = st_bytes(4096)
    with Hostile() as a:
        a.put("/model.safetensors", data)
        with mount(a.url + "/model.safetensors", "--retries=100") as mnt:
            assert os.path.exists(os.path.join(mnt, "tensors", "w"))
    r = run_cli("inspect", "--retries=101", "http://127.0.0.1:9/model.safetensors")
    assert r.returncode == 1 and "100" in r.stderr, r.stderr


def test_a_listing_page_over_its_bound_says_so():
    big = b"<ListBucketResult>" + b" " * (17 << 20) + b"</ListBucketResult>"
    with Hostile() as a:
        a.listing("/b", [], raw=big)
        path, why = refuse("s3://b/ckpt", "--endpoint-url=" + a.url, "--no-sign-request",
                           "--retries=1", timeout=30)
        assert "over 16 MiB" in why, why


def test_a_read_that_fails_at_mount_says_why():
    data, _ = st_bytes(4096)
    with Hostile() as a:
        a.put("/model.safetensors", data)
        a.on("/model.safetensors",
             lambda h: h.command == "GET" and h.answer(503, b"<Error><Code>SlowDown</Code></Error>"))
        path, why = refuse(a.url + "/model.safetensors", "--retries=1", timeout=20)
        assert why != "Input/output error" and ("503" in why or "HTTP" in why), why


def test_a_long_path_stays_in_the_refusal(tmp_path):
    d = tmp_path
    for i in range(6):
        d = d / ("d%d_" % i + "x" * 240)
    d.mkdir(parents=True)
    (d / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{bad json")
    path, why = refuse(str(d / "model.safetensors"))
    assert "model.safetensors" in path or "model.safetensors" in why, (path, why)


def test_without_an_etag_every_reply_must_carry_the_recorded_date():
    """An object known only by its Last-Modified: a range reply without one could be
    any version (the server may ignore If-Unmodified-Since), so it is EIO."""
    data, _ = st_bytes(1 << 20)

    def no_date(h):
        r = tensor_range(h, len(data))
        if not r:
            return False  # the header, at mount: served with its date
        a_, b_ = r
        return h.answer(206, data[a_:b_ + 1], [
            ("Content-Range", "bytes %d-%d/%d" % (a_, b_, len(data)))])

    with Hostile() as a:
        a.put("/model.safetensors", data, etag=None)
        a.on("/model.safetensors", no_date)
        with mount(a.url + "/model.safetensors", "--retries=1",
                   "--block-size=256K") as mnt:
            rc, secs, err = read_in_child(os.path.join(mnt, "tensors", "w"), timeout=60)
        assert rc == 3 and err.strip() == "5", (rc, err)
