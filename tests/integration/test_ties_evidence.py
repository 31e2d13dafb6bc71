"""Ties only on evidence (docs/ties.md, issue 16), against checkpoints written by the real
writers (tests/fixtures/make_tie_fixtures.py).

DCP saves each name of a tied parameter as its own copy. Equal bytes are not a tie:
after one AdamW step a BERT's LayerNorm weights are byte-equal across layers, and a
step-0 nn.TransformerEncoder holds the same bytes in every (deep-copied) layer. Only what
the writer leaves beside the copies -- its optimizer (which lists a shared parameter
once) and an HF config.json (tie_word_embeddings) -- may propose a tie; equal bytes only
confirm it. Every reference here is torch's own DCP loading, computed in the test.
"""
import gc
import json
import os
import shutil

import pytest

from conftest import FIXTURES, mount, tensor_bytes

torch = pytest.importorskip("torch")

TIES = os.path.join(FIXTURES, "ties")
WRAPPERS = {"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod",
            "_forward_module", "_fpw_module"}

# The pairs transformers ties from tie_word_embeddings (each model class's
# _tied_weights_keys): {dropped-or-kept name: its partner}
HF_TIES = {
    "bert": [("cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight"),
             ("cls.predictions.decoder.bias", "cls.predictions.bias")],
    "gpt2": [("lm_head.weight", "transformer.wte.weight")],
    "llama": [("lm_head.weight", "model.embed_tokens.weight")],
}
TRUE_TIES = {
    "gpt2_fsdp2": "gpt2",
    "llama_fsdp2_optim": "llama",
    "bert_fsdp2": "bert",
    "bert_fsdp1_step1": "bert",
    "bert_fsdp1_step1_model": "bert",
}


def fixture(name):
    return os.path.join(TIES, name)


def unwrap(name):
    return ".".join(s for s in name.split(".") if s not in WRAPPERS)


