"""Remote SOURCEs (issue 21, docs/remote.md): a checkpoint in S3 mounts exactly like
the same checkpoint on local disk.

Every checkpoint family of tests/fixtures is uploaded to a real moto server (boto3,
symlinks followed) and mounted twice: from s3://BUCKET/PREFIX (--endpoint-url, path-style)
and from the local directory. The two trees must be the same, file for file and byte
for byte: names, kinds, sizes, link counts and hard-link groups (ties), the xattrs of
every entry below the root, and the content of every file (model.safetensors,
pytorch_model.bin, tensors/*, optimizer views, passthrough files). Then: one object as
SOURCE (s3:// and plain http:// of moto's path-style URL), an http(s) directory with an
index, inspect and export of a URL, the Python loader from a URL and from the remote
mount, the options as -o NAME=VALUE, credentials from a profile, --no-sign-request, and
the refusals (bad URL: 1; no bucket, empty prefix, access denied, unreachable endpoint:
2, one line, nothing mounted, within a bound).

A mount that fails is a failure here, never a skip: until the storage layer and the
S3 client are built these tests fail at the mount.
"""
import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading

import pytest

import s3env
from conftest import (BUILD, FIXTURES, REPO, REFUSAL_RE, SOURCES, hub_snapshot, mount,
                      refuse, require_binary, run_cli, tensor_bytes, unmount)
from s3env import remote_opts

BUCKET = "unshardfs-fixtures"
MOUNT_TIMEOUT = 60  # s: a remote mount fetches metadata first

# family -> (local SOURCE, extra options given to both mounts)
FAMILIES = {
    "safetensors-index": (SOURCES["sample"], ()),
    "safetensors-noindex": (SOURCES["noindex"], ()),
    "hubcache-snapshot": (hub_snapshot(), ()),
    "dcp-llama-fsdp2": (os.path.join(FIXTURES, "torch", "llama_fsdp2"), ()),
    "dcp-fsdp2-optim": (os.path.join(FIXTURES, "torch", "fsdp2_2rank"), ()),
    "dcp-zstd": (os.path.join(FIXTURES, "torch", "zstd_pyzstd"), ()),
    "dcp-ties-gpt2": (os.path.join(FIXTURES, "ties", "gpt2_fsdp2"), ()),
    "dcp-ties-llama-optim": (os.path.join(FIXTURES, "ties", "llama_fsdp2_optim"), ()),
    "accelerate-fsdp": (os.path.join(FIXTURES, "torch", "accelerate"), ()),
    "torch-bin-index": (os.path.join(FIXTURES, "torch", "bin_sharded"), ()),
    "deepspeed-z2": (os.path.join(FIXTURES, "deepspeed", "z2_2rank"), ()),
    "deepspeed-z3-bf16": (os.path.join(FIXTURES, "deepspeed", "z3_3rank_bf16"), ()),
    "deepspeed-universal": (os.path.join(FIXTURES, "deepspeed", "uc_z3_2rank"), ()),
    "torchtitan-llama3": (os.path.join(FIXTURES, "torchtitan", "llama3", "ckpt", "step-1"),
                          ()),
    "torchtitan-llama3-recipe": (
        os.path.join(FIXTURES, "torchtitan", "llama3", "ckpt", "step-1"),
        ("--recipe=torchtitan-llama3",
         "--overlay=" + os.path.join(FIXTURES, "torchtitan", "llama3", "hf"))),
}
# one object as SOURCE: key -> local file
SINGLE = {
    "single/model.safetensors": os.path.join(FIXTURES, "single", "model.safetensors"),
    "single_bin/pytorch_model.bin": os.path.join(FIXTURES, "torch", "single_bin",
                                                 "pytorch_model.bin"),
    "script/ddp_compile.pt": os.path.join(FIXTURES, "torch", "ddp_compile.pt"),
}


def prefix_of(family):
    return "fx/" + family


