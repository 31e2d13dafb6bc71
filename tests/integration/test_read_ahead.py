"""The mount's request size and read-ahead (issue 5; docs/troubleshooting.md).

unshardfs asks for max_read = the largest reply of up to five spliced pieces that fits
a pipe of /proc/sys/fs/pipe-max-size (at most the kernel's 1 MiB), and, as root, raises
its bdi's read_ahead_kb to four such requests at the first open: the cold-read
benchmark (b) depends on both, and nothing else would notice them gone.
"""
import os

import pytest

from conftest import SOURCES, mount

PAGE = 4096
SPLICE_SEGS = 5  # fs/ops.c
READ_AHEAD_REQS = 4  # fs/ops.h


def expected_max_read():
    with open("/proc/sys/fs/pipe-max-size") as f:
        pipe_max = int(f.read())
    slack = (SPLICE_SEGS + 3) * PAGE
    b = 128 << 10
    if pipe_max > slack + b:
        b = pipe_max - slack
    b -= b % PAGE
    return min(b, 1 << 20)


def mount_options(mnt):
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == mnt:
                return fields[5].split(",") + line.split(" - ")[1].split()[2].split(",")
    raise AssertionError(f"{mnt} not in /proc/self/mountinfo")


def bdi_read_ahead(mnt):
    st = os.stat(mnt)
    with open(f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/read_ahead_kb") as f:
        return int(f.read())


def test_max_read_and_read_ahead():
    want = expected_max_read()
    with mount(SOURCES["sample"]) as mnt:
        assert f"max_read={want}" in mount_options(mnt)
        with open(os.path.join(mnt, "model.safetensors"), "rb") as f:
            f.read(1)
        if os.geteuid() != 0:
            pytest.skip("raising read_ahead_kb needs root")
        assert bdi_read_ahead(mnt) == READ_AHEAD_REQS * want // 1024
