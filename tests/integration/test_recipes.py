"""Recipes (issue 19, docs/recipes.md): a torchtitan checkpoint mounted with --recipe and
--overlay serves Hugging Face's names and layouts, lazily.

For each torchtitan 0.3.0 fixture (tests/fixtures/make_torchtitan_fixtures.py): every
tensor of model.safetensors, pytorch_model.bin and tensors/ equals, byte for byte,
torchtitan's own state_dict_adapter.to_hf applied to the consolidated state dict (loaded
here with torch's DCP reader); from_pretrained(mnt) loads every parameter, and its logits
match the torchtitan model's on the same input, both computed in this test process.
"""
import gc
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES, mount, parse_header, refuse, run_cli, tensor_bytes

sys.path.insert(0, FIXTURES)
import make_torchtitan_fixtures as ttf  # noqa: E402

TT = os.path.join(FIXTURES, "torchtitan")
DOCS = os.path.join(os.path.dirname(FIXTURES), "..", "lib", "recipes", "builtin")
NAMES = sorted(ttf.FIXTURES)


def ckpt(name):
    return os.path.join(TT, name, "ckpt", "step-1")


def overlay(name):
    return os.path.join(TT, name, "hf")


def recipe_opts(name, recipe=None):
    return [f"--recipe={recipe or ttf.RECIPE[name]}", f"--overlay={overlay(name)}"]


_REF = {}


def reference(name):
    """(torchtitan state dict, to_hf of it): torchtitan's own conversion, computed here."""
    if name not in _REF:
        from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "assuming ... a single process"
            sd = _load_state_dict_from_keys(checkpoint_id=ckpt(name))
        cfg = ttf.FIXTURES[name][0]()
        _REF[name] = (sd, ttf.adapter(name, cfg).to_hf(dict(sd)))
    return _REF[name]


def hf_config(name):
    with open(os.path.join(overlay(name), "config.json")) as f:
        return json.load(f)


def tied(name):
    return hf_config(name).get("tie_word_embeddings", False)


def mtp_prefixes(name):
    """The HF names of DeepSeek-V3's multi-token-prediction layers start so: numbered
    after the num_hidden_layers main layers (as to_hf numbers them)."""
    c = hf_config(name)
    n = c["num_hidden_layers"]
    return tuple(f"model.layers.{n + k}." for k in range(c.get("num_nextn_predict_layers", 0)))


def check_loading_info(name, info, hf):
    """from_pretrained found every parameter of the model.  transformers 5.24's
    DeepseekV3ForCausalLM has no MTP layers (only MtpModel.from_pretrained loads them,
    finding them by the 671B model's pattern, model.layers.61.*): it reports
    the MTP layers' tensors, and only them, as unexpected (their experts fused, as it
    names them)."""
    info = dict(info)
    unexpected = set(info.pop("unexpected_keys"))
    assert not any(info.values()), info  # missing, mismatched, errors
    pre = mtp_prefixes(name)
    assert all(k.startswith(pre) for k in unexpected) if pre else not unexpected, unexpected
    assert {k for k in hf if pre and k.startswith(pre) and ".mlp.experts." not in k} \
        <= unexpected


def served_names(name, hf):
    """to_hf drops lm_head.weight of a tied model; the mount links it (one storage in
    pytorch_model.bin, a hard link in tensors/), and model.safetensors leaves it out."""
    return set(hf) | ({"lm_head.weight"} if tied(name) else set())


def expected(name, hf, key):
    return hf["model.embed_tokens.weight" if key not in hf else key]


@pytest.mark.parametrize("name", NAMES)
def test_views_equal_to_hf(name):
    import torch
    from safetensors import safe_open
    _sd, hf = reference(name)
    with mount(ckpt(name), *recipe_opts(name)) as mnt:
        st = os.path.join(mnt, "model.safetensors")
        with safe_open(st, framework="pt") as f:
            assert set(f.keys()) == set(hf)
            for k in f.keys():
                assert tensor_bytes(f.get_tensor(k)) == tensor_bytes(hf[k]), k
                assert list(f.get_tensor(k).shape) == list(hf[k].shape), k
        _n, hdr = parse_header(st)
        if tied(name):
            assert hdr["__metadata__"]["lm_head.weight"] == "model.embed_tokens.weight"
        binsd = torch.load(os.path.join(mnt, "pytorch_model.bin"), weights_only=True)
        assert set(binsd) == served_names(name, hf)
        for k, v in binsd.items():
            assert tensor_bytes(v) == tensor_bytes(expected(name, hf, k)), k
        tdir = os.path.join(mnt, "tensors")
        assert set(os.listdir(tdir)) == served_names(name, hf)
        for k in os.listdir(tdir):
            with open(os.path.join(tdir, k), "rb") as f:
                assert f.read() == tensor_bytes(expected(name, hf, k)), k
            shape = os.getxattr(os.path.join(tdir, k), "user.unshardfs.shape").decode()
            assert shape == ",".join(map(str, expected(name, hf, k).shape)), k