@pytest.fixture(scope="session")
def fixtures_bucket(s3):
    """Every family and single object uploaded once (public-read: the http:// cases
    GET them unsigned)."""
    s3env.make_bucket(s3, BUCKET)
    seen = {}
    for fam, (local, _opts) in FAMILIES.items():
        if local not in seen:
            seen[local] = fam
        s3env.upload_tree(s3, local, BUCKET, prefix_of(fam), acl="public-read")
    for key, local in SINGLE.items():
        s3env.upload_file(s3, local, BUCKET, key, acl="public-read")
    return BUCKET


def s3_url(family):
    return f"s3://{BUCKET}/{prefix_of(family)}"


# ---------------------------------------------------------------------------- tree walk

def _xattrs(p):
    try:
        names = os.listxattr(p, follow_symlinks=False)
    except OSError as e:
        return {"<error>": e.errno}
    return {n: os.getxattr(p, n, follow_symlinks=False) for n in sorted(names)}


def _sha(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)


def tree(mnt, content=True):
    """{rel: (kind, size, nlink, xattrs, sha256)} of everything under @mnt (its root's
    xattrs left out: user.unshardfs.source differs by design), and the hard-link groups
    as a set of frozensets of paths."""
    out, by_ino = {}, {}
    for dp, dns, fns in os.walk(mnt):
        dns.sort()
        for n in sorted(dns) + sorted(fns):
            p = os.path.join(dp, n)
            rel = os.path.relpath(p, mnt)
            st = os.lstat(p)
            kind = stat.S_IFMT(st.st_mode)
            reg = stat.S_ISREG(st.st_mode)
            size = st.st_size if reg else None
            digest = _sha(p) if reg and content else None
            out[rel] = (kind, size, st.st_nlink if reg else None, _xattrs(p), digest)
            if reg:
                by_ino.setdefault(st.st_ino, []).append(rel)
    groups = {frozenset(v) for v in by_ino.values() if len(v) > 1}
    return out, groups


def assert_same_tree(remote, local, only=None):
    """The remote mount's tree equals the local one's (@only: a subset of paths to
    require; others may be absent remotely, never different)."""
    rt, rg = tree(remote)
    lt, lg = tree(local)
    if only is None:
        assert sorted(rt) == sorted(lt), (
            f"remote only: {sorted(set(rt) - set(lt))}; local only: {sorted(set(lt) - set(rt))}")
        assert rg == lg, "hard-link groups (ties) differ"
    else:
        missing = [p for p in only if p not in rt]
        assert not missing, f"absent from the remote mount: {missing}"
        extra = [p for p in rt if p not in lt]
        assert not extra, f"remote only: {extra}"
    for rel, want in lt.items():
        if rel not in rt:
            continue
        got = rt[rel]
        for what, a, b in zip(("kind", "size", "nlink", "xattrs", "content"), got, want):
            assert a == b, f"{rel}: {what} differs: remote {a!r}, local {b!r}"
    # the same `ls -li` grouping, by stat of the root listings too
    for rel in ("model.safetensors", "pytorch_model.bin"):
        if rel in lt:
            assert os.stat(os.path.join(remote, rel)).st_size == \
                os.stat(os.path.join(local, rel)).st_size


def remote_mount(url, *opts, endpoint):
    return mount(url, *remote_opts(endpoint), *opts, timeout=MOUNT_TIMEOUT)


# ---------------------------------------------------------------------------- mounts

@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_s3_mount_equals_local_mount(family, moto_server, fixtures_bucket):
    local, opts = FAMILIES[family]
    with mount(local, *opts) as lm, \
            remote_mount(s3_url(family), *opts, endpoint=moto_server.url) as rm:
        assert_same_tree(rm, lm)
        assert os.getxattr(rm, s3env.SOURCE_XATTR).decode().rstrip("\0") == s3_url(family)
        stats = s3env.remote_stats(rm)
        assert stats["requests"] > 0 and stats["bytes_fetched"] > 0
        assert stats["bytes_read"] > 0, "every file was read through the mount"


