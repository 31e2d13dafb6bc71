"""Checkpoints written by real torch training APIs (FSDP2, FSDP1, DTensor 2-D, DDP +
torch.compile + checkpoint_wrapper, HF .bin shards, Accelerate and Lightning layouts, DCP
with zstd), mounted and read back with the real clients. Each view must equal, byte for
byte and name for name, the consolidated and unwrapped state dict torch itself computes
(tests/fixtures/torch/_ref/, see tests/fixtures/make_torch_fixtures.py)."""
import gc
import json
import os
import tempfile

import pytest

import torch  # noqa: E402

from conftest import mount, refuse, tensor_bytes  # noqa: E402
from torchref import (CASES, SOURCE_SHARES_TIES, TORCH_FIXTURES, compare, dcp_state_dict,  # noqa: E402
                      load_optim_json_ref, load_optim_ref, load_ref, passthrough,
                      source)


@pytest.fixture(scope="module", params=sorted(CASES), ids=sorted(CASES))
def mounted(request):
    """(fixture name, mountpoint): one mount per fixture."""
    name = request.param
    with mount(source(name)) as mnt:
        yield name, mnt
        gc.collect()


# ---------------------------------------------------------------- model.safetensors

def test_model_safetensors_load_file(mounted):
    from safetensors.torch import load_file
    name, mnt = mounted
    ref, ties = load_ref(name)
    path = os.path.join(mnt, "model.safetensors")
    got = {k: v.clone() for k, v in load_file(path).items()}
    gc.collect()
    from safetensors import safe_open
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
    assert meta.get("format") == "pt", meta
    compare(got, ref, ties, meta, what=f"{name} model.safetensors (load_file)")


def test_model_safetensors_safe_open(mounted):
    from safetensors import safe_open
    name, mnt = mounted
    ref, ties = load_ref(name)
    with safe_open(os.path.join(mnt, "model.safetensors"), framework="pt") as f:
        meta = f.metadata() or {}
        got = {k: f.get_tensor(k).clone() for k in f.keys()}
        # a slice read (what lazy loaders do) matches too
        bad_slices = []
        for k in f.keys():
            sl = f.get_slice(k)
            if len(sl.get_shape()) >= 1 and sl.get_shape()[0] > 1 and k in ref:
                if tensor_bytes(sl[1:]) != tensor_bytes(ref[k][1:]):
                    bad_slices.append(k)
    gc.collect()
    assert not bad_slices, f"{name}: slice [1:] differs for {bad_slices}"
    compare(got, ref, ties, meta, what=f"{name} model.safetensors (safe_open)")


def test_dropped_ties_are_declared_pairs(mounted):
    """A name left out of model.safetensors is only ever a tied partner of a kept one."""
    from safetensors import safe_open
    name, mnt = mounted
    ref, ties = load_ref(name)
    with safe_open(os.path.join(mnt, "model.safetensors"), framework="pt") as f:
        meta = f.metadata() or {}
        keys = set(f.keys())
    pairs = {frozenset(p) for p in ties}
    for dropped in set(ref) - keys:
        assert frozenset((dropped, meta.get(dropped))) in pairs, (dropped, meta.get(dropped))


# ---------------------------------------------------------------- pytorch_model.bin

def _bin(mnt):
    """Every torch fixture's dtypes are ones torch.save can express, so its mount must
    serve pytorch_model.bin (fs/main.c only leaves it out, with a warning, for F4/F6)."""
    p = os.path.join(mnt, "pytorch_model.bin")
    assert os.path.isfile(p), f"no pytorch_model.bin on the mount: {sorted(os.listdir(mnt))}"
    return p


def _load_bin(p, mmap, ties):
    """torch.load the mounted pytorch_model.bin; returns ({name: private copy}, [tied pairs
    that do NOT share a storage]). Nothing that maps the mount outlives this call (a
    failing assertion's traceback would otherwise keep the mount busy at unmount)."""
    got = torch.load(p, weights_only=True, mmap=mmap, map_location="cpu")
    assert isinstance(got, dict), type(got)
    unshared = [(a, b) for a, b in ties if a in got and b in got and
                got[a].untyped_storage().data_ptr() != got[b].untyped_storage().data_ptr()]
    copies = {k: v.clone() for k, v in got.items()}
    del got
    gc.collect()
    return copies, unshared


