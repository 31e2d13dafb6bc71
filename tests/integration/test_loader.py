"""The loader (docs/loader.md): unshardfs.load(PATH) against a real mount.

For every checkpoint fixture, unshardfs.load of the mount root and of SOURCE equal the
mount's model.safetensors name for name and byte for byte (dtypes, shapes, tie identity:
tied names are one tensor object exactly where tensors/ has hard links); a fixture the
daemon refuses, the loader refuses too. Then: every --dtype, shard slices, names, the
staging ring (the CUDA path's code, on the CPU), refusals of a changed or unreadable
SOURCE, and the meta-device recipe against from_pretrained.
"""
import gc
import glob
import os
import shutil
import subprocess
import sys

import pytest

from conftest import BUILD, FIXTURES, REPO, SOURCES, mount, tensor_bytes

# This checkout's package and library, whichever checkout set up the venv's .pth.
# The library is the normal build's even in the ASan+UBSan run (where BUILD is
# build-asan/, and the daemon under test is the sanitizer one): an ASan library
# cannot be loaded into a Python that does not start with the ASan runtime. The
# loader's C code runs under the sanitizers in its unit test (tests/unit/test_loader.c).
sys.path.insert(0, os.path.join(REPO, "lib", "python"))
_LIB_BUILD = BUILD if os.path.basename(BUILD.rstrip("/")) != "build-asan" \
    else os.path.join(REPO, "build")
os.environ["UNSHARDFS_LIB"] = os.path.join(_LIB_BUILD, "lib", "loader", "libunshard.so")

import torch  # noqa: E402
import unshardfs  # noqa: E402
from safetensors import safe_open  # noqa: E402


def _fixtures():
    """Every checkpoint under tests/fixtures: the view sources, and each folder or
    .pt file of torch/, deepspeed/, ties/ and ties/adversarial/."""
    out = dict(SOURCES)
    for group in ("torch", "deepspeed", "ties", os.path.join("ties", "adversarial")):
        for p in sorted(glob.glob(os.path.join(FIXTURES, group, "*"))):
            name = os.path.basename(p)
            if name.startswith("_") or name in ("adversarial", "gen") or \
                    not (os.path.isdir(p) or p.endswith(".pt")):
                continue
            out[f"{group}/{name}"] = p
    return out


FIXTURE_PATHS = _fixtures()


def tensors_file(name):
    return name.replace("%", "%25").replace("/", "%2F")


def served(mnt):
    """{name: (dtype, shape, bytes)} and the tie groups (by tensors/ inode) the mount
    serves: model.safetensors' tensors and its "<dropped>": "<kept>" names."""
    path = os.path.join(mnt, "model.safetensors")
    out = {}
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
        for n in f.keys():
            t = f.get_slice(n)
            out[n] = (t.get_dtype(), list(t.get_shape()), tensor_bytes(f.get_tensor(n)))
    for dropped, kept in meta.items():
        if kept in out and dropped not in out:
            out[dropped] = out[kept]
    ino = {n: os.stat(os.path.join(mnt, "tensors", tensors_file(n))).st_ino for n in out}
    return out, ino


def assert_same(sd, want, ino, ld_dtypes):
    assert sorted(sd) == sorted(want)
    for n, (dt, shape, data) in want.items():
        assert ld_dtypes[n] == dt, n
        assert list(sd[n].shape) == shape, n
        assert tensor_bytes(sd[n]) == data, n
    names = sorted(sd)
    for a in names:
        for b in names:
            assert (sd[a] is sd[b]) == (ino[a] == ino[b]), (a, b)


def dtypes_of(path, options=None):
    with unshardfs.Loader(path, options) as ld:
        return {t.name: t.dtype for t in ld.tensors}


def mounts(src):
    """Whether the daemon serves @src (exit 2 before mounting: it refuses it)."""
    r = subprocess.run([os.path.join(BUILD, "fs", "unshardfs"), "inspect", src],
                       capture_output=True, text=True)
    return r.returncode == 0