_SHA_ALL = r"""
import hashlib, os, sys, json
out = {}
for dp, dns, fns in os.walk(sys.argv[1]):
    for n in fns:
        p = os.path.join(dp, n)
        with open(p, "rb") as f:
            out[os.path.relpath(p, sys.argv[1])] = hashlib.sha256(f.read()).hexdigest()
print(json.dumps(out))
"""


@pytest.mark.parametrize("family", ["dcp-fsdp2-optim", "deepspeed-z2", "safetensors-index"])
def test_background_mount_serves_every_file(family, moto_server, fixtures_bucket, tmp_path):
    """Without -f the daemon forks (fuse_daemonize) after reading SOURCE, whose advice
    started the store's prefetch workers: threads do not survive a fork, so the child
    once queued read-ahead nobody fetched and a read of model.safetensors hung.  Every
    file of a background mount is read (in a child with a deadline) and equals the
    local mount's."""
    local, opts = FAMILIES[family]
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run([require_binary(), *remote_opts(moto_server.url), *opts, s3_url(family),
                        str(mnt)], capture_output=True, text=True, timeout=MOUNT_TIMEOUT)
    assert r.returncode == 0, r.stderr
    try:
        got = subprocess.run([sys.executable, "-c", _SHA_ALL, str(mnt)], capture_output=True,
                             text=True, timeout=120)
        assert got.returncode == 0, got.stderr
        with mount(local, *opts) as lm:
            want = subprocess.run([sys.executable, "-c", _SHA_ALL, lm], capture_output=True,
                                  text=True, timeout=120)
        assert json.loads(got.stdout) == json.loads(want.stdout)
    finally:
        unmount(str(mnt))


def test_local_mount_has_no_remote_stats():
    with mount(SOURCES["sample"]) as lm:
        with pytest.raises(OSError):
            os.getxattr(lm, s3env.STATS_XATTR)


def test_prefix_with_trailing_slash_and_default_addressing(moto_server, fixtures_bucket):
    """s3://B/P/ is s3://B/P; --addressing=auto (the default) is path-style when an
    endpoint URL is given: moto on 127.0.0.1 has no virtual-host names."""
    local = SOURCES["sample"]
    with mount(local) as lm, \
            mount(s3_url("safetensors-index") + "/", f"--endpoint-url={moto_server.url}",
                  timeout=MOUNT_TIMEOUT) as rm:
        assert_same_tree(rm, lm)


@pytest.mark.parametrize("key", sorted(SINGLE))
def test_single_object_source(key, moto_server, fixtures_bucket):
    """s3://BUCKET/KEY of one object, and the same object as http://HOST:PORT/BUCKET/KEY
    (moto's path-style URL, read unsigned: the object is public-read)."""
    local = SINGLE[key]
    http = f"{moto_server.url}/{BUCKET}/{key}"
    with mount(local) as lm:
        with remote_mount(f"s3://{BUCKET}/{key}", endpoint=moto_server.url) as rm:
            assert_same_tree(rm, lm)
        with mount(http, timeout=MOUNT_TIMEOUT) as hm:
            assert_same_tree(hm, lm)
            assert os.getxattr(hm, s3env.SOURCE_XATTR).decode().rstrip("\0") == http
            assert s3env.remote_stats(hm)["requests"] > 0


@pytest.mark.parametrize("family,names", [
    ("safetensors-index", ["model.safetensors", "pytorch_model.bin", "tensors",
                           "config.json", "generation_config.json",
                           "tokenizer_config.json"]),
    ("torch-bin-index", ["model.safetensors", "pytorch_model.bin", "tensors",
                         "config.json", "generation_config.json"]),
])
def test_http_directory_with_index(family, names, moto_server, fixtures_bucket):
    """http://HOST/DIR/: the index (model.safetensors.index.json or
    pytorch_model.bin.index.json) names the shards; config and tokenizer files are
    found by name (there is no listing: other files, README.md, may be absent)."""
    local, _ = FAMILIES[family]
    url = f"{moto_server.url}/{BUCKET}/{prefix_of(family)}/"
    with mount(local) as lm, mount(url, timeout=MOUNT_TIMEOUT) as hm:
        lt, _ = tree(lm, content=False)
        want = [p for p in lt if p.split(os.sep)[0] in names]
        assert_same_tree(hm, lm, only=want)