@pytest.mark.parametrize("mmap", [False, True], ids=["read", "mmap"])
def test_pytorch_model_bin(mounted, mmap):
    name, mnt = mounted
    p = _bin(mnt)
    ref, ties = load_ref(name)
    from safetensors import safe_open
    with safe_open(os.path.join(mnt, "model.safetensors"), framework="pt") as f:
        meta = f.metadata() or {}
    # tied names must share one storage where the source shares it, and wherever the mount
    # itself treats the pair as tied (one of them dropped from model.safetensors)
    must_share = [(a, b) for a, b in ties
                  if name in SOURCE_SHARES_TIES or meta.get(a) == b or meta.get(b) == a]
    got, unshared = _load_bin(p, mmap, must_share)
    compare(got, ref, ties, require_all=True, what=f"{name} pytorch_model.bin (mmap={mmap})")
    assert not unshared, f"{name}: tied names do not share a storage in pytorch_model.bin: {unshared}"


# ---------------------------------------------------------------- optimizer

def test_optimizer_safetensors(mounted):
    """A fixture with optimizer tensors (it has _ref/<name>.optimizer.safetensors) is
    served them exactly; one without has no optimizer.safetensors at all."""
    name, mnt = mounted
    want = load_optim_ref(name)
    p = os.path.join(mnt, "optimizer.safetensors")
    if want is None:
        assert not os.path.exists(p), f"{name}: optimizer.safetensors without optimizer state"
        return
    assert os.path.isfile(p), f"{name}: no optimizer.safetensors on the mount"
    from safetensors.torch import load_file
    got = {k: v.clone() for k, v in load_file(p).items()}
    gc.collect()
    assert set(got) == set(want), (sorted(set(want) - set(got))[:8],
                                   sorted(set(got) - set(want))[:8])
    compare(got, want, [], require_all=True, what=f"{name} optimizer.safetensors")


def test_optimizer_json(mounted):
    """A fixture with optimizer scalars (it has _ref/<name>.optimizer.json) is served them:
    every hyperparameter the reference has, with the reference's value; one without has
    no optimizer.json."""
    name, mnt = mounted
    want = load_optim_json_ref(name)
    p = os.path.join(mnt, "optimizer.json")
    if want is None:
        assert not os.path.exists(p), f"{name}: optimizer.json without optimizer state"
        return
    assert os.path.isfile(p), f"{name}: no optimizer.json on the mount"
    with open(p) as f:
        got = json.load(f)
    assert "param_groups" in got, sorted(got)
    assert len(got["param_groups"]) == len(want["param_groups"]) > 0
    for i, (g, w) in enumerate(zip(got["param_groups"], want["param_groups"])):
        assert {"lr", "params"} <= set(w), f"{name}: reference group {i} has no lr/params"
        assert g == w, (name, i, {k: (g.get(k), w.get(k)) for k in set(g) | set(w)
                                  if g.get(k) != w.get(k)})
    assert got.get("scalars", {}) == want.get("scalars", {}), name


# ---------------------------------------------------------------- passthrough

def test_passthrough_byte_identical(mounted):
    name, mnt = mounted
    src = source(name)
    for rel in passthrough(name):
        with open(os.path.join(src, rel), "rb") as f:
            want = f.read()
        with open(os.path.join(mnt, rel), "rb") as f:
            got = f.read()
        assert got == want, f"{name}: {rel} differs through the mount"


def test_checkpoint_files_not_passed_through(mounted):
    """The shards themselves are the checkpoint, not extra files."""
    name, mnt = mounted
    top = set(os.listdir(mnt))
    assert "model.safetensors" in top
    assert not any(n.endswith(".distcp") for n in top), sorted(top)
    assert ".metadata" not in top
    assert not any(n.startswith("pytorch_model-") for n in top), sorted(top)


# ---------------------------------------------------------------- llama: transformers

def _llama_reference_dir(d):
    """A directory that from_pretrained loads the reference model from: the fixture's
    config.json and the weights torch's own DCP reader gives for the source, read in this
    test run (torchref.dcp_state_dict). The logits are then computed here, on this CPU,
    for both sides: no float computed on another machine is compared."""
    from safetensors.torch import save_file
    import shutil
    shutil.copy(os.path.join(source("llama_fsdp2"), "config.json"), d)
    sd = dcp_state_dict(source("llama_fsdp2"))["model"]
    save_file({k: v.contiguous() for k, v in sd.items()}, os.path.join(d, "model.safetensors"),
              metadata={"format": "pt"})
    return d


