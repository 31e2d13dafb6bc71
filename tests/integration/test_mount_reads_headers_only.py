"""At mount, unshardfs reads only the shards' headers: no read (or mapping) of a shard
goes past 8 + header_len. Checked by running the daemon under strace."""
import glob
import os
import re
import shutil

import pytest

from conftest import SOURCES, checkpoint_files, mount, parse_header, require_tool


LINE = re.compile(r"^(?P<ts>\d+\.\d+) (?P<call>\w+)\((?P<args>.*)\) += (?P<ret>-?\d+|0x[0-9a-f]+|\?)")
FD = re.compile(r"^(-?\d+)<(.*?)>$")


def split_args(s):
    """Split strace's argument text on top-level commas (strings/brackets kept whole)."""
    out, depth, cur, i, in_str = [], 0, [], 0, False
    while i < len(s):
        c = s[i]
        if in_str:
            cur.append(c)
            if c == "\\":
                cur.append(s[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            cur.append(c)
        elif c in "[{(<":
            depth += 1
            cur.append(c)
        elif c in "]})>":
            depth -= 1
            cur.append(c)
        elif c == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    if cur:
        out.append("".join(cur).strip())
    return out


def parse_events(prefix):
    events = []
    for path in glob.glob(prefix + ".*"):
        tid = path.rsplit(".", 1)[1]
        with open(path, errors="replace") as f:
            for raw in f:
                m = LINE.match(raw.strip())
                if m:
                    events.append((float(m["ts"]), tid, m["call"], split_args(m["args"]), m["ret"]))
    events.sort(key=lambda e: e[0])
    return events


def fd_path(arg):
    m = FD.match(arg)
    return (int(m.group(1)), m.group(2)) if m else (None, None)


def test_mount_reads_only_headers(tmp_path):
    src = SOURCES["sample"]
    limits = {}
    for rel in checkpoint_files(src):
        p = os.path.realpath(os.path.join(src, rel))
        n, _ = parse_header(p)
        limits[p] = 8 + n
    prefix = str(tmp_path / "trace")
    # LeakSanitizer cannot run under ptrace: turn it off should this be an ASan build
    wrapper = ["env", "ASAN_OPTIONS=detect_leaks=0", require_tool("strace"), "-ff", "-ttt", "-y", "-s", "0", "-o", prefix,
               "-e", "trace=openat,open,close,lseek,read,pread64,readv,preadv,preadv2,mmap"]
    with mount(src, wrapper=wrapper, timeout=30) as mnt:
        assert os.path.exists(os.path.join(mnt, "model.safetensors"))
    events = parse_events(prefix)
    assert events, "strace recorded nothing"
    pos = {}            # fd -> current file position (for read/readv)
    seen = set()
    violations = []
    for _ts, tid, call, args, ret in events:
        if not args:
            continue
        fd, path = fd_path(args[0]) if call not in ("mmap",) else fd_path(args[4] if len(args) > 4 else "")
        if call in ("openat", "open"):
            if ret.lstrip("-").isdigit() and int(ret) >= 0:
                pos[int(ret)] = 0
            continue
        if fd is None:
            continue
        if call == "close":
            pos.pop(fd, None)
            continue
        if call == "lseek":
            if ret.isdigit():
                pos[fd] = int(ret)
            continue
        real = os.path.realpath(path)
        if ret in ("?",) or ret.startswith("-"):
            continue
        if call in ("read", "readv"):
            n = int(ret)
            start = pos.get(fd, 0)
            pos[fd] = start + n
            end = start + n
        elif call in ("pread64", "preadv", "preadv2"):
            n = int(ret)
            start = int(args[3] if call == "pread64" else args[3], 0)
            end = start + n
        elif call == "mmap":
            start = int(args[5], 0)
            end = start + int(args[1], 0)
        else:
            continue
        if real in limits:
            seen.add(real)
            if end > limits[real]:
                violations.append(f"{call} of {os.path.basename(real)} [{start}, {end}) "
                                  f"past header end {limits[real]}")
    assert seen, "no read of any shard was traced (is strace -y working?)"
    assert not violations, violations


def storage_ranges(src):
    """Byte ranges of every tensor storage record inside every DCP item, per file:
    what a mount must not read (it may read item zips' headers and data.pkl)."""
    import io
    import pickle
    import struct
    import zipfile

    with open(os.path.join(src, ".metadata"), "rb") as f:
        meta = pickle.load(f)
    ranges = {}
    for info in meta.storage_data.values():
        path = os.path.realpath(os.path.join(src, info.relative_path))
        with open(path, "rb") as f:
            f.seek(info.offset)
            item = f.read(info.length)
        z = zipfile.ZipFile(io.BytesIO(item))
        for e in z.infolist():
            if "/data/" not in e.filename or e.file_size == 0:
                continue
            n, x = struct.unpack("<HH", item[e.header_offset + 26:e.header_offset + 30])
            start = info.offset + e.header_offset + 30 + n + x
            ranges.setdefault(path, []).append((start, start + e.file_size))
    return ranges


@pytest.mark.parametrize("fixture", ["fsdp2_3rank", "dtensor_2d"])
def test_dcp_mount_reads_only_metadata_and_item_headers(tmp_path, fixture):
    """With --ties=declared (no tie confirming, which compares tensor bytes), mounting a
    DCP checkpoint reads .metadata and each item's zip headers and data.pkl only."""
    from conftest import FIXTURES
    src = os.path.join(FIXTURES, "torch", fixture)
    forbidden = storage_ranges(src)
    prefix = str(tmp_path / "trace")
    wrapper = ["env", "ASAN_OPTIONS=detect_leaks=0", require_tool("strace"), "-ff", "-ttt", "-y", "-s", "0", "-o", prefix,
               "-e", "trace=openat,pread64,read,mmap"]
    with mount(src, "--ties=declared", wrapper=wrapper, timeout=30) as mnt:
        assert os.path.exists(os.path.join(mnt, "model.safetensors"))
    seen, violations = set(), []
    for _ts, _tid, call, args, ret in parse_events(prefix):
        if call != "pread64" or not args or not ret.isdigit():
            continue
        fd, path = fd_path(args[0])
        real = os.path.realpath(path or "")
        if real not in forbidden:
            continue
        seen.add(real)
        start = int(args[3], 0)
        end = start + int(ret)
        for a, b in forbidden[real]:
            if start < b and a < end:
                violations.append(f"pread of {os.path.basename(real)} [{start}, {end}) "
                                  f"touches tensor data [{a}, {b})")
    assert seen, "no read of any .distcp file was traced"
    assert not violations, violations[:5]
