"""Remote SOURCEs under faults (issue 21, docs/remote.md "Consistency", "Retries and
timeouts"): the daemon reads moto through s3proxy.FaultProxy, which breaks responses
on demand, and every read either gets the right bytes or fails with EIO - for that
request only, within a bound, never with new, mixed or missing bytes.

- 5xx bursts shorter than --retries: right bytes, remote_stats counts the retries;
  longer: EIO, and the next read (the burst over) succeeds
- slow responses under --timeout: right bytes; over it (--timeout=2 --retries=1): EIO
  within BOUND_S, no hang
- a body trickled under the timeout: right bytes
- a reset mid-body or a short body: retried (right bytes); when every try breaks: EIO
- an object rewritten after the mount (If-Match): the reads that need it EIO, other
  files still readable; a remount serves the new object, never the cached old bytes
- the daemon's peak RSS stays bounded reading a file far larger than its caches
- --cache-dir: a remount reads from disk (disk_hits), fetching far fewer bytes
- a full sequential read of model.safetensors fetches <= 1.1x its bytes

Every read runs in a child process with a timeout, so a hang is a failure, not a
stuck test run. A mount that fails is a failure, never a skip.
"""
import errno
import hashlib
import json
import os
import struct
import subprocess
import sys
import time

import pytest

import s3env
from conftest import BUILD, daemon_pid, hwm_mib, mount
from s3proxy import Fault

MOUNT_TIMEOUT = 60
BLOCK = "--block-size=256K"
# EIO for a read whose every try times out, from the start of the read: each FUSE
# request ends after (retries + 1) x timeout + backoff, about 5 s with --timeout=2
# --retries=1; the kernel retries a failed read once (its readahead, then the page
# itself), so about twice that; allowed up to this (2 shared CPUs).
BOUND_S = 30
RSS_LIMIT_MIB = 40
NT = 16           # tensors of 1 MiB in the big checkpoint
TSIZE = 1 << 20


# ---------------------------------------------------------------------------- fixtures