def _llama_logits(path):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(path)
    model.eval()
    # The tie survives the round trip: one parameter under both names.
    assert (model.lm_head.weight.data_ptr() ==
            model.model.embed_tokens.weight.data_ptr()), "lm_head is not tied"
    ids = torch.arange(16).reshape(2, 8) % model.config.vocab_size
    with torch.no_grad():
        logits = model(input_ids=ids).logits.clone()
    del model
    gc.collect()
    return logits


@pytest.fixture(scope="module")
def llama_reference_logits():
    with tempfile.TemporaryDirectory() as d:
        return _llama_logits(_llama_reference_dir(d))


@pytest.mark.logits
def test_llama_from_pretrained_logits(llama_reference_logits):
    with mount(source("llama_fsdp2")) as mnt:
        got = _llama_logits(mnt)
    assert torch.equal(got, llama_reference_logits)


@pytest.mark.logits
def test_llama_from_pretrained_bin_only(llama_reference_logits):
    with mount(source("llama_fsdp2")) as mnt:
        with tempfile.TemporaryDirectory() as d:
            for f in ("config.json", "pytorch_model.bin"):
                os.symlink(os.path.join(mnt, f), os.path.join(d, f))
            got = _llama_logits(d)
    assert torch.equal(got, llama_reference_logits)


# ---------------------------------------------------------------- refusals

@pytest.mark.parametrize("fixture", ["single_bin", "dtensor_2d"])
def test_strided_chunks_with_a_tiny_cache(fixture):
    """Transposed and strided chunks whose storage span the cache cannot hold are read a
    group of rows at a time (exec_cpu.c row_group): the same bytes as torch's."""
    from safetensors import safe_open
    from safetensors.torch import load_file
    ref, ties = load_ref(fixture)
    with mount(source(fixture), "--cache-size=16") as mnt:
        path = os.path.join(mnt, "model.safetensors")
        got = {k: v.clone() for k, v in load_file(path).items()}
        with safe_open(path, framework="pt") as f:
            meta = f.metadata() or {}
        raw = {}
        for k, v in ref.items():
            # every name of these fixtures can be a file name: each has its file
            f = os.path.join(mnt, "tensors", k.replace("%", "%25").replace("/", "%2F"))
            with open(f, "rb") as fh:
                raw[k] = fh.read()
        gc.collect()
    compare(got, ref, ties, meta, what=f"{fixture} with --cache-size=16")
    for k, b in raw.items():
        assert b == tensor_bytes(ref[k]), k


def test_fsdp1_local_state_dict_refused():
    src = os.path.join(TORCH_FIXTURES, "fsdp1_local")
    _path, reason = refuse(src)
    assert "_flat_param" in reason, reason


# ---------------------------------------------------------------- torch.save edge cases
# Small files written here by torch.save itself: what torch.load gives must be what the
# mount serves, or the mount must refuse with one line.

def _save(tmp_path, obj, name="model.pt"):
    src = tmp_path / "src"
    src.mkdir(parents=True)
    torch.save(obj, str(src / name))
    return str(src)


def _served(src):
    from safetensors.torch import load_file
    with mount(src) as mnt:
        got = {k: v.clone() for k, v in load_file(os.path.join(mnt, "model.safetensors")).items()}
        with open(os.path.join(mnt, "pytorch_model.bin"), "rb") as f:
            binv = {k: v.clone() for k, v in torch.load(f, weights_only=True).items()}
        gc.collect()
    assert set(binv) == set(got)
    for k in got:
        assert tensor_bytes(binv[k]) == tensor_bytes(got[k]), k
    return got


@pytest.mark.parametrize("flag", ["conj", "neg"])
def test_lazy_conj_and_neg_views_refused(tmp_path, flag):
    """torch.save keeps t.conj() / a neg view as the stored bytes plus a flag that
    torch.load applies: serving the stored bytes would be silently wrong."""
    x = torch.randn(3, dtype=torch.complex64)
    t = x.conj() if flag == "conj" else torch._neg_view(x)
    src = _save(tmp_path, {"w": t, "ok": torch.ones(2)})
    assert torch.load(os.path.join(src, "model.pt"), weights_only=True)["w"].is_conj() == \
        (flag == "conj")
    path, reason = refuse(src)
    assert path == "model.pt" and "'w'" in reason and "conj" in reason, reason


