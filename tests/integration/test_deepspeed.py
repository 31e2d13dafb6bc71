"""DeepSpeed ZeRO checkpoints written by real DeepSpeed (tests/fixtures/deepspeed/, made by
tests/fixtures/make_deepspeed_fixtures.py), mounted and read back with the real clients.
Every view must equal, byte for byte, what DeepSpeed's own
get_fp32_state_dict_from_zero_checkpoint computes (tests/fixtures/deepspeed/_ref/).
Universal checkpoints (uc_*, written by DeepSpeed's ds_to_universal) must equal what
DeepSpeed's own universal load (load_universal) puts in a fresh engine; with
--deepspeed-weights=module a ZeRO-1/2 mount must equal torch.load of the `module` state
dict, bit for bit."""
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

import torch  # noqa: E402

from conftest import FIXTURES, mount, refuse  # noqa: E402
from torchref import compare  # noqa: E402

DS = os.path.join(FIXTURES, "deepspeed")
REF = os.path.join(DS, "_ref")
ZERO_CASES = ["z2_2rank", "z2_3rank_bf16", "z3_2rank", "z3_3rank_bf16", "z3_2rank_bf16_zinit"]
UC_CASES = ["uc_z2_3rank_bf16", "uc_z3_2rank", "uc_z3_2rank_bf16_zinit"]  # ds_to_universal of
# z2_3rank_bf16, z3_2rank, z3_2rank_bf16_zinit (bf16 buffers, served as stored)
CASES = ZERO_CASES + UC_CASES
# DeepSpeed itself (tests/requirements-nobuild.txt) runs in this venv
DS_PY = sys.executable


def load_ref(name, suffix=""):
    import json
    from safetensors import safe_open
    with safe_open(os.path.join(REF, f"{name}{suffix}.safetensors"), framework="pt") as f:
        meta = f.metadata() or {}
        return {k: f.get_tensor(k) for k in f.keys()}, json.loads(meta.get("ties", "[]"))


@pytest.fixture(scope="module", params=CASES, ids=CASES)
def mounted(request):
    with mount(os.path.join(DS, request.param)) as mnt:
        yield request.param, mnt
        gc.collect()