def _logits_torchtitan(name, sd, tok):
    import torch
    model = ttf.build_model(ttf.FIXTURES[name][0]())
    model.load_state_dict(sd)
    model.eval()
    pos = torch.arange(tok.shape[1]).unsqueeze(0)
    with torch.no_grad():
        out = model(tok, pos, model.get_attention_masks(pos))
    return out[0] if isinstance(out, list) else out  # with MTP: [main, depth 1, ...]


@pytest.mark.parametrize("name", NAMES)
def test_from_pretrained_matches_torchtitan(name):
    import torch
    import transformers
    sd, hf = reference(name)
    tok = torch.tensor([[1, 5, 9, 3, 7, 2, 11, 4, 63, 0]])
    want = _logits_torchtitan(name, sd, tok)
    with mount(ckpt(name), *recipe_opts(name)) as mnt:
        assert os.path.isfile(os.path.join(mnt, "config.json"))
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            mnt, output_loading_info=True, dtype=torch.float32)
        model.eval()
        check_loading_info(name, info, hf)
        with torch.no_grad():
            got = model(tok).logits
        del model  # its weights map model.safetensors: unmap before unmounting
        gc.collect()
    # two implementations of one model in float32: MoE routing and MLA order their sums
    # differently, so the bound is loose next to float32's 1e-7, tight next to the
    # logits' size (a wrong permutation or split is off by O(1))
    assert torch.allclose(got, want, rtol=1e-3, atol=1e-3), (got - want).abs().max()


@pytest.mark.parametrize("name", NAMES)
def test_auto_picks_the_builtin(name):
    _sd, hf = reference(name)
    r = run_cli("inspect", "--json", "--recipe=auto", f"--overlay={overlay(name)}", ckpt(name))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["recipe"] == ttf.RECIPE[name]
    assert {t["name"] for t in doc["tensors"]} == served_names(name, hf)


@pytest.mark.parametrize("name", NAMES)
def test_user_recipe_reproduces_builtin(name, tmp_path):
    """lib/recipes/builtin/<builtin>.json, given as a FILE, serves the very same bytes."""
    user = tmp_path / "mine.json"
    shutil.copy(os.path.join(DOCS, ttf.RECIPE[name] + ".json"), user)
    with mount(ckpt(name), *recipe_opts(name)) as a, \
            mount(ckpt(name), *recipe_opts(name, str(user))) as b:
        for f in ("model.safetensors", "pytorch_model.bin"):
            with open(os.path.join(a, f), "rb") as x, open(os.path.join(b, f), "rb") as y:
                assert x.read() == y.read(), f


def test_hint_without_recipe():
    """Without --recipe the names stay as stored, and one stderr line says which
    recipe would apply."""
    r = run_cli("inspect", ckpt("llama3"))
    assert r.returncode == 0
    assert "tok_embeddings.weight" in r.stdout
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and "torchtitan-llama3" in lines[0], lines
    assert lines[0].startswith("unshardfs: note: ")


def test_inspect_reports_rules_sources_and_drops():
    r = run_cli("inspect", "--json", *recipe_opts("qwen3"), ckpt("qwen3"))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    by = {t["name"]: t for t in doc["tensors"]}
    q = by["model.layers.1.self_attn.q_norm.weight"]
    assert q["recipe_rule"] == 6 and q["source_names"] == ["layers.1.attention.q_norm.weight"]
    r = run_cli("inspect", "--json", *recipe_opts("deepseek_v3"), ckpt("deepseek_v3"))
    doc = json.loads(r.stdout)
    by = {t["name"]: t for t in doc["tensors"]}
    e = by["model.layers.1.mlp.experts.3.down_proj.weight"]
    assert e["source_names"] == ["layers.1.moe.routed_experts.inner_experts.w2_EDF"]
    assert doc["recipe_dropped"] == []
    text = run_cli("inspect", *recipe_opts("llama3"), ckpt("llama3")).stdout
    assert "recipe torchtitan-llama3" in text
    assert "rule 2 <- layers.0.attention.qkv_linear.wq.weight" in text


