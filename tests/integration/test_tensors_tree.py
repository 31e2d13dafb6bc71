"""tensors/: one file per tensor with its raw little-endian row-major bytes, names
encoded (`/` -> %2F, `%` -> %25), xattrs user.unshardfs.{dtype,shape,source}, and tied
names as hard links (one inode, st_nlink = names) that du, statfs, find -samefile, cp -a,
rsync -aH and tar all see as one file."""
import collections
import ctypes
import ctypes.util
import errno
import os
import shutil
import stat
import subprocess
import tempfile

import pytest

from conftest import (FIXTURES, SOURCES, mount, parse_header, require_tool, source_tensors,
                      tensor_bytes)

TORCH = os.path.join(FIXTURES, "torch")
REF = os.path.join(TORCH, "_ref")
XATTRS = ["user.unshardfs.dtype", "user.unshardfs.shape", "user.unshardfs.source"]

# torch-made fixtures: id -> SOURCE (tests/fixtures/torch/README.md); each has _ref/<id>.safetensors
TORCH_CASES = {
    "fsdp2_2rank": "fsdp2_2rank", "fsdp2_3rank": "fsdp2_3rank",
    "fsdp1_sharded": "fsdp1_sharded", "dtensor_2d": "dtensor_2d",
    "ddp_compile": "ddp_compile.pt", "ddp_named_params": "ddp_named_params.pt",
    "bin_sharded": "bin_sharded", "single_bin": "single_bin", "accelerate": "accelerate",
    "lightning": "lightning", "zstd": "zstd", "llama_fsdp2": "llama_fsdp2",
}
# fixtures with a tied pair in the source: declared in a shared torch.save storage, or
# saved as two copies by DCP with the writer's evidence (llama_fsdp2's config.json ties
# the embeddings), confirmed by comparing bytes. The other DCP fixtures' Tiny model is
# tied too, but nothing in those checkpoints says so: both names are served.
TIED_CASES = ["single_bin", "ddp_compile", "ddp_named_params", "llama_fsdp2"]

CASES = {**{k: v for k, v in SOURCES.items()},
         **{k: os.path.join(TORCH, v) for k, v in TORCH_CASES.items()}}


def encode(name):
    """The contract's file name of a tensor under tensors/."""
    if name in (".", ".."):
        return "%2E" * len(name)
    return name.replace("%", "%25").replace("/", "%2F")


def reference(case):
    """{name: (dtype, shape, bytes)} of a case, from the source files or torch's _ref/."""
    if case in SOURCES:
        return {n: (d, s, b) for n, (d, s, b, _rel) in source_tensors(SOURCES[case]).items()}
    from safetensors import safe_open
    path = os.path.join(REF, f"{case}.safetensors")
    _n, hdr = parse_header(path)
    out = {}
    with safe_open(path, framework="pt") as f:
        for k in f.keys():
            out[k] = (hdr[k]["dtype"], list(hdr[k]["shape"]), tensor_bytes(f.get_tensor(k)))
    return out


def ref_ties(case):
    import json
    if case in SOURCES:
        return []
    _n, hdr = parse_header(os.path.join(REF, f"{case}.safetensors"))
    return json.loads(hdr.get("__metadata__", {}).get("ties", "[]"))


@pytest.fixture(scope="module", params=sorted(CASES), ids=sorted(CASES))
def mounted(request):
    """(case id, SOURCE, mountpoint): one mount per fixture."""
    case = request.param
    with mount(CASES[case]) as mnt:
        yield case, CASES[case], mnt


def inode_groups(tdir):
    """{st_ino: [names]} of a tensors/ directory."""
    groups = collections.defaultdict(list)
    for e in os.scandir(tdir):
        groups[e.stat(follow_symlinks=False).st_ino].append(e.name)
    return groups


def tied_groups(tdir):
    return sorted(sorted(v) for v in inode_groups(tdir).values() if len(v) > 1)


# ---------------------------------------------------------------- bytes and names

def test_every_tensor_file_has_the_tensors_bytes(mounted):
    case, _src, mnt = mounted
    ref = reference(case)
    tdir = os.path.join(mnt, "tensors")
    assert stat.S_ISDIR(os.stat(tdir).st_mode)
    assert sorted(os.listdir(tdir)) == sorted(encode(n) for n in ref)
    bad = []
    for name, (_dt, _shape, want) in ref.items():
        p = os.path.join(tdir, encode(name))
        st = os.stat(p)
        assert stat.S_ISREG(st.st_mode) and st.st_mode & 0o777 == 0o444, name
        assert st.st_size == len(want), name
        with open(p, "rb") as f:
            if f.read() != want:
                bad.append(name)
    assert not bad, f"{case}: tensors/ bytes differ for {bad}"