def _write_safetensors(path, tensors, seed):
    """A safetensors file of @tensors {name: nbytes} (F32, random bytes), written by
    the safetensors library. Returns {name: raw bytes}."""
    import torch
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(seed)
    sd = {n: torch.randn(b // 4, generator=g) for n, b in tensors.items()}
    save_file(sd, path, metadata={"format": "pt"})
    return {n: t.numpy().tobytes() for n, t in sd.items()}


def _layout(path):
    """[(name, begin, end)] of a safetensors file's tensors, in file order."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
    hdr.pop("__metadata__", None)
    return sorted(((k, v["data_offsets"][0] + 8 + n, v["data_offsets"][1] + 8 + n)
                   for k, v in hdr.items()), key=lambda x: x[1])


@pytest.fixture(scope="module")
def big(tmp_path_factory, s3):
    """One model.safetensors of NT 1-MiB tensors (+ config.json), uploaded to
    s3://faults-big/ckpt. Returns (local dir, {name: sha256}, names in file order)."""
    d = tmp_path_factory.mktemp("big")
    raw = _write_safetensors(str(d / "model.safetensors"),
                             {f"t{i:02d}": TSIZE for i in range(NT)}, seed=21)
    (d / "config.json").write_text('{"model_type": "test"}\n')
    s3env.upload_tree(s3, str(d), "faults-big", "ckpt")
    order = [n for n, _b, _e in _layout(str(d / "model.safetensors"))]
    return str(d), {n: hashlib.sha256(b).hexdigest() for n, b in raw.items()}, order


def via(px, *opts):
    """Options of a mount through the proxy."""
    return (f"--endpoint-url={px.url}", "--addressing=path", BLOCK, *opts)


def child_read(path, timeout=60, offset=0, length=-1):
    """Read @path in a child process: {"errno": 0, "sha": ..., "n": ..., "s": secs} or
    {"errno": E, "s": secs}. A read that does not end within @timeout fails the test."""
    code = r"""
import hashlib, json, os, sys, time
p, off, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = time.monotonic()
try:
    fd = os.open(p, os.O_RDONLY)
    h, tot = hashlib.sha256(), 0
    os.lseek(fd, off, 0)
    while n < 0 or tot < n:
        b = os.read(fd, 1 << 20 if n < 0 else min(1 << 20, n - tot))
        if not b:
            break
        h.update(b)
        tot += len(b)
    print(json.dumps({"errno": 0, "sha": h.hexdigest(), "n": tot, "s": time.monotonic() - t}))
except OSError as e:
    print(json.dumps({"errno": e.errno, "s": time.monotonic() - t}))
"""
    t = time.monotonic()
    try:
        r = subprocess.run([sys.executable, "-c", code, path, str(offset), str(length)],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"a read of {path} hung: no answer within {timeout}s")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    out["wall"] = time.monotonic() - t
    return out


def tensor_path(mnt, name):
    return os.path.join(mnt, "tensors", name)


def assert_right(mnt, name, sums, timeout=60):
    r = child_read(tensor_path(mnt, name), timeout)
    assert r["errno"] == 0, f"{name}: {errno.errorcode.get(r['errno'], r['errno'])}"
    assert r["n"] == TSIZE and r["sha"] == sums[name], f"{name}: wrong bytes"
    return r


def assert_eio(mnt, name, sums, timeout=60):
    r = child_read(tensor_path(mnt, name), timeout)
    assert r["errno"] == errno.EIO, \
        f"{name}: expected EIO, got " + (
            "the right bytes" if r.get("sha") == sums[name] else
            f"{r['n']} wrong bytes" if r["errno"] == 0 else errno.errorcode[r["errno"]])
    return r


def right_or_eio(mnt, name, sums):
    r = child_read(tensor_path(mnt, name))
    if r["errno"] == 0:
        assert r["n"] == TSIZE and r["sha"] == sums[name], f"{name}: wrong bytes served"
        return True
    assert r["errno"] == errno.EIO, errno.errorcode.get(r["errno"])
    return False


def spaced(order, k):
    """@k tensors no two of which are neighbours in the file (no shared block)."""
    picks = order[::2]
    assert len(picks) >= k
    return picks[:k]


# ---------------------------------------------------------------------------- 5xx

def test_5xx_burst_shorter_than_the_retries(big, fault_proxy):
    _d, sums, order = big
    a, b = spaced(order, 2)
    with mount("s3://faults-big/ckpt", *via(fault_proxy, "--retries=5"),
               timeout=MOUNT_TIMEOUT) as m:
        before = s3env.remote_stats(m)
        fault_proxy.add(Fault("status", count=3, status=503))
        assert_right(m, a, sums)
        after = s3env.remote_stats(m)
        assert after["retries"] - before["retries"] >= 3, (before, after)
        assert [st for *_x, st, _n in fault_proxy.snapshot()["log"]].count(503) == 3
        fault_proxy.add(Fault("status", count=2, status=500))
        assert_right(m, b, sums)


def test_5xx_longer_than_the_retries_is_eio_for_that_read(big, fault_proxy):
    _d, sums, order = big
    a, b, c = spaced(order, 3)
    with mount("s3://faults-big/ckpt", *via(fault_proxy, "--retries=2"),
               timeout=MOUNT_TIMEOUT) as m:
        f = fault_proxy.add(Fault("status", count=None, status=503))
        r = assert_eio(m, a, sums)
        assert r["s"] < BOUND_S
        assert f.hits >= 3, "each block was tried 1 + retries times"
        fault_proxy.clear()                      # the burst is over
        assert_right(m, b, sums)
        assert_right(m, a, sums)                 # the failed read, again: served now
    # a bounded burst, longer than one request's tries (1 + 1): the read meets it
    # (which of the kernel's requests gets EIO depends on its retry), then it is over
    with mount("s3://faults-big/ckpt", *via(fault_proxy, "--retries=1", "--connections=1"),
               timeout=MOUNT_TIMEOUT) as m:
        f = fault_proxy.add(Fault("status", count=6, status=503))
        right_or_eio(m, c, sums)
        assert f.hits >= 2
        fault_proxy.clear()
        assert_right(m, c, sums)


def test_failures_of_one_object_leave_the_others_readable(fault_proxy, s3, bucket,
                                                          tmp_path):
    """EIO is per file: with every GET of shard 2 failing, shard 1's tensors read."""
    sums, names = _two_shards(tmp_path, s3, bucket)
    with mount(f"s3://{bucket}/ckpt", *via(fault_proxy, "--retries=1"),
               timeout=MOUNT_TIMEOUT) as m:
        fault_proxy.add(Fault("status", count=None, path_contains="model-00002-of-00002"))
        r = child_read(tensor_path(m, names[2][0]))
        assert r["errno"] == errno.EIO
        r = child_read(tensor_path(m, names[1][0]))
        assert r["errno"] == 0 and r["sha"] == sums[names[1][0]]


# ---------------------------------------------------------------------------- slow servers

def test_slow_responses_under_the_timeout(big, fault_proxy):
    _d, sums, order = big
    (a,) = spaced(order, 1)
    with mount("s3://faults-big/ckpt", *via(fault_proxy, "--timeout=5"),
               timeout=MOUNT_TIMEOUT) as m:
        fault_proxy.add(Fault("delay", seconds=1.0, count=None))
        r = assert_right(m, a, sums)
        assert r["s"] >= 1.0


def test_responses_over_the_timeout_are_eio_within_the_bound(big, fault_proxy):
    _d, sums, order = big
    a, b = spaced(order, 2)
    with mount("s3://faults-big/ckpt", *via(fault_proxy, "--timeout=2", "--retries=1"),
               timeout=MOUNT_TIMEOUT) as m:
        fault_proxy.add(Fault("delay", seconds=8, count=None))
        r = assert_eio(m, a, sums, timeout=BOUND_S + 30)
        assert r["s"] < BOUND_S, f"EIO after {r['s']:.1f}s (bound {BOUND_S}s)"
        assert r["s"] >= 2 * 0.9, "the timeout is per try: at least one whole --timeout"
        fault_proxy.clear()
        assert_right(m, b, sums)


def test_trickled_body_under_the_timeout(big, fault_proxy):
    _d, sums, order = big
    (a,) = spaced(order, 1)
    with mount("s3://faults-big/ckpt", *via(fault_proxy, "--timeout=10"),
               timeout=MOUNT_TIMEOUT) as m:
        fault_proxy.add(Fault("trickle", chunk=32 << 10, seconds=0.02, count=None))
        assert_right(m, a, sums)


# ---------------------------------------------------------------------------- broken bodies

@pytest.mark.parametrize("kind", ["reset", "short"])
def test_broken_bodies_are_retried_or_eio_never_wrong_bytes(kind, big, fault_proxy):
    _d, sums, order = big
    a, b, c, d = spaced(order, 4)
    with mount("s3://faults-big/ckpt", *via(fault_proxy, "--retries=5"),
               timeout=MOUNT_TIMEOUT) as m:
        before = s3env.remote_stats(m)
        fault_proxy.add(Fault(kind, count=3, after=10_000))
        assert_right(m, a, sums)                   # fewer breaks than retries: retried
        assert s3env.remote_stats(m)["retries"] > before["retries"]
        fault_proxy.clear()
        # every try breaks mid-body: a daemon that resumes from the bytes it got may
        # still assemble the right ones; nothing else is allowed
        fault_proxy.add(Fault(kind, count=None, after=50_000))
        right_or_eio(m, b, sums)
        fault_proxy.clear()
        # every try breaks before the first body byte: no progress is possible, EIO
        fault_proxy.add(Fault(kind, count=None, after=0))
        assert not right_or_eio(m, c, sums), "no body byte ever came: the read cannot succeed"
        fault_proxy.clear()
        assert_right(m, c, sums)
        assert_right(m, b, sums)
        # breaks at several offsets of the body: right bytes or EIO, nothing else
        for after in (1, 4095, 4096, 100_000, 200_000):
            fault_proxy.add(Fault(kind, count=1, after=after))
        right_or_eio(m, d, sums)


# ---------------------------------------------------------------------------- consistency

def assert_if_match(px, etags):
    """Every range GET the proxy saw (since its stats were reset after the mount)
    carried If-Match with the ETag the object had at mount (@etags: {"/BUCKET/KEY":
    etag}; objects not in it: any If-Match)."""
    ranged = [(t, h) for m, t, h in px.snapshot()["requests_log"]
              if m == "GET" and any(k.lower() == "range" for k, _v in h)]
    assert ranged, "no range GET went through the proxy"
    for target, headers in ranged:
        path = target.split("?", 1)[0]
        im = [v for k, v in headers if k.lower() == "if-match"]
        assert im, f"a range GET of {target} without If-Match"
        if path in etags:
            assert im[0].strip('"') == etags[path].strip('"'), (target, im[0], etags[path])


def _two_shards(tmp_path, s3, bucket, seed=7):
    """model-0000{1,2}-of-00002.safetensors + index, 2 tensors of 1 MiB each, uploaded
    to s3://@bucket/ckpt. Returns ({name: sha}, {1: [names], 2: [names]})."""
    d = tmp_path / "two"
    d.mkdir(exist_ok=True)
    raw = {}
    wm = {}
    names = {}
    for k in (1, 2):
        fn = f"model-0000{k}-of-00002.safetensors"
        t = {f"s{k}.a": TSIZE, f"s{k}.b": TSIZE}
        raw.update(_write_safetensors(str(d / fn), t, seed + k))
        wm.update({n: fn for n in t})
        names[k] = sorted(t)
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 4 * TSIZE}, "weight_map": wm}))
    s3env.upload_tree(s3, str(d), bucket, "ckpt")
    return {n: hashlib.sha256(b).hexdigest() for n, b in raw.items()}, names


