"""A real S3 endpoint for the remote-SOURCE tests (issue 21): a moto server on loopback,
boto3 clients of it, and uploads of the fixtures.

Nothing here is a mock of the code under test: moto is a real HTTP server speaking the
S3 REST protocol (path-style on 127.0.0.1), boto3 is the real client, and the daemon
reaches moto over TCP like any S3-compatible store (--endpoint-url).

The credentials are dummies, set in os.environ by `use_dummy_credentials()` before
anything starts, so the daemons the tests spawn inherit them and never read the user's
real ~/.aws (AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE point at files of this
session's own).
"""
import atexit
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from conftest import read_log

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"
# the profile `unshardfs-test` has keys of its own, so a test can tell which were used
PROFILE = "unshardfs-test"
PROFILE_KEY = "profilekey"
PROFILE_SECRET = "profilesecret"
PROFILE_REGION = "eu-west-3"

_CRED_DIR = None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def use_dummy_credentials():
    """Dummy AWS credentials in this process's environment (inherited by every daemon
    and subprocess), and a private shared-credentials/config pair holding a profile
    `unshardfs-test` with keys (and a region) of its own. Returns that directory."""
    global _CRED_DIR
    if _CRED_DIR is None:
        _CRED_DIR = tempfile.mkdtemp(prefix="unshardfs-aws-")
        atexit.register(shutil.rmtree, _CRED_DIR, True)
        with open(os.path.join(_CRED_DIR, "credentials"), "w") as f:
            f.write(f"[default]\naws_access_key_id = {ACCESS_KEY}\n"
                    f"aws_secret_access_key = {SECRET_KEY}\n\n"
                    f"[{PROFILE}]\naws_access_key_id = {PROFILE_KEY}\n"
                    f"aws_secret_access_key = {PROFILE_SECRET}\n")
        with open(os.path.join(_CRED_DIR, "config"), "w") as f:
            f.write(f"[default]\nregion = {REGION}\n\n"
                    f"[profile {PROFILE}]\nregion = {PROFILE_REGION}\n")
    os.environ.update(
        AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
        AWS_DEFAULT_REGION=REGION, AWS_REGION=REGION,
        AWS_SHARED_CREDENTIALS_FILE=os.path.join(_CRED_DIR, "credentials"),
        AWS_CONFIG_FILE=os.path.join(_CRED_DIR, "config"),
        AWS_EC2_METADATA_DISABLED="true")
    os.environ.pop("AWS_SESSION_TOKEN", None)
    os.environ.pop("AWS_PROFILE", None)
    # the tests talk to loopback only: no proxy of the user's in the way
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
              "all_proxy"):
        os.environ.pop(k, None)
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    return _CRED_DIR


class MotoServer:
    """`python -m moto.server -H 127.0.0.1 -p PORT` as a child process."""

    def __init__(self, python=None, port=None, timeout=60):
        use_dummy_credentials()
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmp = tempfile.mkdtemp(prefix="unshardfs-moto-")
        self.log = open(os.path.join(self.tmp, "moto.log"), "wb")
        self.proc = subprocess.Popen(
            [python or sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
             "-p", str(self.port)],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto.server exited {self.proc.returncode}: "
                                   f"{self.log_text()[-2000:]}")
            try:
                # moto answers ListBuckets at / (GET, any or no signature)
                with urllib.request.urlopen(self.url + "/", timeout=2) as r:
                    r.read()
                break
            except urllib.error.HTTPError:
                break  # it answered
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto.server not answering on {self.url} after "
                                       f"{timeout}s: {self.log_text()[-2000:]}")
                time.sleep(0.1)

    def log_text(self):
        return read_log(self.log.name)

    def reset(self):
        """Forget every bucket (moto's own reset endpoint)."""
        req = urllib.request.Request(self.url + "/moto-api/reset", method="POST")
        urllib.request.urlopen(req, timeout=10).read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def client(endpoint_url, **config):
    """A boto3 S3 client of @endpoint_url (path-style, dummy credentials). @config:
    botocore Config arguments (retries=..., read_timeout=...)."""
    import boto3
    from botocore.config import Config
    cfg = dict(s3={"addressing_style": "path"}, signature_version="s3v4")
    cfg.update(config)
    return boto3.client("s3", endpoint_url=endpoint_url, region_name=REGION,
                        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
                        config=Config(**cfg))


def make_bucket(s3, bucket):
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    return bucket