@pytest.mark.parametrize("key", [True, 1.5, ("a", 1), b"raw", None, "a\0b"],
                         ids=["bool", "float", "tuple", "bytes", "none", "nul"])
def test_tensor_under_a_key_that_cannot_be_a_name_refused(tmp_path, key):
    """Such tensors used to be dropped without a word: a model with weights missing."""
    src = _save(tmp_path, {"model": {key: torch.ones(2), "ok": torch.zeros(3)}})
    path, reason = refuse(src)
    assert path == "model.pt" and "cannot be a tensor name" in reason, reason


def test_keys_that_cannot_be_names_but_hold_no_tensor_are_skipped(tmp_path):
    src = _save(tmp_path, {"w": torch.arange(4.0), (1, 2): "note", None: 3, b"x": [1, 2]})
    assert sorted(_served(src)) == ["w"]


def test_long_and_empty_names_served(tmp_path):
    """A 5000-byte name is served (in model.safetensors and pytorch_model.bin; it has no
    tensors/ file, as no directory entry can be that long). An empty name is refused at
    mount, naming the source file: it would be in two views and missing from tensors/."""
    long = "L" * 5000
    sd = {long: torch.arange(3.0), "ok": torch.zeros(1)}
    got = _served(_save(tmp_path / "long", sd))
    assert sorted(got) == sorted(sd)
    for k, v in sd.items():
        assert tensor_bytes(got[k]) == tensor_bytes(v), k[:20]
    path, reason = refuse(_save(tmp_path / "empty", {**sd, "": torch.ones(2, dtype=torch.int16)}))
    assert path == "model.pt" and "empty name" in reason, reason


@pytest.mark.parametrize("wrap", ["bare", "in_dict"])
def test_pickled_module_refused(tmp_path, wrap):
    """torch.save(model) keeps the tensors in the module's pickled state: an empty mount
    would look like a model with no weights."""
    m = torch.nn.Linear(3, 2)
    src = _save(tmp_path, m if wrap == "bare" else {"model": m, "epoch": 1})
    path, reason = refuse(src)
    assert path == "model.pt" and "nn.Module" in reason, reason


def test_dcp_empty_tensors_and_leading_dots_keep_their_names(tmp_path):
    """Empty DCP tensors have no chunks, so any two looked like the very same bytes
    (a declared tie) and all but one name vanished; a name's leading dots were dropped
    when wrapper segments were removed."""
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file
    sd = {"lora_A": torch.empty(0, 8), "lora_B": torch.empty(0, 8), "e1": torch.empty(0, 8),
          "w": torch.arange(32.0).view(4, 8), ".lead": torch.arange(2.0),
          "..x": torch.arange(3.0), "module..y": torch.arange(4.0)}
    ckpt = str(tmp_path / "ckpt")
    dcp.save({"model": sd}, checkpoint_id=ckpt, no_dist=True)
    want = dict(sd)
    want[".y"] = want.pop("module..y")  # what DDP's consume_prefix("module.") leaves
    with mount(ckpt) as mnt:
        got = {k: v.clone() for k, v in load_file(os.path.join(mnt, "model.safetensors")).items()}
        links = {n: os.stat(os.path.join(mnt, "tensors", n)).st_nlink
                 for n in ("lora_A", "lora_B", "e1")}
        gc.collect()
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert got[k].shape == v.shape and tensor_bytes(got[k]) == tensor_bytes(v), k
    assert links == {"lora_A": 1, "lora_B": 1, "e1": 1}, links


def test_dcp_of_a_bare_optimizer_state_dict(tmp_path):
    """dcp.save(get_optimizer_state_dict(...)) with no container key: "state" is the
    optimizer's, not a model's container; the moments must not be served as weights."""
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    m(torch.randn(2, 4)).sum().backward()
    opt.step()
    osd = get_optimizer_state_dict(m, opt)
    ckpt = str(tmp_path / "optim")
    dcp.save(osd, checkpoint_id=ckpt, no_dist=True)
    with mount(ckpt) as mnt:
        model = load_file(os.path.join(mnt, "model.safetensors"))
        got = {k: v.clone() for k, v in load_file(os.path.join(mnt, "optimizer.safetensors")).items()}
        with open(os.path.join(mnt, "optimizer.json")) as f:
            groups = json.load(f)["param_groups"]
        gc.collect()
    assert model == {}
    want = {f"state.{p}.{s}": v for p, slots in osd["state"].items() for s, v in slots.items()}
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert tensor_bytes(got[k]) == tensor_bytes(v), k
    assert groups[0]["params"] == osd["param_groups"][0]["params"]
    assert groups[0]["lr"] == 1e-2