def test_object_rewritten_after_mount_is_eio(fault_proxy, s3, bucket, tmp_path):
    """Every range GET carries If-Match with the mount's ETag: shard 2 rewritten (same
    size, new bytes) makes the reads that need it EIO; shard 1 still reads."""
    sums, names = _two_shards(tmp_path, s3, bucket)
    etags = {f"/{bucket}/{k}": s3.head_object(Bucket=bucket, Key=k)["ETag"]
             for k in s3env.list_keys(s3, bucket, "ckpt/")}
    with mount(f"s3://{bucket}/ckpt", *via(fault_proxy), timeout=MOUNT_TIMEOUT) as m:
        fault_proxy.reset_stats()  # from here on, every range GET carries If-Match
        size = os.path.getsize(os.path.join(m, "model.safetensors"))
        assert_right(m, names[1][0], sums)
        # Shard 2's tensors are not read before the rewrite: what a mount has
        # fetched (or read ahead of a reader) it may serve, as of the mount's
        # version; what it has not, it must refuse.
        new = bytearray((tmp_path / "two" / "model-00002-of-00002.safetensors").read_bytes())
        for i in range(len(new) - 64, len(new)):     # the last tensor's last bytes
            new[i] ^= 0xFF
        s3.put_object(Bucket=bucket, Key="ckpt/model-00002-of-00002.safetensors",
                      Body=bytes(new))
        assert_eio(m, names[2][1], sums)             # needs the rewritten object
        assert_right(m, names[1][1], sums)           # shard 1: untouched, still served
        r = child_read(tensor_path(m, names[2][0]))  # its first page came at mount:
        assert r["errno"] in (0, errno.EIO)          # old bytes, or EIO; never new ones
        assert r["errno"] or r["sha"] == sums[names[2][0]]
        r = child_read(os.path.join(m, "model.safetensors"))
        assert r["errno"] == errno.EIO, "the whole model needs shard 2: EIO, not new bytes"
        assert os.path.getsize(os.path.join(m, "model.safetensors")) == size
    assert_if_match(fault_proxy, etags)