def _self_signed(tmp):
    key, crt = os.path.join(tmp, "key.pem"), os.path.join(tmp, "cert.pem")
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl (the CLI) is needed to make the https case's certificate")
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", key, "-out", crt], check=True, capture_output=True)
    return crt, key


def test_https_directory_with_index(moto_server, fixtures_bucket, tmp_path):
    """https://127.0.0.1:PORT/DIR/ through a TLS front (s3proxy with a self-signed
    certificate) that the daemon trusts through AWS_CA_BUNDLE (CURL_CA_BUNDLE, SSL_CERT_FILE)."""
    from s3proxy import FaultProxy
    crt, key = _self_signed(str(tmp_path))
    local = SOURCES["sample"]
    with FaultProxy(moto_server.url, tls=(crt, key)) as px, \
            s3env.env(AWS_CA_BUNDLE=crt, SSL_CERT_FILE=crt, CURL_CA_BUNDLE=crt):
        url = f"https://127.0.0.1:{px.port}/{BUCKET}/{prefix_of('safetensors-index')}/"
        with mount(local) as lm, mount(url, timeout=MOUNT_TIMEOUT) as hm:
            assert_same_tree(hm, lm, only=["model.safetensors", "pytorch_model.bin",
                                           "config.json"])
        assert px.snapshot()["requests"] > 0
        # an untrusted certificate is a refusal, not a mount
        with s3env.env(AWS_CA_BUNDLE=None, SSL_CERT_FILE=None, CURL_CA_BUNDLE=None):
            _path, reason = refuse(url, timeout=60)
            assert reason


# ---------------------------------------------------------------------------- inspect, export

@pytest.mark.parametrize("family", ["safetensors-index", "dcp-llama-fsdp2", "deepspeed-z2",
                                    "dcp-ties-gpt2"])
def test_inspect_and_export_from_url(family, moto_server, fixtures_bucket, tmp_path):
    local, opts = FAMILIES[family]
    ropts = (*remote_opts(moto_server.url), *opts)
    for args in (["inspect"], ["inspect", "--json"]):
        want = run_cli(*args, *opts, local)
        got = run_cli(*args, *ropts, s3_url(family), timeout=60)
        assert want.returncode == 0, want.stderr
        assert got.returncode == 0, got.stderr
        if "--json" in args:
            assert json.loads(got.stdout) == json.loads(want.stdout)
        else:
            assert got.stdout == want.stdout
    for view, name in (([], "model.safetensors"), (["--view=bin"], "pytorch_model.bin")):
        lo, ro = tmp_path / ("local-" + name), tmp_path / ("remote-" + name)
        r = run_cli("export", *view, *opts, local, str(lo))
        assert r.returncode == 0, r.stderr
        r = run_cli("export", *view, *ropts, s3_url(family), str(ro), timeout=120)
        assert r.returncode == 0, r.stderr
        assert ro.read_bytes() == lo.read_bytes(), f"export {view} of the URL differs"
    # a complete directory, passthrough files included
    lo, ro = tmp_path / "local-dir", tmp_path / "remote-dir"
    assert run_cli("export", "--max-shard-size=64K", *opts, local, str(lo) + "/").returncode == 0
    r = run_cli("export", "--max-shard-size=64K", *ropts, s3_url(family), str(ro) + "/",
                timeout=120)
    assert r.returncode == 0, r.stderr
    lf = sorted(os.listdir(lo))
    assert sorted(os.listdir(ro)) == lf
    for n in lf:
        assert (ro / n).read_bytes() == (lo / n).read_bytes(), n