def tree_files(local_dir):
    """{relative key: real path} of every regular file under @local_dir, symlinks
    followed (a hub-cache snapshot is symlinks into ../../blobs: the targets are
    uploaded under the snapshot's names)."""
    out = {}
    for dp, dns, fns in os.walk(local_dir, followlinks=True):
        dns.sort()
        for fn in sorted(fns):
            p = os.path.join(dp, fn)
            if os.path.isfile(p):  # follows symlinks; drops dangling ones and fifos
                rel = os.path.relpath(p, local_dir).replace(os.sep, "/")
                out[rel] = os.path.realpath(p)
    return out


def upload_tree(s3, local_dir, bucket, prefix, acl=None):
    """Upload every file under @local_dir (symlinks followed) to s3://@bucket/@prefix/REL.
    Returns the list of keys. @acl: e.g. "public-read" for anonymous GETs."""
    make_bucket(s3, bucket)
    prefix = prefix.strip("/")
    keys = []
    for rel, real in tree_files(local_dir).items():
        key = f"{prefix}/{rel}" if prefix else rel
        with open(real, "rb") as f:
            extra = {"ACL": acl} if acl else {}
            s3.put_object(Bucket=bucket, Key=key, Body=f.read(), **extra)
        keys.append(key)
    return keys


def upload_file(s3, path, bucket, key, acl=None):
    make_bucket(s3, bucket)
    with open(os.path.realpath(path), "rb") as f:
        extra = {"ACL": acl} if acl else {}
        s3.put_object(Bucket=bucket, Key=key, Body=f.read(), **extra)
    return key


def list_keys(s3, bucket, prefix=""):
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys


def download_prefix(s3, bucket, prefix, out_dir):
    """boto3 download of every object under @prefix into @out_dir (the peer of the
    first-tensor benchmark). Returns bytes downloaded."""
    prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
    n = 0
    for key in list_keys(s3, bucket, prefix):
        dst = os.path.join(out_dir, key[len(prefix):])
        os.makedirs(os.path.dirname(dst) or out_dir, exist_ok=True)
        s3.download_file(bucket, key, dst)
        n += os.path.getsize(dst)
    return n


# ---------------------------------------------------------------------------- the mount

def remote_opts(endpoint_url, *extra):
    """The daemon options of a mount through @endpoint_url (path-style, as moto needs)."""
    return (f"--endpoint-url={endpoint_url}", "--addressing=path", *extra)


STATS_XATTR = "user.unshardfs.remote_stats"
SOURCE_XATTR = "user.unshardfs.source"
STATS_KEYS = ("requests", "retries", "bytes_fetched", "bytes_read", "disk_hits")


def remote_stats(mnt):
    """{requests, retries, bytes_fetched, bytes_read, disk_hits} of a remote mount, from
    the root's user.unshardfs.remote_stats ("requests=N retries=N ...")."""
    raw = os.getxattr(mnt, STATS_XATTR).decode()
    out = {}
    for item in raw.split():
        k, _, v = item.partition("=")
        out[k] = int(v)
    missing = [k for k in STATS_KEYS if k not in out]
    assert not missing, f"{STATS_XATTR} = {raw!r} lacks {missing}"
    return out


@contextlib.contextmanager
def env(**kv):
    """Temporarily set (value) or unset (None) environment variables."""
    old = {k: os.environ.get(k) for k in kv}
    try:
        for k, v in kv.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class S3fs:
    """An s3fs-fuse mount (Debian's s3fs) of @bucket on the S3 endpoint @endpoint
    (path-style, the dummy keys, read-only): the peer of tests/bench/s3_bench.py, and
    the tests' independent view of what was uploaded. .mnt is the mount point."""

    def __init__(self, bucket, endpoint, scratch=None, timeout=60):
        self.tmp = tempfile.mkdtemp(prefix="unshardfs-s3fs-", dir=scratch)
        self.mnt = os.path.join(self.tmp, "mnt")
        os.mkdir(self.mnt)
        pw = os.path.join(self.tmp, "passwd")
        with open(pw, "w") as f:
            f.write(f"{ACCESS_KEY}:{SECRET_KEY}\n")
        os.chmod(pw, 0o600)
        exe = shutil.which("s3fs")
        if exe is None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise RuntimeError("s3fs is not installed (Debian package s3fs; tools/setup.sh)")
        self.log = open(os.path.join(self.tmp, "log"), "wb")
        self.proc = subprocess.Popen(
            [exe, bucket, self.mnt, "-f", "-o",
             f"url={endpoint},use_path_request_style,passwd_file={pw},"
             f"endpoint={REGION},ro"],
            stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("s3fs did not mount: " + self.log_text())
            time.sleep(0.05)

    def log_text(self):
        return read_log(self.log.name)

    def close(self):
        for _ in range(40):
            if not os.path.ismount(self.mnt):
                break
            if subprocess.run(["fusermount3", "-u", self.mnt],
                              capture_output=True).returncode == 0:
                break
            time.sleep(0.25)
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