@pytest.mark.parametrize("name", sorted(FIXTURE_PATHS))
def test_load_equals_mount(name):
    src = FIXTURE_PATHS[name]
    if not mounts(src):
        with pytest.raises(unshardfs.UnshardfsError):
            unshardfs.load(src)
        return
    with mount(src) as mnt:
        want, ino = served(mnt)
        dts = dtypes_of(mnt)
        assert_same(unshardfs.load(mnt), want, ino, dts)
        assert_same(unshardfs.load(src), want, ino, dtypes_of(src))
        with unshardfs.Loader(mnt) as ld:
            assert ld.mounted and ld.source == os.path.realpath(src)


DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
CAST_SOURCES = ["sample", "torch/fsdp2_2rank", "deepspeed/z2_3rank_bf16"]


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", CAST_SOURCES)
def test_dtype_casts(name, dtype):
    """--dtype through the mount's options, the same option given to the loader,
    and load(dtype=) (torch's .to() after the read) all give the mount's bytes."""
    src = FIXTURE_PATHS[name]
    with mount(src, f"--dtype={dtype}") as mnt:
        want, ino = served(mnt)
        assert_same(unshardfs.load(mnt), want, ino, dtypes_of(mnt))
        opts = {"dtype": dtype}
        assert_same(unshardfs.load(src, options=opts), want, ino, dtypes_of(src, opts))
        cast = unshardfs.load(src, dtype=DTYPES[dtype])
        for n, (_dt, _shape, data) in want.items():
            assert tensor_bytes(cast[n]) == data, n


@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_shard_slices(world):
    src = FIXTURE_PATHS["torch/fsdp2_3rank"]
    full = unshardfs.load(src)
    parts = [unshardfs.load(src, shard=(r, world)) for r in range(world)]
    for n, t in full.items():
        chunks = torch.chunk(t, world) if t.dim() else [t] * world
        for r in range(world):
            want = chunks[r] if r < len(chunks) else t[t.shape[0]:]
            assert tensor_bytes(parts[r][n]) == tensor_bytes(want), (n, r)
            assert parts[r][n].shape == want.shape, (n, r)
        if t.dim():
            assert torch.equal(torch.cat([p[n] for p in parts]), t), n


@pytest.mark.parametrize("dim", [1, 2])
@pytest.mark.parametrize("world", [2, 3])
def test_shard_along_another_dim(world, dim, monkeypatch):
    """shard=(rank, world, dim) gives torch.chunk(t, world, dim)[rank] of every tensor
    that has the dim (others whole), the direct read and the staging ring alike
    (slots smaller than one run, and holding a few), on Shard(0), 2-D grid, ZeRO-3
    and 3-D MoE expert tensors."""
    for name in ("torch/fsdp2_3rank", "torch/dtensor_2d", "deepspeed/z3_3rank_bf16",
                 "torchtitan/qwen3_moe/ckpt/step-1", "single", "torch/single_bin"):
        # single: 0-size tensors, (0, 4) and (2, 0, 3), and 0-dim ones
        src = os.path.join(FIXTURES, name)
        full = unshardfs.load(src)
        assert any(t.dim() > dim for t in full.values()) or dim == 2
        for slot in (None, 64, 4096):
            if slot:
                monkeypatch.setattr(unshardfs, "SLOT_BYTES", slot)
            for r in range(world):
                part = unshardfs.load(src, shard=(r, world, dim), staged=bool(slot))
                for n, t in full.items():
                    if t.dim() > dim:
                        chunks = torch.chunk(t, world, dim)
                        want = chunks[r] if r < len(chunks) else t.narrow(dim, 0, 0)
                    else:
                        want = t
                    assert part[n].shape == want.shape, (name, n, r, slot)
                    assert tensor_bytes(part[n]) == tensor_bytes(want.contiguous()), \
                        (name, n, r, slot)
    with pytest.raises(ValueError):
        unshardfs.load(src, shard=(0, 2, -1))


