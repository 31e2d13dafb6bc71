"""A hostile data.pkl cannot make the mount take memory: the pickle VM charges every node,
string, stack and memo slot against a budget that grows with the archive's records (the
tensors it holds), and refuses while it runs (lib/codec/pickle.c, docs/hardening.md).

Each case is a real torch.save archive (tests/fixtures/torch/single_bin) whose data.pkl
keeps the model under "model" and adds, under "junk", one of: nested one-key dicts (8 MB
and 32 MB of pickle), nested lists (16 MB), or a MEMOIZE flood (4 M). Before the bound,
these peaked at 278 MB, 1.1 GB, 708 MB and 204 MB. Now each is refused with one line
naming the archive, and the process's peak RSS stays at most 256 MiB."""
import io
import os
import subprocess
import sys
import zipfile

import pytest

from conftest import BINARY, BUILD, FIXTURES, require_binary

LIMIT_MIB = 256
SOURCE_BIN = os.path.join(FIXTURES, "torch", "single_bin", "pytorch_model.bin")


def key(s):
    b = s.encode()
    return b"X" + len(b).to_bytes(4, "little") + b


def nested_dicts(nbytes):
    levels = nbytes // 8  # "}" + X\1\0\0\0a + "s"
    return (b"}" + key("a")) * levels + b"N" + b"s" * levels


def nested_lists(nbytes):
    levels = nbytes // 2  # "]" ... "a"
    return b"]" * levels + b"N" + b"a" * levels


def memo_flood(n):
    return b"N" + b"\x94" * n


JUNK = {
    "dicts_8MB": lambda: nested_dicts(8 << 20),
    "dicts_32MB": lambda: nested_dicts(32 << 20),
    "lists_16MB": lambda: nested_lists(16 << 20),
    "memoize_4M": lambda: memo_flood(4 << 20),
}


def hostile_archive(dst, junk):
    """single_bin's archive with data.pkl = {"model": <its state dict>, "junk": junk}."""
    with zipfile.ZipFile(SOURCE_BIN) as z:
        names = z.namelist()
        pkl_name = next(n for n in names if n.endswith("/data.pkl"))
        orig = z.read(pkl_name)
        assert orig[:2] == b"\x80\x02" and orig[-1:] == b".", "not a protocol-2 pickle"
        body = orig[2:-1]
        pkl = b"\x80\x02}(" + key("model") + body + key("junk") + junk + b"u."
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
            for n in names:
                zout.writestr(n, pkl if n == pkl_name else z.read(n))
    os.makedirs(dst)
    with open(os.path.join(dst, "pytorch_model.bin"), "wb") as f:
        f.write(out.getvalue())
    return dst


# Fork from a small process: a child's ru_maxrss starts at its parent's size at fork
# (Linux keeps the high-water mark across exec), and pytest's is hundreds of MiB.
MEASURE = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_pid, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_measured(argv):
    """(exit status, stderr, peak RSS in MiB) of one run of @argv."""
    r = subprocess.run([sys.executable, "-S", "-c", MEASURE, *argv], capture_output=True,
                       text=True, timeout=120)
    return r.returncode, r.stderr, int(r.stdout.split()[-1]) / 1024


@pytest.mark.parametrize("case", sorted(JUNK))
def test_hostile_pickle_refused_within_bound(tmp_path, case):
    require_binary()
    src = hostile_archive(str(tmp_path / "src"), JUNK[case]())
    rc, err, peak = run_measured([BINARY, "inspect", src])
    lines = err.strip().splitlines()
    assert rc == 2, (rc, err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("unshardfs: pytorch_model.bin: "), lines
    if "asan" not in os.path.basename(BUILD):  # ASan's shadow and quarantine are its own
        assert peak <= LIMIT_MIB, f"{case}: peak RSS {peak:.0f} MiB > {LIMIT_MIB} MiB"


def test_the_same_archive_without_junk_mounts(tmp_path):
    """The construction itself is sound: with harmless junk the archive is served."""
    require_binary()
    src = hostile_archive(str(tmp_path / "src"), b"N")
    rc, err, _peak = run_measured([BINARY, "inspect", src])
    assert rc == 0, err