def test_partial_reads(mounted):
    case, _src, mnt = mounted
    for name, (_dt, _shape, want) in reference(case).items():
        fd = os.open(os.path.join(mnt, "tensors", encode(name)), os.O_RDONLY)
        try:
            for off in sorted({0, 1, 3, len(want) // 2, max(len(want) - 5, 0), len(want)}):
                assert os.pread(fd, 7, off) == want[off:off + 7], (name, off)
            assert os.pread(fd, 16, len(want) + 3) == b""
        finally:
            os.close(fd)


def test_encoded_names():
    with mount(SOURCES["single"]) as mnt:
        names = set(os.listdir(os.path.join(mnt, "tensors")))
        # source names: "layers/0/attn.weight", "odd%name.bias", and "a%2Fb" (a literal %)
        assert "layers%2F0%2Fattn.weight" in names
        assert "odd%25name.bias" in names
        assert "a%252Fb" in names
        assert "a%2Fb" not in names
        assert not os.path.exists(os.path.join(mnt, "tensors", "layers"))
        want = source_tensors(SOURCES["single"])["layers/0/attn.weight"][2]
        with open(os.path.join(mnt, "tensors", "layers%2F0%2Fattn.weight"), "rb") as f:
            assert f.read() == want


def test_readdir_inode_is_stat_inode(mounted):
    _case, _src, mnt = mounted
    tdir = os.path.join(mnt, "tensors")
    for e in os.scandir(tdir):
        st = os.stat(e.path)
        assert e.inode() == st.st_ino, e.name
    assert os.stat(tdir).st_nlink == 2
    assert os.stat(os.path.join(tdir, "..")).st_ino == os.stat(mnt).st_ino


def test_many_tensors(tmp_path):
    """20k tensors: every name listed and looked up; one tensor per 20 reads back right."""
    import json
    import struct
    n = 20000
    hdr = {f"layers.{i}.w": {"dtype": "U8", "shape": [3], "data_offsets": [3 * i, 3 * i + 3]}
           for i in range(n)}
    raw = json.dumps(hdr).encode()
    raw += b" " * (-len(raw) % 8)
    data = bytes((i * 7) & 255 for i in range(3 * n))
    src = tmp_path / "src"
    src.mkdir()
    (src / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    with mount(str(src)) as mnt:
        tdir = os.path.join(mnt, "tensors")
        assert len(os.listdir(tdir)) == n
        inos = {e.inode() for e in os.scandir(tdir)}
        assert len(inos) == n
        for i in range(0, n, 20):
            with open(os.path.join(tdir, f"layers.{i}.w"), "rb") as f:
                assert f.read() == data[3 * i:3 * i + 3], i


def test_source_dir_named_tensors_is_shadowed(tmp_path):
    """A SOURCE directory called tensors/ is not passed through: the view wins."""
    src = str(tmp_path / "src")
    shutil.copytree(SOURCES["single"], src)
    os.mkdir(os.path.join(src, "tensors"))
    with open(os.path.join(src, "tensors", "mine.txt"), "w") as f:
        f.write("shadowed\n")
    with mount(src) as mnt:
        names = os.listdir(os.path.join(mnt, "tensors"))
        assert "mine.txt" not in names
        assert sorted(names) == sorted(encode(n) for n in source_tensors(SOURCES["single"]))
        assert "notes.txt" in os.listdir(mnt)


# ---------------------------------------------------------------- xattrs

def test_xattrs(mounted):
    case, src, mnt = mounted
    srcdir = src if os.path.isdir(src) else os.path.dirname(src)
    for name, (dt, shape, want) in reference(case).items():
        p = os.path.join(mnt, "tensors", encode(name))
        assert os.listxattr(p) == XATTRS, name
        assert os.getxattr(p, "user.unshardfs.dtype") == dt.encode(), name
        assert os.getxattr(p, "user.unshardfs.shape") == ",".join(map(str, shape)).encode(), name
        source = os.getxattr(p, "user.unshardfs.source").decode()
        if not want:
            continue  # an empty tensor may have no chunks, hence no file
        files = source.split(" (")[0].split(",")
        assert files and all(os.path.isfile(os.path.join(srcdir, r)) for r in files), \
            (name, source)
        if case in SOURCES:
            assert source == source_tensors(src)[name][3], (name, source)


def test_scalar_shape_is_empty():
    with mount(SOURCES["single"]) as mnt:
        p = os.path.join(mnt, "tensors", "f32.scalar")
        assert os.getxattr(p, "user.unshardfs.shape") == b""
        assert os.getxattr(p, "user.unshardfs.dtype") == b"F32"


def test_getfattr_dump():
    require_tool("getfattr")
    with mount(SOURCES["single"]) as mnt:
        r = subprocess.run(["getfattr", "-d", "-m", "user.unshardfs",
                            os.path.join(mnt, "tensors", "bf16.cube")],
                           capture_output=True, text=True, check=True)
    assert 'user.unshardfs.dtype="BF16"' in r.stdout
    assert 'user.unshardfs.shape="2,3,5"' in r.stdout
    assert 'user.unshardfs.source="model.safetensors"' in r.stdout


def _libc():
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.getxattr.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
    libc.getxattr.restype = ctypes.c_ssize_t
    libc.listxattr.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
    libc.listxattr.restype = ctypes.c_ssize_t
    return libc


def test_xattr_size_protocol():
    """size 0 asks for the size; a short buffer is ERANGE; unknown names ENODATA."""
    libc = _libc()
    with mount(SOURCES["single"]) as mnt:
        p = os.path.join(mnt, "tensors", "i32.cube").encode()
        name = b"user.unshardfs.shape"
        assert libc.getxattr(p, name, None, 0) == len(b"2,2,3")
        buf = ctypes.create_string_buffer(64)
        assert libc.getxattr(p, name, buf, 2) == -1 and ctypes.get_errno() == errno.ERANGE
        assert libc.getxattr(p, name, buf, 5) == 5 and buf.raw[:5] == b"2,2,3"
        want = b"".join(x.encode() + b"\0" for x in XATTRS)
        assert libc.listxattr(p, None, 0) == len(want)
        assert libc.listxattr(p, buf, 3) == -1 and ctypes.get_errno() == errno.ERANGE
        assert libc.listxattr(p, buf, 64) == len(want) and buf.raw[:len(want)] == want
        with pytest.raises(OSError) as ei:
            os.getxattr(p, "user.unshardfs.nope")
        assert ei.value.errno == errno.ENODATA
        with pytest.raises(OSError) as ei:
            os.setxattr(p, "user.x", b"1")
        assert ei.value.errno == errno.EROFS


def test_other_nodes_have_no_xattrs():
    """Only tensors/ files describe themselves; the root answers a loader's three
    questions (docs/loader.md, tests/integration/test_loader.py)."""
    root = ["user.unshardfs.source", "user.unshardfs.options", "user.unshardfs.identity"]
    with mount(SOURCES["single"]) as mnt:
        for rel in ["", "tensors", "model.safetensors", "pytorch_model.bin", "notes.txt"]:
            p = os.path.join(mnt, rel)
            assert os.listxattr(p) == (root if rel == "" else []), rel
            with pytest.raises(OSError) as ei:
                os.getxattr(p, "user.unshardfs.dtype")
            assert ei.value.errno == errno.ENODATA, rel


# ---------------------------------------------------------------- ties: hard links

@pytest.fixture(scope="module", params=TIED_CASES, ids=TIED_CASES)
def tied(request):
    """(case, mountpoint, [tied name groups as file names]): every case here has a tie."""
    case = request.param
    with mount(CASES[case]) as mnt:
        groups = tied_groups(os.path.join(mnt, "tensors"))
        assert groups, f"{case}: no tied names are hard links under tensors/"
        yield case, mnt, groups


def test_tied_names_are_one_inode(tied):
    case, mnt, groups = tied
    tdir = os.path.join(mnt, "tensors")
    want = sorted(sorted(encode(n) for n in pair) for pair in ref_ties(case))
    assert groups == want, f"{case}: tied groups {groups}, torch says {want}"
    ref = reference(case)
    for g in groups:
        sts = [os.stat(os.path.join(tdir, n)) for n in g]
        assert len({st.st_ino for st in sts}) == 1, g
        assert all(st.st_nlink == len(g) for st in sts), g
        for n in g:
            with open(os.path.join(tdir, n), "rb") as f:
                assert f.read() == ref[n.replace("%2F", "/").replace("%25", "%")][2], n
    # every other tensor file is a single link
    for ino, names in inode_groups(tdir).items():
        if len(names) == 1:
            assert os.stat(os.path.join(tdir, names[0])).st_nlink == 1, names


def test_ls_li_and_find_samefile(tied):
    _case, mnt, groups = tied
    tdir = os.path.join(mnt, "tensors")
    ls = subprocess.run(["ls", "-li", tdir], capture_output=True, text=True, check=True).stdout
    for g in groups:
        rows = [line.split() for line in ls.splitlines() if line.split()[-1:] and
                line.split()[-1] in g]
        assert len(rows) == len(g), ls
        assert len({r[0] for r in rows}) == 1 and all(r[2] == str(len(g)) for r in rows), rows
        found = subprocess.run(["find", tdir, "-samefile", os.path.join(tdir, g[0])],
                               capture_output=True, text=True, check=True).stdout.split()
        assert sorted(os.path.basename(p) for p in found) == sorted(g)


def _unique_bytes(root):
    seen, total = set(), 0
    for d, _dirs, files in os.walk(root):
        for f in files:
            st = os.stat(os.path.join(d, f))
            if st.st_ino not in seen:
                seen.add(st.st_ino)
                total += st.st_size
    return total


def test_du_and_statfs_count_a_tie_once(tied):
    _case, mnt, groups = tied
    tdir = os.path.join(mnt, "tensors")
    names = os.listdir(tdir)
    all_names = sum(os.stat(os.path.join(tdir, n)).st_size for n in names)
    once = _unique_bytes(tdir)
    assert once < all_names
    du = subprocess.run(["du", "-s", "-b", tdir], capture_output=True, text=True, check=True)
    # du -b adds the directory's own st_size to the apparent size
    assert int(du.stdout.split()[0]) == once + os.stat(tdir).st_size
    du_l = subprocess.run(["du", "-s", "-b", "-l", tdir], capture_output=True, text=True,
                          check=True)
    assert int(du_l.stdout.split()[0]) == all_names + os.stat(tdir).st_size
    sv = os.statvfs(mnt)
    assert sv.f_blocks == (_unique_bytes(mnt) + sv.f_frsize - 1) // sv.f_frsize


def _check_copy(tdir, dst, groups):
    for g in groups:
        inos = {os.stat(os.path.join(dst, n)).st_ino for n in g}
        assert len(inos) == 1, (dst, g)
        assert os.stat(os.path.join(dst, g[0])).st_nlink == len(g)
    for n in os.listdir(tdir):
        with open(os.path.join(tdir, n), "rb") as a, open(os.path.join(dst, n), "rb") as b:
            assert a.read() == b.read(), n


def test_cp_a_keeps_the_link(tied):
    _case, mnt, groups = tied
    tdir = os.path.join(mnt, "tensors")
    with tempfile.TemporaryDirectory() as tmp:
        dst = os.path.join(tmp, "t")
        subprocess.run(["cp", "-a", tdir, dst], check=True, capture_output=True)
        _check_copy(tdir, dst, groups)


def test_rsync_H_keeps_the_link(tied):
    require_tool("rsync")
    _case, mnt, groups = tied
    tdir = os.path.join(mnt, "tensors")
    with tempfile.TemporaryDirectory() as tmp:
        dst = os.path.join(tmp, "t")
        subprocess.run(["rsync", "-aH", tdir + "/", dst + "/"], check=True, capture_output=True)
        _check_copy(tdir, dst, groups)


def test_tar_writes_a_hard_link_entry(tied):
    _case, mnt, groups = tied
    with tempfile.TemporaryDirectory() as tmp:
        tarball = os.path.join(tmp, "t.tar")
        subprocess.run(["tar", "-cf", tarball, "-C", mnt, "tensors"], check=True,
                       capture_output=True)
        listing = subprocess.run(["tar", "-tvf", tarball], capture_output=True, text=True,
                                 check=True).stdout
        for g in groups:
            links = [line for line in listing.splitlines()
                     if " link to " in line and any(f"tensors/{n} link to" in line for n in g)]
            assert len(links) == len(g) - 1, listing
        out = os.path.join(tmp, "x")
        os.mkdir(out)
        subprocess.run(["tar", "-xf", tarball, "-C", out], check=True, capture_output=True)
        _check_copy(os.path.join(mnt, "tensors"), os.path.join(out, "tensors"), groups)