@pytest.mark.parametrize("name", ZERO_CASES)
def test_reference_is_deepspeeds_own(name):
    """The stored _ref/<name>.safetensors is what DeepSpeed's own converter gives for the
    source, in this run: get_fp32_state_dict_from_zero_checkpoint copies the fp32
    partitions (and widens 16-bit frozen weights and buffers, exactly), so the stored
    bytes stand for copied bytes, and any drift of the fixture from its reference shows."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    ref, _ties = load_ref(name)
    sd = get_fp32_state_dict_from_zero_checkpoint(os.path.join(DS, name))
    compare({k: v.detach().contiguous() for k, v in sd.items()}, ref, [], require_all=True,
            what=f"{name} zero_to_fp32")
    assert set(sd) == set(ref)


def test_model_safetensors(mounted):
    from safetensors import safe_open
    name, mnt = mounted
    ref, ties = load_ref(name)
    with safe_open(os.path.join(mnt, "model.safetensors"), framework="pt") as f:
        meta = f.metadata() or {}
        got = {k: f.get_tensor(k).clone() for k in f.keys()}
    gc.collect()
    compare(got, ref, ties, meta, what=f"{name} model.safetensors")
    # the tied pair is stored once
    assert meta.get("head.weight") == "embed.weight" and "head.weight" not in got, meta


def test_pytorch_model_bin(mounted):
    name, mnt = mounted
    ref, ties = load_ref(name)
    got = torch.load(os.path.join(mnt, "pytorch_model.bin"), weights_only=True, mmap=True)
    shared = got["head.weight"].untyped_storage().data_ptr() == \
        got["embed.weight"].untyped_storage().data_ptr()
    copies = {k: v.clone() for k, v in got.items()}
    del got
    gc.collect()
    compare(copies, ref, ties, require_all=True, what=f"{name} pytorch_model.bin")
    assert shared, "tied names do not share a storage"


def test_tied_pair_is_one_inode(mounted):
    _name, mnt = mounted
    a = os.stat(os.path.join(mnt, "tensors", "embed.weight"))
    b = os.stat(os.path.join(mnt, "tensors", "head.weight"))
    assert a.st_ino == b.st_ino and a.st_nlink == 2


def test_optimizer_moments(mounted):
    from safetensors.torch import load_file
    name, mnt = mounted
    want, _ = load_ref(name, ".optimizer")
    got = {k: v.clone() for k, v in load_file(os.path.join(mnt, "optimizer.safetensors")).items()}
    gc.collect()
    compare(got, want, [], require_all=True, what=f"{name} optimizer.safetensors")
    assert set(got) == set(want)


def test_optimizer_json_names_groups(mounted):
    import json
    _name, mnt = mounted
    with open(os.path.join(mnt, "optimizer.json")) as f:
        groups = json.load(f)["param_groups"]
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    assert groups[1]["params"] == ["body.bias"]


def test_tag_directory_itself_mounts():
    from safetensors.torch import load_file
    with mount(os.path.join(DS, "z3_2rank", "global_step2")) as mnt:
        got = {k: v.clone() for k, v in load_file(os.path.join(mnt, "model.safetensors")).items()}
        gc.collect()
    ref, ties = load_ref("z3_2rank")
    assert set(got) == set(ref) - {"head.weight"}


# ---------------------------------------------------------------- universal checkpoints

def _model(mnt):
    from safetensors import safe_open
    with safe_open(os.path.join(mnt, "model.safetensors"), framework="pt") as f:
        meta = f.metadata() or {}
        got = {k: f.get_tensor(k).clone() for k in f.keys()}
    gc.collect()
    return got, meta


@pytest.mark.parametrize("name", UC_CASES)
def test_universal_folder_itself_mounts(name):
    ref, ties = load_ref(name)
    with mount(os.path.join(DS, name, "global_step2_universal")) as mnt:
        got, meta = _model(mnt)
        # the files the checkpoint is made of are not passed through (their folders
        # stay, empty, as the ZeRO tag directory does)
        files = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(mnt, "zero")) for f in fs]
        assert files == [], files
    compare(got, ref, ties, meta, what=f"{name}/global_step2_universal")


def test_universal_serves_the_dropped_names_as_deepspeed_loads_them():
    """ds_to_universal writes zero/<name>/fp32.pt for the tied head.weight and the buffers
    too (upcast from the module); DeepSpeed's loader ignores them: head.weight is
    embed.weight (shared_params) and the int64 buffer stays int64."""
    with mount(os.path.join(DS, "uc_z2_3rank_bf16")) as mnt:
        got, meta = _model(mnt)
    assert meta.get("head.weight") == "embed.weight"
    assert got["count"].dtype == torch.int64


def test_root_with_latest_and_latest_universal(tmp_path):
    """ds_to_universal leaves `latest` (the ZeRO checkpoint, what DeepSpeed loads by
    default) beside `latest_universal`: the root serves the former unless
    --format=deepspeed-universal asks for the latter."""
    root = str(tmp_path / "ckpt")
    shutil.copytree(os.path.join(DS, "z3_2rank"), root)
    shutil.copytree(os.path.join(DS, "uc_z3_2rank", "global_step2_universal"),
                    os.path.join(root, "global_step2_universal"))
    shutil.copy(os.path.join(DS, "uc_z3_2rank", "latest_universal"), root)
    for opts, name in (((), "z3_2rank"), (("--format=deepspeed-universal",), "uc_z3_2rank")):
        ref, ties = load_ref(name)
        with mount(root, *opts) as mnt:
            got, meta = _model(mnt)
        compare(got, ref, ties, meta, what=f"{name} via the root {opts}")


# ---------------------------------------------------------------- --deepspeed-weights=module

def _module_state(name):
    sd = torch.load(os.path.join(DS, name, "global_step2", "mp_rank_00_model_states.pt"),
                    map_location="cpu", weights_only=False)
    return sd["module"]


@pytest.mark.parametrize("name", ["z2_2rank", "z2_3rank_bf16", "uc_z2_3rank_bf16"])
def test_module_weights_equal_torch_load(name):
    src = name if not name.startswith("uc_") else name[3:]
    want = _module_state(src)
    with mount(os.path.join(DS, name), "--deepspeed-weights=module") as mnt:
        got, meta = _model(mnt)
        bin_sd = torch.load(os.path.join(mnt, "pytorch_model.bin"), weights_only=True)
        copies = {k: v.clone() for k, v in bin_sd.items()}
        del bin_sd
        gc.collect()
    assert meta.get("head.weight") == "embed.weight" and set(got) == set(want) - {"head.weight"}
    assert set(copies) == set(want)
    for k, v in want.items():
        for view, t in (("model.safetensors", got.get(k, got["embed.weight"])), ("bin", copies[k])):
            assert t.dtype == v.dtype and t.shape == v.shape, (name, view, k, t.dtype, v.dtype)
            # bits, not values: bf16/fp16 compare exactly as stored
            a = v.contiguous().view(torch.uint8) if v.numel() else v
            b = t.contiguous().view(torch.uint8) if t.numel() else t
            assert torch.equal(a, b), (name, view, k)
    if "bf16" in name:
        assert want["cube"].dtype == torch.bfloat16


def test_module_weights_keep_the_moments():
    from safetensors.torch import load_file
    want, _ = load_ref("z2_3rank_bf16", ".optimizer")
    with mount(os.path.join(DS, "z2_3rank_bf16"), "--deepspeed-weights=module") as mnt:
        got = {k: v.clone() for k, v in load_file(os.path.join(mnt, "optimizer.safetensors")).items()}
        gc.collect()
    compare(got, want, [], require_all=True, what="module optimizer.safetensors")


@pytest.mark.parametrize("name", ["z3_2rank", "uc_z3_2rank"])
def test_module_weights_refused_for_zero3(name):
    path, reason = refuse(os.path.join(DS, name), "--deepspeed-weights=module")
    assert path.endswith("zero_pp_rank_0_mp_rank_00_model_states.pt") and "ZeRO-3" in reason, \
        (path, reason)


def test_deepspeed_weights_bad_value_is_a_usage_error():
    from conftest import BINARY
    r = subprocess.run([BINARY, "inspect", "--deepspeed-weights=fp16", os.path.join(DS, "z2_2rank")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "--deepspeed-weights" in r.stderr, r


# ---------------------------------------------------------------- refusals

def _broken(name, tmp):
    dst = os.path.join(tmp, name)
    shutil.copytree(os.path.join(DS, name), dst)
    return dst, os.path.join(dst, "global_step2")


@pytest.mark.parametrize("name", ["z2_3rank_bf16", "z3_2rank"])
def test_missing_rank_file_refused(name, tmp_path):
    src, step = _broken(name, str(tmp_path))
    victim = [n for n in sorted(os.listdir(step)) if "zero_pp_rank_1_" in n and "optim" in n][0]
    os.unlink(os.path.join(step, victim))
    path, reason = refuse(src)
    assert path == f"global_step2/{victim}" and "missing" in reason, (path, reason)


def test_missing_last_rank_refused(tmp_path):
    src, step = _broken("z2_3rank_bf16", str(tmp_path))
    os.unlink(os.path.join(step, "bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt"))
    path, reason = refuse(src)
    assert path == "global_step2/bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt", (path, reason)
    assert "partition_count is 3" in reason


def test_partition_count_disagrees_refused(tmp_path):
    """A rank file of a 3-rank run dropped into a 2-rank checkpoint."""
    src, step = _broken("z3_2rank", str(tmp_path))
    shutil.copy(os.path.join(DS, "z3_3rank_bf16", "global_step2",
                             "bf16_zero_pp_rank_2_mp_rank_00_optim_states.pt"),
                os.path.join(step, "zero_pp_rank_2_mp_rank_00_optim_states.pt"))
    path, reason = refuse(src)
    assert path.startswith("global_step2/zero_pp_rank_") and "partition_count" in reason, \
        (path, reason)


def test_truncated_optim_file_refused(tmp_path):
    src, step = _broken("z2_2rank", str(tmp_path))
    p = os.path.join(step, "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) // 2)
    path, _reason = refuse(src)
    assert path == "global_step2/zero_pp_rank_1_mp_rank_00_optim_states.pt", path


def _broken_uc(name, tmp):
    dst = os.path.join(tmp, name)
    shutil.copytree(os.path.join(DS, name), dst)
    return dst, os.path.join(dst, "global_step2_universal")


def test_universal_missing_fp32_refused(tmp_path):
    src, step = _broken_uc("uc_z3_2rank", str(tmp_path))
    os.unlink(os.path.join(step, "zero", "cube", "fp32.pt"))
    path, reason = refuse(src)
    assert path == "global_step2_universal/zero/cube/fp32.pt" and "missing" in reason, (path, reason)


def test_universal_truncated_fp32_refused(tmp_path):
    src, step = _broken_uc("uc_z2_3rank_bf16", str(tmp_path))
    p = os.path.join(step, "zero", "body.weight", "fp32.pt")
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) // 2)
    path, _reason = refuse(src)
    assert path == "global_step2_universal/zero/body.weight/fp32.pt", path


def test_universal_wrong_numel_refused(tmp_path):
    """A param's fp32.pt swapped for another param's: its numel disagrees with param_shapes."""
    src, step = _broken_uc("uc_z3_2rank", str(tmp_path))
    shutil.copy(os.path.join(step, "zero", "body.bias", "fp32.pt"),
                os.path.join(step, "zero", "cube", "fp32.pt"))
    path, reason = refuse(src)
    assert path == "global_step2_universal/zero/cube/fp32.pt" and "param_shapes" in reason, \
        (path, reason)


def test_missing_tag_directory_refused(tmp_path):
    src, step = _broken("z2_2rank", str(tmp_path))
    with open(os.path.join(src, "latest"), "w") as f:
        f.write("global_step9")
    shutil.rmtree(step)
    os.mkdir(os.path.join(src, "global_step9"))
    with open(os.path.join(src, "global_step9", "mp_rank_00_model_states.pt"), "wb") as f:
        f.write(b"PK")
    path, reason = refuse(src)
    assert path == "global_step9", (path, reason)


# ---------------------------------------------------------------- memory

def _vmhwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1))


def _daemon_hwm(src):
    """VmHWM of the daemon after reading every tensor through the mount."""
    with mount(src) as mnt:
        pid = int(subprocess.check_output(["pgrep", "-n", "-f", f"unshardfs -f .*{mnt}"]).split()[0])
        for n in os.listdir(os.path.join(mnt, "tensors")):
            with open(os.path.join(mnt, "tensors", n), "rb") as f:
                while f.read(1 << 20):
                    pass
        return _vmhwm_kib(pid)


def test_daemon_memory_flat(tmp_path):
    """The daemon's peak RSS does not grow with the checkpoint (two sizes, 8x apart);
    DeepSpeed's zero_to_fp32 on the big one is measured for comparison."""
    gen = os.path.join(FIXTURES, "make_deepspeed_fixtures.py")
    sizes = {}
    for scale in (16, 128):
        out = str(tmp_path / f"s{scale}")
        # Real DeepSpeed on gloo occasionally aborts a rank at exit ("terminate
        # called without an active exception"); the fixture generator retries
        # for the same reason.
        for attempt in range(3):
            r = subprocess.run([DS_PY, "-c", f"import sys; sys.path.insert(0, {os.path.dirname(gen)!r});"
                                f"import make_deepspeed_fixtures as m; m.train({out!r}, 3, 2, False, {scale})"],
                               capture_output=True, timeout=600)
            if r.returncode == 0:
                break
        assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
        total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(out) for f in fs)
        sizes[scale] = (total, _daemon_hwm(out))
    ds = subprocess.run([DS_PY, "-c",
                         "import resource, sys\n"
                         "from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint as g\n"
                         f"sd = g({str(tmp_path / 's128')!r})\n"
                         "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
                        capture_output=True, text=True, timeout=600)
    (small_b, small_hwm), (big_b, big_hwm) = sizes[16], sizes[128]
    sys.stderr.write(f"deepspeed memory: {small_b}B -> {small_hwm} KiB, {big_b}B -> {big_hwm} KiB; "
                     f"zero_to_fp32 {ds.stdout.strip().splitlines()[-1] if ds.stdout else '?'} KiB\n")
    assert big_b > 4 * small_b
    assert big_hwm < small_hwm * 1.5 + 8192, sizes


def _hf_trainer_dir(tmp_path, keep_tag=True):
    """What transformers' Trainer writes for a DeepSpeed run: the engine's state (latest,
    global_stepN/) beside a 16-bit export (model.safetensors) and config.json."""
    from safetensors.torch import save_file
    src = str(tmp_path / "checkpoint-2")
    shutil.copytree(os.path.join(DS, "z3_2rank"), src)
    ref, _ = load_ref("z3_2rank")
    export = {k: v.to(torch.bfloat16) for k, v in ref.items() if k != "head.weight"}
    save_file(export, os.path.join(src, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src, "config.json"), "w") as f:
        f.write("{}\n")
    if not keep_tag:
        with open(os.path.join(src, "latest")) as f:
            shutil.rmtree(os.path.join(src, f.read().strip()))
    return src, ref, export


def test_hf_trainer_checkpoint_serves_the_fp32_masters(tmp_path):
    """The masters win over the 16-bit export beside them, as they do over a
    pytorch_model.bin; --format=safetensors serves the export."""
    from safetensors.torch import load_file
    src, ref, export = _hf_trainer_dir(tmp_path)
    with mount(src) as mnt:
        got = {k: v.clone() for k, v in load_file(os.path.join(mnt, "model.safetensors")).items()}
        assert os.path.exists(os.path.join(mnt, "optimizer.safetensors"))
        assert os.path.exists(os.path.join(mnt, "config.json"))
        gc.collect()
    assert {k: v.dtype for k, v in got.items()} == {k: v.dtype for k, v in ref.items()
                                                     if k != "head.weight"}
    for k, v in got.items():
        assert torch.equal(v, ref[k]), k
    with mount(src, "--format=safetensors") as mnt:
        got = {k: v.clone() for k, v in load_file(os.path.join(mnt, "model.safetensors")).items()}
        gc.collect()
    assert sorted(got) == sorted(export) and all(torch.equal(got[k], export[k]) for k in got)


def test_pruned_tag_directory_leaves_the_export(tmp_path):
    """latest naming a removed global_stepN/: the model.safetensors there is the model."""
    from safetensors.torch import load_file
    src, _ref, export = _hf_trainer_dir(tmp_path, keep_tag=False)
    with mount(src) as mnt:
        got = {k: v.clone() for k, v in load_file(os.path.join(mnt, "model.safetensors")).items()}
        gc.collect()
    assert sorted(got) == sorted(export)


@pytest.mark.parametrize("latest", [b"", b"/abs", b"../x", b"global_step2/mp_rank_00_model_states.pt"])
def test_broken_latest_leaves_the_export(tmp_path, latest):
    """A latest that leads nowhere (empty, absolute, climbing out, naming a file) beside a
    model.safetensors: the export is the model, as with a removed tag directory; without
    the export, the refusal names latest."""
    from safetensors.torch import load_file
    src, _ref, export = _hf_trainer_dir(tmp_path)
    with open(os.path.join(src, "latest"), "wb") as f:
        f.write(latest)
    with mount(src) as mnt:
        got = {k: v.clone() for k, v in load_file(os.path.join(mnt, "model.safetensors")).items()}
        gc.collect()
    assert sorted(got) == sorted(export)
    os.unlink(os.path.join(src, "model.safetensors"))
    path, reason = refuse(src)
    assert path == "latest", (path, reason)