def test_cache_dir_does_not_serve_a_rewritten_object(fault_proxy, s3, bucket, tmp_path):
    sums, names = _two_shards(tmp_path, s3, bucket)
    cache = tmp_path / "cache"
    cache.mkdir()
    opts = via(fault_proxy, f"--cache-dir={cache}", "--cache-dir-size=64M")
    with mount(f"s3://{bucket}/ckpt", *opts, timeout=MOUNT_TIMEOUT) as m:
        for k in (1, 2):
            for n in names[k]:
                assert_right(m, n, sums)
    new_sums, _ = _two_shards(tmp_path, s3, bucket, seed=99)  # both shards rewritten
    with mount(f"s3://{bucket}/ckpt", *opts, timeout=MOUNT_TIMEOUT) as m:
        for k in (1, 2):
            for n in names[k]:
                assert_right(m, n, new_sums)


# ---------------------------------------------------------------------------- memory, cache, bytes


def test_daemon_memory_is_bounded(moto_server, s3, bucket, tmp_path):
    """64 MiB read through a mount with --block-size=256K and --cache-size=4M: the
    daemon's peak RSS stays under RSS_LIMIT_MIB (blocks in flight, not the file)."""
    if "asan" in os.path.basename(BUILD):
        pytest.skip("sanitizer builds hold freed memory in quarantine")
    d = tmp_path / "huge"
    d.mkdir()
    raw = _write_safetensors(str(d / "model.safetensors"),
                             {f"w{i}": 8 << 20 for i in range(8)}, seed=3)
    s3env.upload_tree(s3, str(d), bucket, "huge")
    want = hashlib.sha256((d / "model.safetensors").read_bytes()).hexdigest()
    del raw
    with mount(f"s3://{bucket}/huge", *remote_opts_direct(moto_server), BLOCK,
               "--cache-size=4M", timeout=MOUNT_TIMEOUT) as m:
        pid = daemon_pid(m)
        r = child_read(os.path.join(m, "model.safetensors"), timeout=300)
        assert r["errno"] == 0 and r["sha"] == want
        for n in os.listdir(os.path.join(m, "tensors")):
            assert child_read(tensor_path(m, n), timeout=120)["errno"] == 0
        hwm = hwm_mib(pid)
        stats = s3env.remote_stats(m)
    assert r["n"] >= 64 << 20
    assert hwm < RSS_LIMIT_MIB, f"daemon peak RSS {hwm:.1f} MiB after reading " \
        f"{stats['bytes_read'] >> 20} MiB ({stats})"