def _bytes_read():
    """This process's bytes read by read(2)/pread(2) so far (/proc/self/io rchar)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


@pytest.mark.parametrize("dim", [0, 1])
def test_shard_reads_only_its_slice(dim, tmp_path):
    """A rank's slice reads its own bytes, not the tensor's: a quarter of each 4 MiB
    tensor of a DCP checkpoint (torch's own writer) along dim 0 or 1 costs about a
    quarter of the whole load's bytes, counted by the kernel (rchar)."""
    import torch.distributed.checkpoint as dcp
    g = torch.Generator().manual_seed(0)
    sd = {f"w{i}": torch.randn(1024, 1024, generator=g) for i in range(2)}
    dcp.save(sd, checkpoint_id=str(tmp_path), no_dist=True)
    r0 = _bytes_read()
    full = unshardfs.load(str(tmp_path))
    r1 = _bytes_read()
    part = unshardfs.load(str(tmp_path), shard=(1, 4, dim))
    r2 = _bytes_read()
    for n, t in sd.items():
        assert torch.equal(full[n], t)
        assert torch.equal(part[n], torch.chunk(t, 4, dim)[1])
    whole, sliced = r1 - r0, r2 - r1
    assert whole >= 8 << 20
    assert sliced < whole * 0.3, (whole, sliced)


def test_shard_keeps_ties_and_refuses_bad_rank():
    src = FIXTURE_PATHS["ties/gpt2_fsdp2"]
    full = unshardfs.load(src)
    tied = [(a, b) for a in full for b in full if a < b and full[a] is full[b]]
    assert tied, "the fixture has a tie"
    part = unshardfs.load(src, shard=(1, 2))
    for a, b in tied:
        assert part[a] is part[b]
    with pytest.raises(ValueError):
        unshardfs.load(src, shard=(2, 2))


def test_names_and_staged_ring(monkeypatch):
    """names= picks tensors (a tied name alone brings its canonical's bytes); the
    staging ring the CUDA path uses, run on the CPU in slots smaller than one tensor,
    gives the same bytes as the direct read."""
    src = FIXTURE_PATHS["ties/gpt2_fsdp2"]
    full = unshardfs.load(src)
    some = sorted(full)[::3]
    part = unshardfs.load(src, names=some)
    assert sorted(part) == some
    for n in some:
        assert torch.equal(part[n], full[n])
    with pytest.raises(KeyError):
        unshardfs.load(src, names=["no.such.tensor"])
    monkeypatch.setattr(unshardfs, "SLOT_BYTES", 4096)
    monkeypatch.setattr(unshardfs, "NSLOTS", 3)
    for shard in (None, (1, 3)):
        ring = unshardfs.load(src, staged=True, shard=shard)
        direct = unshardfs.load(src, shard=shard)
        assert sorted(ring) == sorted(direct)
        for n in direct:
            assert tensor_bytes(ring[n]) == tensor_bytes(direct[n]), n
            assert all((ring[n] is ring[m]) == (direct[n] is direct[m]) for m in direct)


def device_path_on_cpu(monkeypatch, slot, nslots=None):
    """The staging ring with slots of @slot bytes and the chunks placed into their
    boxes (what a CUDA device gets), for staged=True loads on the CPU."""
    import functools
    monkeypatch.setattr(unshardfs, "SLOT_BYTES", slot)
    if nslots:
        monkeypatch.setattr(unshardfs, "NSLOTS", nslots)
    monkeypatch.setattr(unshardfs, "_read_staged",
                        functools.partial(unshardfs._read_staged, on_device=True))


@pytest.mark.parametrize("slot", [4096, 1 << 16])
def test_staged_ring_assembles_chunks_on_the_device(slot, monkeypatch):
    """The CUDA path's gather on the device, run on the CPU: a tensor split along
    another dimension than the first (a 2-D DTensor grid, a ZeRO partition) travels
    chunk by chunk, each read whole (a request with .chunk) and copied into its box;
    the bytes equal the direct read's for every fixture, whole and sharded."""
    device_path_on_cpu(monkeypatch, slot, nslots=2)
    boxed = 0
    for name in ("torch/dtensor_2d", "torch/fsdp2_3rank", "deepspeed/z3_3rank_bf16",
                 "deepspeed/z2_2rank", "torchtitan/qwen3_moe/ckpt/step-1", "sample",
                 "single"):
        src = os.path.join(FIXTURES, name)
        with unshardfs.Loader(src) as ld:
            plan = unshardfs._plan(ld, None, None)
            boxed += sum(unshardfs._box_pieces(ld, k, it, slot) is not None
                         for k, it in enumerate(plan))
        for shard in (None, (1, 3)):
            ring = unshardfs.load(src, staged=True, shard=shard)
            direct = unshardfs.load(src, shard=shard)
            assert sorted(ring) == sorted(direct), name
            for n in direct:
                assert ring[n].shape == direct[n].shape, (name, n)
                assert tensor_bytes(ring[n]) == tensor_bytes(direct[n]), (name, n, shard)
    assert boxed, "no fixture tensor was assembled from its chunks"


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_staged_ring_casts_into_the_destination(dtype, monkeypatch):
    """dtype= through the staging ring: each piece crosses as stored and is cast by
    its copy into the destination (as the device path does), also into a chunk's box
    and into a slice; the bytes equal the direct read's .to(dtype)."""
    device_path_on_cpu(monkeypatch, 4096)
    want_dtype = DTYPES[dtype]
    for name in CAST_SOURCES + ["torch/dtensor_2d", "deepspeed/z3_3rank_bf16", "single"]:
        src = FIXTURE_PATHS[name]
        for shard in (None, (1, 2), (0, 2, 1)):
            ring = unshardfs.load(src, staged=True, dtype=want_dtype, shard=shard)
            direct = unshardfs.load(src, dtype=want_dtype, shard=shard)
            assert sorted(ring) == sorted(direct)
            for n in direct:
                assert ring[n].dtype == direct[n].dtype, (name, n)
                assert tensor_bytes(ring[n]) == tensor_bytes(direct[n]), (name, n, shard)


def test_chunk_requests_read_each_box_and_refuse_a_bad_chunk():
    """read_many with .chunk = k + 1 gives chunk k's box of the tensor, in its own
    row-major order; a chunk past the tensor's is refused in one line."""
    src = os.path.join(FIXTURES, "torch", "dtensor_2d")
    full = unshardfs.load(src)
    with unshardfs.Loader(src) as ld:
        multi = [t for t in ld.tensors if len(ld.chunks(t.index)) > 1]
        assert multi
        for t in multi:
            for k, (o, s) in enumerate(ld.chunks(t.index)):
                box = full[t.name][tuple(slice(a, a + b) for a, b in zip(o, s))]
                out = torch.empty(s, dtype=box.dtype)
                if out.numel():
                    ld.read_many([(t.index, 0, out.numel() * out.element_size(),
                                   out.data_ptr(), k + 1)])
                assert torch.equal(out, box), (t.name, k)
        t = multi[0]
        buf = torch.empty(16, dtype=torch.uint8)
        with pytest.raises(unshardfs.UnshardfsError, match="no chunk"):
            ld.read_many([(t.index, 0, 1, buf.data_ptr(), len(ld.chunks(t.index)) + 1)])


def test_hugepages_give_the_same_bytes(tmp_path):
    """hugepages=True (huge-page advice and prefaulting under every destination of at
    least 2 MiB) reads the same bytes as the default, whole and by shard."""
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(18)
    sd = {"big": torch.randn(1027, 769, generator=g),  # 3.0 MiB, odd row size
          "small": torch.randn(7, 5, generator=g)}
    save_file(sd, str(tmp_path / "model.safetensors"))
    for shard in (None, (1, 3)):
        plain = unshardfs.load(str(tmp_path), shard=shard)
        huge = unshardfs.load(str(tmp_path), shard=shard, hugepages=True)
        assert sorted(huge) == sorted(plain) == ["big", "small"]
        for n in plain:
            assert tensor_bytes(huge[n]) == tensor_bytes(plain[n]), n
    assert torch.equal(unshardfs.load(str(tmp_path), hugepages=True)["big"], sd["big"])


def test_mount_options_must_match():
    src = SOURCES["sample"]
    with mount(src, "--strip-prefix=model.") as mnt:
        with unshardfs.Loader(mnt) as ld:
            assert "strip-prefix=model.," in ld.options
        got = unshardfs.load(mnt, options={"strip_prefix": ["model."]})
        assert "embed_tokens.weight" in got
        with pytest.raises(unshardfs.UnshardfsError, match="mounted with options"):
            unshardfs.load(mnt, options={"dtype": "bf16"})


def test_remote_store_options_reach_the_c_options():
    """The store options (keyword arguments, and the counts in options=) land in
    us_loader_opts field for field (the ctypes layout is the header's): the canonical
    options say each one. A local SOURCE reads as it always does."""
    src = SOURCES["sample"]
    plain = unshardfs.load(src)
    with unshardfs.Loader(src, {"retries": 3, "block_size": 1 << 20, "timeout": 7,
                                "connections": 2, "cache_dir_size": 1 << 30},
                          endpoint_url="http://127.0.0.1:9", region="eu-west-1",
                          profile="p", addressing="path", no_sign_request=True,
                          cache_dir="/nonexistent/c") as ld:
        assert ld.options.endswith(
            ",endpoint-url=http://127.0.0.1:9,region=eu-west-1,profile=p,"
            "addressing=path,no-sign-request=yes,block-size=1048576,"
            "cache-dir=/nonexistent/c,cache-dir-size=1073741824,connections=2,"
            "retries=3,timeout=7"), ld.options
    got = unshardfs.load(src, endpoint_url="http://127.0.0.1:9", no_sign_request=True)
    assert sorted(got) == sorted(plain)
    for n in plain:
        assert tensor_bytes(got[n]) == tensor_bytes(plain[n]), n
    with pytest.raises(unshardfs.UnshardfsError, match="addressing"):
        unshardfs.load(src, addressing="sideways")


def test_changed_source_is_refused(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(SOURCES["sample"], src)
    with mount(str(src)) as mnt:
        unshardfs.load(mnt)
        shard = src / "model-00002-of-00003.safetensors"
        data = shard.read_bytes()
        shard.write_bytes(data)  # the same bytes, rewritten: a new mtime and ctime
        with pytest.raises(unshardfs.UnshardfsError) as ei:
            unshardfs.load(mnt)
        msg = str(ei.value)
        assert "changed since it was mounted" in msg and "\n" not in msg
        assert ei.value.status == "IO"
        unshardfs.load(str(src))  # SOURCE itself is read as it is now


def test_unreadable_source_is_refused(tmp_path):
    """A loader that may see the mount but not its SOURCE says so in one line: root
    without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH (setpriv) is held to the modes."""
    src = tmp_path / "src"
    shutil.copytree(SOURCES["single"], src)
    code = ("import sys, unshardfs\n"
            "try:\n    unshardfs.load(sys.argv[1])\n"
            "except unshardfs.UnshardfsError as e:\n    print(e); sys.exit(3)\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "lib", "python"))
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("setpriv (util-linux) is missing")
    with mount(str(src)) as mnt:
        os.chmod(src, 0)
        try:
            r = subprocess.run([setpriv, "--bounding-set", "-dac_override,-dac_read_search",
                                sys.executable, "-c", code, mnt],
                               capture_output=True, text=True, env=env)
        finally:
            os.chmod(src, 0o755)
    assert r.returncode == 3, r.stderr
    assert "is not readable by this process" in r.stdout, r.stdout
    assert r.stdout.count("\n") == 1


def test_import_needs_no_torch():
    code = "import sys, unshardfs; assert 'torch' not in sys.modules; print('ok')"
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "lib", "python"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=env)
    assert r.stdout.strip() == "ok", r.stderr


def test_meta_model_load_into_matches_from_pretrained():
    """docs/loader.md's recipe: a model built on the meta device, filled from the
    mount, gives from_pretrained's logits exactly (the weights are bit-identical)."""
    from transformers import AutoConfig, AutoModelForCausalLM
    ids = torch.arange(1, 17).reshape(2, 8)
    with mount(SOURCES["sample"]) as mnt:
        ref = AutoModelForCausalLM.from_pretrained(mnt, dtype=torch.float32).eval()
        with torch.no_grad():
            want = ref(ids).logits
        del ref  # its tensors may map the mount's file: let it unmount
        gc.collect()
        config = AutoConfig.from_pretrained(mnt)
        with unshardfs.init_empty():
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        assert all(p.is_meta for p in model.parameters())
        unshardfs.load_into(model, mnt)
        model.eval()
    assert not any(p.is_meta for p in model.parameters())
    with torch.no_grad():
        assert torch.equal(model(ids).logits, want)


def test_load_into_copies_into_a_real_model():
    from transformers import AutoConfig, AutoModelForCausalLM
    src = SOURCES["sample"]
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src),
                                             dtype=torch.float32)
    unshardfs.load_into(model, src)
    sd = unshardfs.load(src)
    for n, t in model.state_dict().items():
        assert torch.equal(t, sd[n]), n
    with pytest.raises(RuntimeError, match="unexpected"):
        unshardfs.load_into(torch.nn.Linear(2, 2), src)