def test_inspect_lists_dropped(tmp_path):
    """A rule that drops a tensor is reported: nothing disappears silently."""
    with open(os.path.join(DOCS, "torchtitan-llama3.json")) as f:
        rec = json.load(f)
    rec["rules"] = [r for r in rec["rules"] if r["from"] != "norm.weight"]
    rec["rules"].append({"from": "norm.weight", "drop": True})
    p = tmp_path / "r.json"
    p.write_text(json.dumps(rec))
    r = run_cli("inspect", "--json", f"--recipe={p}", f"--overlay={overlay('llama3')}",
                ckpt("llama3"))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["recipe_dropped"] == [{"name": "norm.weight", "recipe_rule": len(rec["rules"])}]
    assert "model.norm.weight" not in {t["name"] for t in doc["tensors"]}
    text = run_cli("inspect", f"--recipe={p}", f"--overlay={overlay('llama3')}",
                   ckpt("llama3")).stdout
    assert "dropped by the recipe: norm.weight (rule" in text


def test_recipe_refuses_other_models_checkpoint():
    path, why = refuse(ckpt("llama3"), "--recipe=torchtitan-deepseek-v3",
                       f"--overlay={overlay('llama3')}")
    assert "matches no rule of recipe torchtitan-deepseek-v3" in why


def test_rope_permute_needs_head_dim():
    path, why = refuse(ckpt("llama3"), "--recipe=torchtitan-llama3")
    assert path == "torchtitan-llama3" and "head_dim" in why and "rule 2" in why


def test_mtp_layers_numbered_after_main_layers():
    """torchtitan's mtp_layers.{k}.* are served as HF's model.layers.{N + k}.*, N the
    main layers config.json counts (num_hidden_layers), mtp_norm as shared_head.norm,
    the stacked experts split; exactly the names and tensors to_hf makes of them."""
    _sd, hf = reference("deepseek_v3_mtp")
    pre = mtp_prefixes("deepseek_v3_mtp")
    assert pre == ("model.layers.2.",)
    want = {k for k in hf if k.startswith(pre)}
    assert "model.layers.2.shared_head.norm.weight" in want
    assert "model.layers.2.mlp.experts.3.down_proj.weight" in want
    assert "model.layers.2.self_attn.q_a_proj.weight" in want  # q LoRA
    r = run_cli("inspect", "--json", *recipe_opts("deepseek_v3_mtp"), ckpt("deepseek_v3_mtp"))
    assert r.returncode == 0, r.stderr
    by = {t["name"]: t for t in json.loads(r.stdout)["tensors"]}
    assert {k for k in by if k.startswith(pre)} == want
    assert all(by[k]["source_names"][0].startswith("mtp_layers.0.") for k in want)
    assert by["model.layers.2.shared_head.norm.weight"]["source_names"] == \
        ["mtp_layers.0.mtp_norm.weight"]


def test_mtp_logits_match_torchtitan():
    """The MTP layer as served computes what torchtitan's does: transformers' MtpModel
    (5.24: what generate(use_mtp=True) drafts with), loaded from the mount once told
    the layer's number (DeepseekV3's own pattern names the 671B model's layer 61), fed
    the main model's last hidden state before the final norm and the tokens shifted
    by one, gives torchtitan's depth-1 logits.  The last position is left out:
    torchtitan zeroes it (no next token), HF's drafting never computes it."""
    import torch
    import transformers
    from transformers.modeling_layers import MtpModel
    name = "deepseek_v3_mtp"
    sd, _hf = reference(name)
    tok = torch.tensor([[1, 5, 9, 3, 7, 2, 11, 4, 63, 0]])
    model = ttf.build_model(ttf.FIXTURES[name][0]())
    model.load_state_dict(sd)
    model.eval()
    pos = torch.arange(tok.shape[1]).unsqueeze(0)
    with torch.no_grad():
        _main, want = model(tok, pos, model.get_attention_masks(pos))
    with mount(ckpt(name), *recipe_opts(name)) as mnt:
        main = transformers.AutoModelForCausalLM.from_pretrained(mnt, dtype=torch.float32)
        main.eval()
        main._keys_to_ignore_on_load_unexpected = [r"model\.layers\.2\..*"]
        mtp = MtpModel.from_pretrained(main)  # raises if a weight is missing
        mtp.eval()
        last = {}
        main.model.layers[-1].register_forward_hook(
            lambda _m, _i, o: last.__setitem__("h", o[0] if isinstance(o, tuple) else o))
        shifted = torch.cat([tok[:, 1:], torch.zeros_like(tok[:, :1])], 1)
        with torch.no_grad():
            main(tok)
            got = mtp._project_to_logits(mtp.forward_layer(0, last["h"], pos, None,
                                                           input_ids=shifted))
        del main, mtp
        gc.collect()
    assert torch.allclose(got[:, :-1], want[:, :-1], rtol=1e-3, atol=1e-3), \
        (got - want)[:, :-1].abs().max()