def test_export_from_http_url(moto_server, fixtures_bucket, tmp_path):
    local = SINGLE["single/model.safetensors"]
    url = f"{moto_server.url}/{BUCKET}/single/model.safetensors"
    r = run_cli("export", "--view=bin", local, str(tmp_path / "l.bin"))
    assert r.returncode == 0, r.stderr
    r = run_cli("export", "--view=bin", url, str(tmp_path / "r.bin"), timeout=60)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "r.bin").read_bytes() == (tmp_path / "l.bin").read_bytes()


# ---------------------------------------------------------------------------- loader

def _loader():
    sys.path.insert(0, os.path.join(REPO, "lib", "python"))
    lib_build = BUILD if os.path.basename(BUILD.rstrip("/")) != "build-asan" \
        else os.path.join(REPO, "build")
    os.environ.setdefault("UNSHARDFS_LIB", os.path.join(lib_build, "lib", "loader",
                                                        "libunshard.so"))
    import unshardfs
    return unshardfs


def assert_same_state_dict(got, want):
    assert sorted(got) == sorted(want)
    for n in want:
        assert got[n].dtype == want[n].dtype, n
        assert list(got[n].shape) == list(want[n].shape), n
        assert tensor_bytes(got[n]) == tensor_bytes(want[n]), n
    names = sorted(want)
    for a in names:  # ties: the same tensor object exactly where the local load has one
        for b in names:
            assert (got[a] is got[b]) == (want[a] is want[b]), (a, b)


@pytest.mark.parametrize("family", ["safetensors-index", "dcp-llama-fsdp2", "dcp-ties-gpt2",
                                    "deepspeed-z3-bf16", "torch-bin-index"])
def test_loader_from_url_and_from_remote_mount(family, moto_server, fixtures_bucket):
    unshardfs = _loader()
    local, _ = FAMILIES[family]
    want = unshardfs.load(local)
    got = unshardfs.load(s3_url(family), endpoint_url=moto_server.url, addressing="path")
    assert_same_state_dict(got, want)
    with remote_mount(s3_url(family), endpoint=moto_server.url) as rm:
        assert_same_state_dict(unshardfs.load(rm), want)
        with unshardfs.Loader(rm) as ld:
            assert ld.mounted and ld.source == s3_url(family)


# ---------------------------------------------------------------------------- options, credentials

def test_options_as_dash_o(moto_server, fixtures_bucket):
    """Every remote option as -o NAME=VALUE ('_' for '-'), as fstab passes them."""
    local = SOURCES["sample"]
    o = ",".join([f"endpoint_url={moto_server.url}", "addressing=path", "region=us-east-1",
                  "block_size=64K", "connections=2", "retries=3", "timeout=10"])
    with mount(local) as lm, mount(s3_url("safetensors-index"), "-o", o,
                                   timeout=MOUNT_TIMEOUT) as rm:
        assert_same_tree(rm, lm)
        assert s3env.remote_stats(rm)["requests"] > 0


def _auth_headers(px):
    """[(Authorization or None, X-Amz-Security-Token or None, Host)] of every request
    the proxy saw."""
    out = []
    for _m, _t, headers in px.snapshot()["requests_log"]:
        h = {k.lower(): v for k, v in headers}
        out.append((h.get("authorization"), h.get("x-amz-security-token"), h.get("host")))
    assert out, "no request went through the proxy"
    return out


def _scope(px):
    """{(access key, region)} of the SigV4 credential scopes the proxy saw."""
    scopes = set()
    for auth, _tok, _host in _auth_headers(px):
        assert auth and auth.startswith("AWS4-HMAC-SHA256 "), f"not SigV4-signed: {auth!r}"
        cred = auth.split("Credential=", 1)[1].split(",", 1)[0]  # KEY/DATE/REGION/s3/aws4_request
        key, _date, region, service, term = cred.split("/")
        assert (service, term) == ("s3", "aws4_request"), cred
        scopes.add((key, region))
    return scopes