def test_meta_load_into_keeps_the_model_ties():
    """A tied model (gpt2: lm_head.weight is wte.weight) built on meta and filled from a
    DCP checkpoint: the tie is one Parameter again, holding the checkpoint's bytes."""
    from transformers import AutoConfig, AutoModelForCausalLM
    src = FIXTURE_PATHS["ties/gpt2_fsdp2"]
    config = AutoConfig.from_pretrained(src)
    with unshardfs.init_empty():
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    unshardfs.load_into(model, src)
    assert model.lm_head.weight is model.transformer.wte.weight
    sd = unshardfs.load(src)
    for n, t in model.state_dict().items():
        if n in sd:
            assert torch.equal(t, sd[n]), n


def test_gpu_check_script_runs_on_the_cpu():
    """tests/gpu/run.sh's loader check, with --device cpu: the staging ring and every
    comparison it makes on a GPU machine, run here."""
    script = os.path.join(REPO, "tests", "gpu", "loader_gpu.py")
    srcs = [SOURCES["sample"], FIXTURE_PATHS["ties/gpt2_fsdp2"],
            FIXTURE_PATHS["deepspeed/z2_3rank_bf16"]]
    r = subprocess.run([sys.executable, script, "check", "--device", "cpu", *srcs],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("ok: ") == len(srcs)


TT = os.path.join(FIXTURES, "torchtitan")
RECIPES = {"llama3": "torchtitan-llama3", "llama3_tied": "torchtitan-llama3",
           "qwen3": "torchtitan-qwen3", "qwen3_moe": "torchtitan-qwen3",
           "deepseek_v3": "torchtitan-deepseek-v3",
           "deepseek_v3_mtp": "torchtitan-deepseek-v3"}


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_mount_loads_as_served(name, monkeypatch):
    """A mount with --recipe and --overlay (both change names and bytes) tells the
    loader both, the overlay as an absolute path though it was given relative."""
    src = os.path.join(TT, name, "ckpt", "step-1")
    monkeypatch.chdir(os.path.join(TT, name))
    opts = {"recipe": RECIPES[name], "overlay": os.path.join(TT, name, "hf")}
    with mount(src, f"--recipe={RECIPES[name]}", "--overlay=hf") as mnt:
        want, ino = served(mnt)
        with unshardfs.Loader(mnt) as ld:
            assert f"recipe={RECIPES[name]}" in ld.options
            assert "overlay=" + opts["overlay"] in ld.options
        assert_same(unshardfs.load(mnt), want, ino, dtypes_of(mnt))
        assert_same(unshardfs.load(src, options=opts), want, ino, dtypes_of(src, opts))
        with pytest.raises(unshardfs.UnshardfsError):
            unshardfs.load(mnt, options={"recipe": RECIPES[name]})  # no overlay