def test_mtp_offset_needs_num_hidden_layers(tmp_path):
    """The MTP rules' offset is config.json's num_hidden_layers: without a config.json
    that gives it, the mount is refused in one line naming the rule; a checkpoint
    without MTP layers needs none (the rule is not used)."""
    path, why = refuse(ckpt("deepseek_v3_mtp"), "--recipe=torchtitan-deepseek-v3")
    assert path == "torchtitan-deepseek-v3", (path, why)
    assert "rule " in why and "'{k}'" in why and '"num_hidden_layers"' in why, why
    ov = tmp_path / "hf"
    ov.mkdir()
    c = hf_config("deepseek_v3_mtp")
    del c["num_hidden_layers"]
    (ov / "config.json").write_text(json.dumps(c))
    path, why = refuse(ckpt("deepseek_v3_mtp"), "--recipe=torchtitan-deepseek-v3",
                       f"--overlay={ov}")
    assert '"num_hidden_layers"' in why, why
    r = run_cli("inspect", "--recipe=torchtitan-deepseek-v3", ckpt("deepseek_v3"))
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_overlay_wins_over_source_file(tmp_path):
    """An --overlay file replaces a SOURCE file of the same name (the user asked for
    it); other SOURCE files still pass through; the views are never shadowed."""
    src = tmp_path / "src"
    shutil.copytree(ckpt("llama3"), src)
    (src / "config.json").write_text('{"from": "source"}')
    (src / "notes.txt").write_text("source notes")
    ov = tmp_path / "ov"
    shutil.copytree(overlay("llama3"), ov)
    (ov / "tokenizer_config.json").write_text("{}")
    (ov / "model.safetensors").write_text("not a view")
    os.mkdir(ov / "sub")  # only the directory's regular files are added
    with mount(str(src), "--recipe=torchtitan-llama3", f"--overlay={ov}") as mnt:
        names = set(os.listdir(mnt))
        assert {"config.json", "notes.txt", "tokenizer_config.json"} <= names
        assert "sub" not in names
        with open(os.path.join(mnt, "config.json")) as f:
            assert json.load(f)["model_type"] == "llama"
        with open(os.path.join(mnt, "notes.txt")) as f:
            assert f.read() == "source notes"
        with open(os.path.join(mnt, "model.safetensors"), "rb") as f:
            assert f.read(8) != b"not a vi"


def test_overlay_missing_dir_is_usage_error(tmp_path):
    r = run_cli("inspect", f"--overlay={tmp_path}/nope", ckpt("llama3"))
    assert r.returncode == 1
    assert r.stderr.startswith("unshardfs: ") and "--overlay" in r.stderr
    assert len(r.stderr.splitlines()) == 1


def test_dash_o_forms():
    with mount(ckpt("llama3"), "-o", f"recipe=torchtitan-llama3,overlay={overlay('llama3')}") as mnt:
        assert "model.layers.0.self_attn.q_proj.weight" in os.listdir(os.path.join(mnt, "tensors"))
        assert os.path.isfile(os.path.join(mnt, "config.json"))


QKV = ["layers.{i}.attention.qkv_linear.w%s.weight" % p for p in "qkv"]
FFN = ["layers.{i}.feed_forward.w%s.weight" % p for p in "13"]
WO_W2 = ["layers.{i}.attention.wo.weight", "layers.{i}.feed_forward.w2.weight"]


def concat_recipe(tmp_path):
    """The Llama 3 built-in with q/k/v fused along dim 0 (one chunk each), w1/w3 along
    dim 0 (two chunks each: FSDP shards), and wo/w2 along dim 1, cast to F16 (chunks cut
    the other dim)."""
    with open(os.path.join(DOCS, "torchtitan-llama3.json")) as f:
        rec = json.load(f)
    used = set(QKV + FFN + WO_W2)
    rec["rules"] = [r for r in rec["rules"] if r["from"] not in used]
    rec["rules"] += [
        {"from": QKV, "to": "model.layers.{i}.self_attn.qkv_proj.weight", "concat": {"dim": 0}},
        {"from": FFN, "to": "model.layers.{i}.mlp.gate_up_proj.weight", "concat": {"dim": 0}},
        {"from": WO_W2, "to": "model.layers.{i}.wo_w2", "concat": {"dim": 1}, "cast": "F16"},
    ]
    p = tmp_path / "concat.json"
    p.write_text(json.dumps(rec))
    return p