def test_credentials_from_a_profile(fault_proxy, fixtures_bucket):
    """No key in the environment: --profile reads AWS_SHARED_CREDENTIALS_FILE's
    profile, and its region from AWS_CONFIG_FILE (no region in the environment): the
    requests are signed with that key, scoped to that region."""
    local = SOURCES["noindex"]
    with s3env.env(AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None,
                   AWS_SESSION_TOKEN=None, AWS_REGION=None, AWS_DEFAULT_REGION=None):
        with mount(local) as lm, \
                remote_mount(s3_url("safetensors-noindex"), f"--profile={s3env.PROFILE}",
                             endpoint=fault_proxy.url) as rm:
            assert_same_tree(rm, lm)
    assert _scope(fault_proxy) == {(s3env.PROFILE_KEY, s3env.PROFILE_REGION)}


def test_credentials_from_the_environment(fault_proxy, fixtures_bucket):
    """AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN sign every request
    (the token as X-Amz-Security-Token); --region scopes them; path-style keeps the
    endpoint's Host."""
    with s3env.env(AWS_SESSION_TOKEN="session-token-21"):
        with remote_mount(s3_url("safetensors-noindex"), "--region=ap-south-1",
                          endpoint=fault_proxy.url) as rm:
            with open(os.path.join(rm, "model.safetensors"), "rb") as f:
                f.read()
    assert _scope(fault_proxy) == {(s3env.ACCESS_KEY, "ap-south-1")}
    for _auth, token, host in _auth_headers(fault_proxy):
        assert token == "session-token-21"
        assert host == f"127.0.0.1:{fault_proxy.port}"
    fault_proxy.reset_stats()
    with remote_mount(s3_url("safetensors-noindex"), endpoint=fault_proxy.url):
        pass
    assert _scope(fault_proxy) == {(s3env.ACCESS_KEY, s3env.REGION)}  # AWS_REGION


def test_no_sign_request_sends_no_signature(fault_proxy, fixtures_bucket):
    with remote_mount(s3_url("safetensors-noindex"), "--no-sign-request",
                      endpoint=fault_proxy.url) as rm:
        with open(os.path.join(rm, "model.safetensors"), "rb") as f:
            f.read()
    for auth, token, _host in _auth_headers(fault_proxy):
        assert auth is None and token is None


def test_no_sign_request_without_any_credentials(moto_server, fixtures_bucket, tmp_path):
    empty = tmp_path / "credentials"
    empty.write_text("")
    with s3env.env(AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None,
                   AWS_SESSION_TOKEN=None, AWS_SHARED_CREDENTIALS_FILE=str(empty),
                   AWS_CONFIG_FILE=str(empty)):
        with mount(SOURCES["noindex"]) as lm, \
                remote_mount(s3_url("safetensors-noindex"), "--no-sign-request",
                             "--region=us-east-1", endpoint=moto_server.url) as rm:
            assert_same_tree(rm, lm)


# ---------------------------------------------------------------------------- refusals

