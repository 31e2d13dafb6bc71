"""--max-shard-size: model-0000K-of-0000N.safetensors + model.safetensors.index.json.

What transformers' save_pretrained(max_shard_size=...) writes: every shard a valid
safetensors file, the index in the hub's format, tensors whole, a tensor larger than the
limit in a shard of its own, tied names stored once (recorded in their shard's
__metadata__), and from_pretrained on the mount giving the logits of the unsharded mount.
"""
import json
import os
import re

import pytest

from conftest import FIXTURES, SOURCES, mount, parse_header

TORCH = os.path.join(FIXTURES, "torch")
INDEX = "model.safetensors.index.json"
SHARD_RE = re.compile(r"^model-(\d{5})-of-(\d{5})\.safetensors$")
CASES = {
    "sample": SOURCES["sample"],
    "llama_fsdp2": os.path.join(TORCH, "llama_fsdp2"),
}
LIMIT = 64 * 1024


def load_copy(path):
    """The safetensors library's own parse and validation of a file, with no mmap left
    behind (a mapping keeps the mount busy)."""
    from safetensors.torch import load
    with open(path, "rb") as f:
        return load(f.read())


def shards_of(mnt):
    return sorted(n for n in os.listdir(mnt) if SHARD_RE.match(n))


@pytest.fixture(params=sorted(CASES), ids=sorted(CASES))
def sharded(request):
    src = CASES[request.param]
    with mount(src, f"--max-shard-size={LIMIT // 1024}K") as mnt:
        yield request.param, src, mnt


def test_layout_and_index(sharded):
    _name, _src, mnt = sharded
    names = os.listdir(mnt)
    shards = shards_of(mnt)
    assert "model.safetensors" not in names and INDEX in names
    n = len(shards)
    assert n > 1 and shards == [f"model-{k:05d}-of-{n:05d}.safetensors" for k in range(1, n + 1)]
    with open(os.path.join(mnt, INDEX)) as f:
        text = f.read()
    index = json.loads(text)
    # the hub's own serialization: json.dumps(index, indent=2, sort_keys=True) + "\n"
    assert text == json.dumps(index, indent=2, sort_keys=True) + "\n"
    assert set(index) == {"metadata", "weight_map"}
    total = 0
    stored = {}
    for s in shards:
        _n, hdr = parse_header(os.path.join(mnt, s))
        for k, v in hdr.items():
            if k != "__metadata__":
                stored[k] = s
                total += v["data_offsets"][1] - v["data_offsets"][0]
    assert index["weight_map"] == stored
    assert index["metadata"]["total_size"] == total


def test_shards_are_valid_and_whole(sharded):
    import torch
    name, src, mnt = sharded
    with mount(src) as whole_mnt:
        whole = load_copy(os.path.join(whole_mnt, "model.safetensors"))
        _n, whole_hdr = parse_header(os.path.join(whole_mnt, "model.safetensors"))
    got = {}
    for s in shards_of(mnt):
        part = load_copy(os.path.join(mnt, s))  # the safetensors library's validation
        assert not set(part) & set(got)
        got.update(part)
        _n, hdr = parse_header(os.path.join(mnt, s))
        assert hdr["__metadata__"]["format"] == "pt"
        sizes = [v["data_offsets"][1] - v["data_offsets"][0]
                 for k, v in hdr.items() if k != "__metadata__"]
        assert sum(sizes) <= LIMIT or len(sizes) == 1, (s, sizes)
    assert set(got) == set(whole)
    for k in whole:
        assert torch.equal(got[k], whole[k]), k
    # tied names: dropped from every shard, recorded where the kept one is
    dropped = {k: v for k, v in whole_hdr["__metadata__"].items() if k != "format"}
    if name == "llama_fsdp2":
        assert dropped == {"lm_head.weight": "model.embed_tokens.weight"}
    with open(os.path.join(mnt, INDEX)) as f:
        wm = json.load(f)["weight_map"]
    for d, kept in dropped.items():
        assert d not in wm
        _n, hdr = parse_header(os.path.join(mnt, wm[kept]))
        assert hdr["__metadata__"][d] == kept


def test_assignment_matches_huggingface_hub(sharded):
    """Greedy in writer order, a too-big tensor alone: huggingface_hub's own splitter
    given the same tensors in the same order must make the same shards."""
    import huggingface_hub as hub
    _name, _src, mnt = sharded
    tensors = {}
    for s in shards_of(mnt):
        tensors.update(load_copy(os.path.join(mnt, s)))
    with open(os.path.join(mnt, INDEX)) as f:
        wm = json.load(f)["weight_map"]
    order = sorted(tensors, key=lambda k: (-DTYPE_ORDER[str(tensors[k].dtype)], k.encode()))
    split = hub.split_torch_state_dict_into_shards(
        {k: tensors[k] for k in order}, max_shard_size=LIMIT)
    assert split.tensor_to_filename == wm


# dtype.h's order (the safetensors writer sorts by it, descending): only what fixtures use
DTYPE_ORDER = {"torch.float32": 10, "torch.bfloat16": 8, "torch.float16": 7}


def test_bigger_than_limit_tensor_gets_own_shard():
    src = CASES["sample"]
    with mount(src, "--max-shard-size=1K") as mnt:
        for s in shards_of(mnt):
            _n, hdr = parse_header(os.path.join(mnt, s))
            big = [k for k, v in hdr.items() if k != "__metadata__"
                   and v["data_offsets"][1] - v["data_offsets"][0] > 1024]
            assert len(big) <= 1 and (not big or len(hdr) == 2), (s, list(hdr))


def test_one_shard_is_plain_model_safetensors():
    src = CASES["sample"]
    with mount(src) as a, mount(src, "--max-shard-size=1G") as b:
        assert not shards_of(b) and INDEX not in os.listdir(b)
        with open(os.path.join(a, "model.safetensors"), "rb") as f1, \
                open(os.path.join(b, "model.safetensors"), "rb") as f2:
            assert f1.read() == f2.read()


def test_deterministic():
    src = CASES["llama_fsdp2"]
    with mount(src, "--max-shard-size=64K") as a, mount(src, "-o", "max_shard_size=64K") as b:
        la, lb = sorted(os.listdir(a)), sorted(os.listdir(b))
        assert la == lb
        for n in shards_of(a) + [INDEX]:
            with open(os.path.join(a, n), "rb") as f1, open(os.path.join(b, n), "rb") as f2:
                assert f1.read() == f2.read(), n


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.logits
def test_from_pretrained_logits_match_unsharded(case):
    import torch
    from transformers import AutoModelForCausalLM
    src = CASES[case]
    ids = torch.arange(0, 16).reshape(1, 16) % 200
    out = {}
    for label, opts in (("whole", ()), ("sharded", ("--max-shard-size=64K",))):
        with mount(src, *opts) as mnt:
            model = AutoModelForCausalLM.from_pretrained(mnt, torch_dtype=torch.float32)
            model.eval()
            with torch.no_grad():
                out[label] = model(ids).logits
            del model
    assert torch.equal(out["whole"], out["sharded"])