def remote_opts_direct(moto_server):
    return s3env.remote_opts(moto_server.url)


def test_cache_dir_remount_reads_from_disk(big, fault_proxy, tmp_path):
    d, _sums, _order = big
    cache = tmp_path / "cache"
    cache.mkdir()
    want = hashlib.sha256(open(os.path.join(d, "model.safetensors"), "rb").read()).hexdigest()
    opts = via(fault_proxy, f"--cache-dir={cache}", "--cache-dir-size=256M")
    with mount("s3://faults-big/ckpt", *opts, timeout=MOUNT_TIMEOUT) as m:
        r = child_read(os.path.join(m, "model.safetensors"))
        assert r["errno"] == 0 and r["sha"] == want
        first = s3env.remote_stats(m)
    fetched_1 = fault_proxy.snapshot()["body_bytes"]
    assert any(os.scandir(cache)), "--cache-dir holds nothing after a full read"
    fault_proxy.reset_stats()
    with mount("s3://faults-big/ckpt", *opts, timeout=MOUNT_TIMEOUT) as m:
        r = child_read(os.path.join(m, "model.safetensors"))
        assert r["errno"] == 0 and r["sha"] == want
        second = s3env.remote_stats(m)
    fetched_2 = fault_proxy.snapshot()["body_bytes"]
    assert second["disk_hits"] > 0, second
    assert second["bytes_fetched"] <= 0.1 * first["bytes_fetched"], (first, second)
    assert fetched_2 <= 0.1 * fetched_1, (fetched_1, fetched_2)