def _usage_error(*argv, timeout=10):
    binary = require_binary()
    tmp = os.path.join("/tmp", f"unshardfs-usage-{os.getpid()}")
    os.makedirs(tmp, exist_ok=True)
    try:
        r = subprocess.run([binary, "-f", *argv, tmp], capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        assert not os.path.ismount(tmp)
    finally:
        if os.path.ismount(tmp):
            subprocess.run(["fusermount3", "-u", tmp])
        os.rmdir(tmp)
    return r


@pytest.mark.parametrize("url", ["s3://", "s3:///prefix", "http://", "https:///dir/",
                                 "http://127.0.0.1:notaport/model.safetensors"])
def test_bad_url_is_a_usage_error(url):
    r = _usage_error(url)
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("unshardfs: "), lines


@pytest.mark.parametrize("opt", ["--addressing=sideways", "--connections=0", "--retries=-1",
                                 "--block-size=0", "--block-size=lots", "--timeout=soon"])
def test_bad_remote_option_is_a_usage_error(opt, moto_server):
    r = _usage_error(f"--endpoint-url={moto_server.url}", opt, "s3://some-bucket/p")
    assert r.returncode == 1, (opt, r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("unshardfs: "), lines


def test_no_such_bucket(moto_server):
    path, reason = refuse("s3://no-such-bucket-here/ckpt", *remote_opts(moto_server.url),
                          timeout=60)
    assert "no-such-bucket-here" in path + reason


def test_nothing_under_prefix(moto_server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="other/config.json", Body=b"{}")
    path, reason = refuse(f"s3://{bucket}/ckpt", *remote_opts(moto_server.url), timeout=60)
    assert "ckpt" in path + reason
    # a prefix is a directory: s3://B/oth does not match other/
    refuse(f"s3://{bucket}/oth", *remote_opts(moto_server.url), timeout=60)


def test_access_denied(moto_server, s3, bucket):
    """A private object read unsigned: 403 at mount, a refusal (http:// and s3://
    --no-sign-request)."""
    s3env.upload_tree(s3, SOURCES["single"], bucket, "priv")
    refuse(f"{moto_server.url}/{bucket}/priv/model.safetensors", timeout=60)
    refuse(f"s3://{bucket}/priv", *remote_opts(moto_server.url), "--no-sign-request",
           timeout=60)


def test_unreachable_endpoint_fails_within_the_retries():
    """Nothing listens on the port: connection refused on every try; exit 2 after
    the retries, no hang."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: refused
    refuse("s3://bucket/ckpt", f"--endpoint-url=http://127.0.0.1:{port}", "--retries=2",
           "--timeout=2", timeout=60)


def test_silent_endpoint_times_out():
    """An endpoint that accepts and never answers: each try ends at --timeout; exit 2
    within (retries + 1) x timeout plus backoff (the test allows 45 s)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    conns = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except OSError:
                pass
    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        refuse("s3://bucket/ckpt", f"--endpoint-url=http://127.0.0.1:{srv.getsockname()[1]}",
               "--retries=1", "--timeout=2", timeout=45)
    finally:
        stop.set()
        t.join()
        for c in conns:
            c.close()
        srv.close()


def test_refusal_line_format_for_urls(moto_server):
    """The refusal names the URL: `unshardfs: s3://B/P: <reason>`."""
    path, _reason = refuse("s3://no-such-bucket-two/p", *remote_opts(moto_server.url),
                           timeout=60)
    assert REFUSAL_RE.match(f"unshardfs: {path}: x")
    assert path.startswith("s3://no-such-bucket-two")


def test_bucket_root_as_source(moto_server, s3, bucket):
    """s3://BUCKET (no prefix) is the bucket's root: a checkpoint there mounts; an empty
    bucket is a refusal (nothing under the prefix)."""
    refuse(f"s3://{bucket}", *remote_opts(moto_server.url), timeout=60)
    refuse(f"s3://{bucket}/", *remote_opts(moto_server.url), timeout=60)
    s3env.upload_tree(s3, SOURCES["noindex"], bucket, "")
    with mount(SOURCES["noindex"]) as lm, \
            remote_mount(f"s3://{bucket}", endpoint=moto_server.url) as rm:
        assert_same_tree(rm, lm)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_uploads_are_the_fixtures(family, moto_server, fixtures_bucket):
    """The harness itself, checked without the remote SOURCE code: the uploaded prefix,
    seen through an independent client (s3fs-fuse) and mounted by unshardfs as a local
    directory, serves exactly the local fixture's tree - so what test_s3_mount_equals_
    local_mount compares against is what a correct s3:// mount must show."""
    from conftest import require_tool
    require_tool("s3fs")
    local, opts = FAMILIES[family]
    with s3env.S3fs(BUCKET, moto_server.url) as fs:
        src = os.path.join(fs.mnt, prefix_of(family))
        assert sorted(s3env.tree_files(src)) == sorted(s3env.tree_files(local))
        with mount(local, *opts) as lm, mount(src, *opts, timeout=MOUNT_TIMEOUT) as sm:
            assert_same_tree(sm, lm)