def test_concat_equals_torch_cat(tmp_path):
    """Each concat output equals torch.cat of its sources (as torchtitan stored them),
    in every view; inspect names the first input as its source."""
    import torch
    from safetensors import safe_open
    sd, _hf = reference("llama3")
    want = {}
    for i in (0, 1):
        src = lambda pats: [sd[p.replace("{i}", str(i))] for p in pats]  # noqa: E731
        want[f"model.layers.{i}.self_attn.qkv_proj.weight"] = torch.cat(src(QKV), 0)
        want[f"model.layers.{i}.mlp.gate_up_proj.weight"] = torch.cat(src(FFN), 0)
        want[f"model.layers.{i}.wo_w2"] = torch.cat(src(WO_W2), 1).to(torch.float16)
    rp = concat_recipe(tmp_path)
    with mount(ckpt("llama3"), f"--recipe={rp}", f"--overlay={overlay('llama3')}") as mnt:
        with safe_open(os.path.join(mnt, "model.safetensors"), framework="pt") as f:
            for k, v in want.items():
                assert f.get_tensor(k).dtype == v.dtype, k
                assert list(f.get_tensor(k).shape) == list(v.shape), k
                assert tensor_bytes(f.get_tensor(k)) == tensor_bytes(v), k
        binsd = torch.load(os.path.join(mnt, "pytorch_model.bin"), weights_only=True)
        for k, v in want.items():
            assert tensor_bytes(binsd[k]) == tensor_bytes(v), k
            with open(os.path.join(mnt, "tensors", k), "rb") as f:
                assert f.read() == tensor_bytes(v), k
        assert not any("qkv_linear" in k or "feed_forward" in k for k in binsd)
    r = run_cli("inspect", "--json", f"--recipe={rp}", f"--overlay={overlay('llama3')}",
                ckpt("llama3"))
    assert r.returncode == 0, r.stderr
    by = {t["name"]: t for t in json.loads(r.stdout)["tensors"]}
    assert by["model.layers.1.self_attn.qkv_proj.weight"]["source_names"] == \
        ["layers.1.attention.qkv_linear.wq.weight"]


@pytest.mark.parametrize("name", NAMES)
def test_export_with_overlay_loads(name, tmp_path):
    """export --recipe --overlay CKPT OUT/ writes a directory from_pretrained loads,
    every parameter found, each equal to the same model loaded from the mount; the
    files are the mount's (model.safetensors byte for byte, config.json the overlay's)."""
    import filecmp
    import torch
    import transformers
    from safetensors.torch import load_file

    def load(d):
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            d, output_loading_info=True, dtype=torch.float32)
        check_loading_info(name, info, reference(name)[1])
        params = {k: v.detach().clone() for k, v in model.state_dict().items()}
        del model  # from the mount: its weights map model.safetensors
        gc.collect()
        return params

    out = tmp_path / "out"
    r = run_cli("export", *recipe_opts(name), ckpt(name), f"{out}/")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert filecmp.cmp(out / "config.json", os.path.join(overlay(name), "config.json"),
                       shallow=False)
    with mount(ckpt(name), *recipe_opts(name)) as mnt:
        assert sorted(os.listdir(out)) == sorted(
            f for f in os.listdir(mnt) if f not in ("pytorch_model.bin", "tensors"))
        assert filecmp.cmp(out / "model.safetensors", os.path.join(mnt, "model.safetensors"),
                           shallow=False)
        want = load(mnt)
    got = load(str(out))
    assert set(got) == set(want)
    for k, v in got.items():
        assert tensor_bytes(v) == tensor_bytes(want[k]), k
    # transformers fuses MoE experts as it loads; a dense model's names are the files'
    served = load_file(out / "model.safetensors")
    if name == "llama3":
        assert set(got) == served_names(name, served)
        for k, v in got.items():
            assert tensor_bytes(v) == tensor_bytes(expected(name, served, k)), k


def test_export_overlay_needs_a_directory(tmp_path):
    """--overlay adds files: stdout or an existing file as OUT is a usage error (1), as a
    missing overlay directory is; nothing is written."""
    f = tmp_path / "m.safetensors"
    f.write_text("")
    for out in ("-", str(f)):
        r = run_cli("export", *recipe_opts("llama3"), ckpt("llama3"), out)
        assert r.returncode == 1 and "--overlay" in r.stderr, (out, r.stderr)
        assert len(r.stderr.splitlines()) == 1 and r.stdout == ""
    r = run_cli("export", "--recipe=torchtitan-llama3", f"--overlay={tmp_path}/nope",
                ckpt("llama3"), f"{tmp_path}/o/")
    assert r.returncode == 1 and "--overlay" in r.stderr, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["m.safetensors"]