def torch_ref(path):
    """{name: tensor}: the model as torch's own dcp_to_torch_save loads it, unwrapped."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
    sd = {}
    _load_state_dict(sd, storage_reader=FileSystemReader(path),
                     planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    return {unwrap(k): v for k, v in sd["model"].items()}


def constant(t):
    f = t.reshape(-1)
    return f.numel() < 2 or bool((f == f[0]).all())


def equal_groups(ref):
    """Groups of names whose tensors have equal dtype, shape and bytes (non-constant)."""
    by = {}
    for n, t in ref.items():
        if not constant(t):
            by.setdefault((t.dtype, tuple(t.shape), tensor_bytes(t)), []).append(n)
    return [sorted(g) for g in by.values() if len(g) > 1]


def read_safetensors(mnt):
    from safetensors import safe_open
    with safe_open(os.path.join(mnt, "model.safetensors"), framework="pt") as f:
        # private copies: a tensor that maps the file would keep the mount busy
        return {k: f.get_tensor(k).clone() for k in f.keys()}, (f.metadata() or {})


def assert_every_name_served(mnt, ref, allowed_drops=()):
    """model.safetensors holds every name of @ref byte for byte, except the pairs of
    @allowed_drops, of which one name may be left out and recorded as a tie."""
    got, meta = read_safetensors(mnt)
    assert set(got) <= set(ref), sorted(set(got) - set(ref))
    partners = {}
    for a, b in allowed_drops:
        partners.setdefault(a, set()).add(b)
        partners.setdefault(b, set()).add(a)
    for n, want in ref.items():
        if n in got:
            assert got[n].dtype == want.dtype and tuple(got[n].shape) == tuple(want.shape), n
            assert tensor_bytes(got[n]) == tensor_bytes(want), f"{n}: bytes differ"
            continue
        kept = meta.get(n)
        assert kept in partners.get(n, ()), \
            f"{n} is missing from model.safetensors (metadata says {kept!r}): not a tie"
        assert kept in got
    return got, meta


def from_pretrained(mnt, kind):
    """The model loaded from the mount, with nothing missing, unexpected or mismatched.
    It maps model.safetensors: check it, then `del` it before unmounting."""
    import transformers
    cls = {"bert": transformers.BertForMaskedLM, "gpt2": transformers.GPT2LMHeadModel,
           "llama": transformers.LlamaForCausalLM}[kind]
    model, info = cls.from_pretrained(mnt, output_loading_info=True)
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info.get(k), f"from_pretrained: {k} = {info.get(k)}"
    return model


def assert_model_is_ref(model, ref):
    """Every parameter and buffer of the loaded model equals the checkpoint's, byte for
    byte: nothing was re-initialised."""
    sd = model.state_dict()
    for n, want in ref.items():
        assert n in sd, n
        assert tensor_bytes(sd[n].detach()) == tensor_bytes(want), f"{n}: not the checkpoint's"


def load_and_check(mnt, kind, ref, tied=None):
    """from_pretrained(mnt) loads every parameter as stored; @tied: a pair that must be
    one parameter in the loaded model."""
    model = from_pretrained(mnt, kind)
    try:
        assert_model_is_ref(model, ref)
        if kind == "bert":
            ln = model.bert.encoder.layer[1].attention.output.LayerNorm.weight
            assert not torch.all(ln == 1.0), "a LayerNorm was re-initialised to 1.0"
        if tied:
            sd = model.state_dict()
            assert sd[tied[0]].data_ptr() == sd[tied[1]].data_ptr(), "not tied"
    finally:
        del model
        gc.collect()


# ------------------------------------------------------------------ false ties

def test_fixtures_hold_false_ties():
    """The fixtures still show the two cases of issue 16 (else the tests prove nothing)."""
    bert = torch_ref(fixture("bert_fsdp1_step1"))
    a = "bert.encoder.layer.1.attention.output.LayerNorm.weight"
    b = "bert.encoder.layer.0.output.LayerNorm.weight"
    assert any(a in g and b in g for g in equal_groups(bert)), equal_groups(bert)
    enc = torch_ref(fixture("encoder_seed_fsdp2"))
    copies = {n for g in equal_groups(enc) for n in g if not n.startswith("layers.0.")}
    assert len(copies) == 12, sorted(copies)


@pytest.mark.parametrize("name", ["bert_fsdp1_step1", "bert_fsdp1_step1_model",
                                  "encoder_seed_fsdp2"])
def test_false_ties_keep_every_parameter(name):
    ref = torch_ref(fixture(name))
    with mount(fixture(name)) as mnt:
        allowed = HF_TIES["bert"] if name.startswith("bert") else ()
        assert_every_name_served(mnt, ref, allowed)
        # in tensors/, equal copies of distinct parameters are distinct inodes
        tdir = os.path.join(mnt, "tensors")
        for g in equal_groups(ref):
            if any(set(p) <= set(g) for p in allowed):
                continue
            inodes = {os.stat(os.path.join(tdir, n)).st_ino for n in g}
            assert len(inodes) == len(g), g


@pytest.mark.parametrize("name", ["bert_fsdp1_step1", "bert_fsdp1_step1_model"])
def test_false_ties_from_pretrained(name):
    ref = torch_ref(fixture(name))
    with mount(fixture(name)) as mnt:
        load_and_check(mnt, "bert", ref)


def test_equal_opt_in_links_equal_copies():
    """--ties=equal is the old rule, documented as risky: it drops the 12 deep copies."""
    ref = torch_ref(fixture("encoder_seed_fsdp2"))
    with mount(fixture("encoder_seed_fsdp2"), "--ties=equal") as mnt:
        got, meta = read_safetensors(mnt)
    dropped = sorted(set(ref) - set(got))
    assert len(dropped) == 12 and all(meta[n].startswith("layers.0.") for n in dropped)


# ------------------------------------------------------------------ true ties

def assert_tied(mnt, pairs):
    got, meta = read_safetensors(mnt)
    tdir = os.path.join(mnt, "tensors")
    bin_sd = torch.load(os.path.join(mnt, "pytorch_model.bin"), weights_only=True, mmap=True)
    for a, b in pairs:
        assert os.stat(os.path.join(tdir, a)).st_ino == os.stat(os.path.join(tdir, b)).st_ino, \
            f"{a} and {b} are not one inode"
        assert os.stat(os.path.join(tdir, a)).st_nlink == 2
        assert (bin_sd[a].untyped_storage().data_ptr() ==
                bin_sd[b].untyped_storage().data_ptr()), f"{a}, {b}: two storages"
        assert (a in got) != (b in got)
        dropped, kept = (b, a) if a in got else (a, b)
        assert meta.get(dropped) == kept


def assert_untied(mnt, pairs):
    got, meta = read_safetensors(mnt)
    tdir = os.path.join(mnt, "tensors")
    for a, b in pairs:
        assert a in got and b in got and a not in meta and b not in meta
        assert os.stat(os.path.join(tdir, a)).st_ino != os.stat(os.path.join(tdir, b)).st_ino


@pytest.mark.parametrize("name", sorted(TRUE_TIES))
def test_true_ties_are_one_tensor(name):
    kind = TRUE_TIES[name]
    ref = torch_ref(fixture(name))
    for a, b in HF_TIES[kind]:
        assert tensor_bytes(ref[a]) == tensor_bytes(ref[b])
    with mount(fixture(name)) as mnt:
        assert_every_name_served(mnt, ref, HF_TIES[kind])
        assert_tied(mnt, HF_TIES[kind])


@pytest.mark.parametrize("name", ["gpt2_fsdp2", "llama_fsdp2_optim", "bert_fsdp2"])
def test_true_ties_from_pretrained(name):
    kind = TRUE_TIES[name]
    ref = torch_ref(fixture(name))
    with mount(fixture(name)) as mnt:
        load_and_check(mnt, kind, ref, tied=HF_TIES[kind][0])


# ------------------------------------------------------------------ each kind of evidence

def copy_with_config(tmp_path, name, edit):
    """A copy of fixture @name whose config.json is edit(dict) (None: no config.json)."""
    dst = str(tmp_path / name)
    shutil.copytree(fixture(name), dst)
    cfg_path = os.path.join(dst, "config.json")
    with open(cfg_path) as f:
        cfg = edit(json.load(f))
    if cfg is None:
        os.unlink(cfg_path)
    else:
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
    return dst


def without(key):
    return lambda c: {k: v for k, v in c.items() if k != key}


@pytest.mark.parametrize("name", ["gpt2_fsdp2", "llama_fsdp2_optim", "bert_fsdp1_step1"])
def test_optimizer_alone_is_no_evidence(tmp_path, name):
    """get_optimizer_state_dict lists a shared parameter once, but it leaves out frozen
    copies too (an EMA, a teacher, PEFT's original_module): without config.json a true
    tie is served as two names (always loadable), never guessed."""
    src = copy_with_config(tmp_path, name, lambda c: None)
    ref = torch_ref(src)
    with mount(src) as mnt:
        assert_every_name_served(mnt, ref)
        assert_untied(mnt, HF_TIES[TRUE_TIES[name]])


def test_no_evidence_serves_both_names(tmp_path):
    """A model-only DCP with no config.json says nothing: both names are served (always
    loadable), even though their bytes are equal."""
    src = copy_with_config(tmp_path, "bert_fsdp2", lambda c: None)
    ref = torch_ref(src)
    with mount(src) as mnt:
        assert_every_name_served(mnt, ref)
        assert_untied(mnt, HF_TIES["bert"])


def test_absent_key_uses_the_model_types_default(tmp_path):
    """A config.json without tie_word_embeddings (transformers 4 wrote none where it
    was true): BERT's default is tied."""
    src = copy_with_config(tmp_path, "bert_fsdp2", without("tie_word_embeddings"))
    ref = torch_ref(src)
    with mount(src) as mnt:
        assert_tied(mnt, HF_TIES["bert"])
        load_and_check(mnt, "bert", ref)


def test_explicit_false_is_no_tie(tmp_path):
    src = copy_with_config(tmp_path, "bert_fsdp2", lambda c: {**c, "tie_word_embeddings": False})
    ref = torch_ref(src)
    with mount(src) as mnt:
        assert_untied(mnt, HF_TIES["bert"])
        load_and_check(mnt, "bert", ref)


def test_llama_without_the_key_is_no_tie(tmp_path):
    """transformers 5 reads an absent tie_word_embeddings of a Llama as false, so a
    dropped lm_head would be re-initialised: without the key (and without an optimizer)
    both names are served, and from_pretrained loads both."""
    dst = str(tmp_path / "llama")
    shutil.copytree(os.path.join(FIXTURES, "torch", "llama_fsdp2"), dst)
    with open(os.path.join(dst, "config.json")) as f:
        cfg = json.load(f)
    del cfg["tie_word_embeddings"]
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f)
    ref = torch_ref(dst)
    with mount(dst) as mnt:
        assert_untied(mnt, HF_TIES["llama"])
        load_and_check(mnt, "llama", ref)