def test_full_read_fetches_at_most_1_1x(big, fault_proxy):
    d, _sums, _order = big
    size = os.path.getsize(os.path.join(d, "model.safetensors"))
    with mount("s3://faults-big/ckpt", *via(fault_proxy), timeout=MOUNT_TIMEOUT) as m:
        before = s3env.remote_stats(m)
        fault_proxy.reset_stats()
        served = os.path.getsize(os.path.join(m, "model.safetensors"))
        r = child_read(os.path.join(m, "model.safetensors"))
        assert r["errno"] == 0 and r["n"] == served
        after = s3env.remote_stats(m)
    fetched = after["bytes_fetched"] - before["bytes_fetched"]
    wire = fault_proxy.snapshot()["body_bytes"]
    assert_if_match(fault_proxy, {})
    assert fetched <= 1.1 * size, f"fetched {fetched} for a {size}-byte read"
    assert wire <= 1.1 * size, f"{wire} body bytes on the wire for a {size}-byte read"
    assert after["bytes_read"] - before["bytes_read"] >= size - (64 << 10)
    assert fetched >= 0.9 * NT * TSIZE, "remote_stats' bytes_fetched counts the data"


def test_metadata_at_mount_tensor_bytes_on_demand(big, fault_proxy):
    """The mount fetches metadata, not tensors; one tensor's read fetches its aligned
    blocks (each Range starts and ends on a --block-size boundary, or for small reads
    on 16 KiB page boundaries, at most 16 pages, or at the object's end), about its
    own bytes; at most --connections requests are in flight at once."""
    d, sums, order = big
    sizes = {f"/faults-big/ckpt/{f}": os.path.getsize(os.path.join(d, f))
             for f in os.listdir(d)}
    size = os.path.getsize(os.path.join(d, "model.safetensors"))
    block = 256 << 10
    with mount("s3://faults-big/ckpt", *via(fault_proxy, "--connections=2"),
               timeout=MOUNT_TIMEOUT) as m:
        at_mount = fault_proxy.snapshot()
        assert at_mount["body_bytes"] < size // 8, \
            f"{at_mount['body_bytes']} bytes fetched at mount of a {size}-byte checkpoint"
        fault_proxy.reset_stats()
        assert_right(m, order[5], sums)
        one = fault_proxy.snapshot()
        assert one["body_bytes"] <= TSIZE + 4 * block, one["body_bytes"]
        r = child_read(os.path.join(m, "model.safetensors"))
        assert r["errno"] == 0
        s = fault_proxy.snapshot()
    # small reads (headers, a stream's first read) fetch 16 KiB pages, a run of up
    # to 16 consecutive ones per request
    page = 16 << 10
    for method, target, headers in s["requests_log"]:
        rng = [v for k, v in headers if k.lower() == "range"]
        if method != "GET" or not rng:
            continue
        a, _, b = rng[0].removeprefix("bytes=").partition("-")
        end = sizes.get(target.split("?")[0])
        whole = int(a) % block == 0 and ((int(b) + 1) % block == 0 or int(b) + 1 == end)
        unit = block if whole else page
        assert whole or int(b) + 1 - int(a) <= 16 * page, f"{rng[0]}: more than 16 pages"
        assert int(a) % unit == 0, f"{rng[0]}: not on a page or block boundary"
        assert (int(b) + 1) % unit == 0 or int(b) + 1 == end, \
            f"{target} {rng[0]}: does not end on its boundary or at the object's end"
    assert s["max_inflight"] <= 2, f"{s['max_inflight']} requests in flight, --connections=2"