def test_dcp_of_a_plain_optimizer_state_dict_uses_param_names(tmp_path):
    """opt.state_dict() saved through DCP keys its state by position; built from
    named_parameters() (torch >= 2.6) it carries param_names, which name the tensors and
    "params" as for a torch.save checkpoint."""
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file
    torch.manual_seed(1)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    opt = torch.optim.Adam(m.named_parameters(), lr=1e-2)
    m(torch.randn(2, 4)).sum().backward()
    opt.step()
    osd = opt.state_dict()
    names = osd["param_groups"][0]["param_names"]
    ckpt = str(tmp_path / "ckpt")
    dcp.save({"model": m.state_dict(), "optim": osd}, checkpoint_id=ckpt, no_dist=True)
    with mount(ckpt) as mnt:
        got = {k: v.clone() for k, v in load_file(os.path.join(mnt, "optimizer.safetensors")).items()}
        with open(os.path.join(mnt, "optimizer.json")) as f:
            groups = json.load(f)["param_groups"]
        gc.collect()
    want = {f"state.{names[i]}.{s}": v for i, slots in osd["state"].items() for s, v in slots.items()}
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert tensor_bytes(got[k]) == tensor_bytes(v), k
    assert groups[0]["params"] == names and groups[0]["param_names"] == names



def test_container_rule_keeps_every_real_weight(tmp_path):
    """Beside the model key: training state (an RNG state, a step count, Lightning's
    scalar metrics) is left out; a second set of weights (an EMA copy) is not dropped:
    then every name keeps its top-level key, as without a model key."""
    w = {"a.w": torch.arange(6.0).view(2, 3), "a.b": torch.arange(2.0)}
    ema = {k: v + 1 for k, v in w.items()}
    got = _served(_save(tmp_path / "1", {"state_dict": w, "rng_state": torch.get_rng_state(),
                                          "callbacks": {"ck": {"best": torch.tensor(0.5)}},
                                          "global_step": torch.tensor(7)}))
    assert sorted(got) == ["a.b", "a.w"]
    got = _served(_save(tmp_path / "2", {"state_dict": w, "state_dict_ema": ema}))
    assert sorted(got) == ["state_dict.a.b", "state_dict.a.w",
                           "state_dict_ema.a.b", "state_dict_ema.a.w"]
    assert tensor_bytes(got["state_dict_ema.a.w"]) == tensor_bytes(ema["a.w"])


def test_optimizer_only_torch_save_mounts(tmp_path):
    """No model, an optimizer built from parameters() (no names): nothing to refuse;
    optimizer.json is served."""
    m = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    m(torch.randn(4, 3)).sum().backward()
    opt.step()
    src = _save(tmp_path, {"optimizer": opt.state_dict()})
    with mount(src) as mnt:
        with open(os.path.join(mnt, "optimizer.json")) as f:
            got = json.load(f)
    assert got["param_groups"][0]["lr"] == 1e-3


def test_optimizer_scalars_are_keyed_like_its_tensors(tmp_path):
    """Per-parameter Python values: "state.<unwrapped param>.<slot>" in optimizer.json,
    from torch.save and from DCP (where ids are named by param_names) alike."""
    import torch.distributed.checkpoint as dcp
    m = torch.nn.Sequential(torch.nn.Linear(3, 2))
    opt = torch.optim.Adam(m.named_parameters(), lr=1e-3)
    m(torch.randn(4, 3)).sum().backward()
    opt.step()
    osd = opt.state_dict()
    for slots in osd["state"].values():
        slots["calls"] = 5
    want = {f"state.{n}.calls": 5 for n in osd["param_groups"][0]["param_names"]}
    src = _save(tmp_path, {"model": {"module." + k: v for k, v in m.state_dict().items()},
                           "optimizer": osd})
    ckpt = str(tmp_path / "dcp")
    dcp.save({"model": m.state_dict(), "optim": osd}, checkpoint_id=ckpt, no_dist=True)
    for s in (src, ckpt):
        with mount(s) as mnt:
            with open(os.path.join(mnt, "optimizer.json")) as f:
                got = json.load(f)["scalars"]
        assert {k: v for k, v in got.items() if k.endswith(".calls")} == want, (s, got)