def test_declared_mode_reads_no_evidence():
    with mount(fixture("gpt2_fsdp2"), "--ties=declared") as mnt:
        assert_untied(mnt, HF_TIES["gpt2"])


# ---------------------------------------------------------------- adversarial review

ADV = os.path.join(TIES, "adversarial")
ADV_FALSE = ["c1b_teacher_head_warmup_step1", "c2_frozen_out_proj", "c3_buffer_copy",
             "c4c_ema_bare_linear", "c5_peft_modules_to_save",
             "h1d_llama_embed_lr0_head_frozen_3steps", "h6_tied_student_teacher_copy_model",
             "h6_tied_student_teacher_copy_optim", "f1acc_llama_untied_frozen_head_copy_warmup"]
ADV_TRUE = ["h5c_llama_tied_plain_optim", "f2_llama_tied_model"]


@pytest.mark.parametrize("name", ADV_FALSE)
def test_adversarial_copies_keep_every_name(name):
    """Frozen copies, EMA/teacher copies, a buffer copy, PEFT's two heads: equal bytes,
    names the optimizer leaves out, even a config.json of the student; none is a tie.
    Every name is served, byte-exact against torch's own DCP loading."""
    src = os.path.join(ADV, name)
    dcp_dir = (os.path.join(src, "pytorch_model_fsdp_0")
               if os.path.isdir(os.path.join(src, "pytorch_model_fsdp_0")) else src)
    ref = torch_ref(dcp_dir)
    with mount(src) as mnt:
        assert_every_name_served(mnt, ref)
        inos = [os.stat(e.path).st_ino for e in os.scandir(os.path.join(mnt, "tensors"))]
        assert len(inos) == len(set(inos)), f"{name}: tied names under tensors/"


@pytest.mark.parametrize("name", ADV_TRUE)
def test_adversarial_true_ties_stay_linked(name):
    with mount(os.path.join(ADV, name)) as mnt:
        assert_tied(mnt, HF_TIES["llama"])
