"""Checkpoint directory layouts around DCP: Megatron-LM's torch_dist (DCP plus its own
metadata.json and common.pt, passed through), and the same checkpoint reached through
a symlinked directory."""
import os
import shutil

import pytest

from conftest import FIXTURES, mount

import torch  # noqa: E402


def _tree(src):
    from safetensors.torch import load_file
    with mount(src) as mnt:
        got = {k: v.clone() for k, v in load_file(os.path.join(mnt, "model.safetensors")).items()}
        top = sorted(os.listdir(mnt))
        extra = {}
        for name in ("metadata.json", "common.pt"):
            if os.path.exists(os.path.join(mnt, name)):
                with open(os.path.join(mnt, name), "rb") as f:
                    extra[name] = f.read()
    return got, top, extra


def test_megatron_torch_dist_layout(tmp_path):
    """Megatron's torch_dist format is a DCP directory with metadata.json (the backend
    description) and common.pt (non-sharded state) beside it: both pass through."""
    src = tmp_path / "iter_0000010"
    shutil.copytree(os.path.join(FIXTURES, "torch", "fsdp2_2rank"), src)
    meta = b'{"sharded_backend": "torch_dist", "sharded_backend_version": 1, ' \
           b'"common_backend": "torch", "common_backend_version": 1}'
    (src / "metadata.json").write_bytes(meta)
    torch.save({"iteration": 10, "args": {"tensor_model_parallel_size": 1}},
               str(src / "common.pt"))
    got, top, extra = _tree(str(src))
    want, _, _ = _tree(os.path.join(FIXTURES, "torch", "fsdp2_2rank"))
    assert set(got) == set(want)
    for k in want:
        assert torch.equal(got[k], want[k]), k
    assert extra["metadata.json"] == meta
    assert extra["common.pt"] == (src / "common.pt").read_bytes()
    assert not [n for n in top if n.endswith(".distcp") or n == ".metadata"], top


def test_source_through_a_symlink(tmp_path):
    """SOURCE itself may be a symlink to the checkpoint directory."""
    link = tmp_path / "ckpt"
    os.symlink(os.path.join(FIXTURES, "torch", "dtensor_2d"), link)
    got, _, _ = _tree(str(link))
    want, _, _ = _tree(os.path.join(FIXTURES, "torch", "dtensor_2d"))
    assert got.keys() == want.keys()
    for k in want:
        assert torch.equal(got[k], want[k]), k


# ---------------------------------------------------------------- what loaders look for
# A directory is read the way transformers loads it: model.safetensors (or
# pytorch_model.bin) first, then the index, then every weights file; a lone weights
# file under another name (PEFT's adapter_model.safetensors, diffusers'
# diffusion_pytorch_model.safetensors) stays visible beside the views made from it.

def _tensors(seed, names):
    import torch
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(3, 4, generator=g) for n in names}


def _load(path):
    from safetensors.torch import load_file
    return {k: v.clone() for k, v in load_file(path).items()}


def _same(a, b):
    import torch
    return sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", ["adapter_model.safetensors",
                                  "diffusion_pytorch_model.safetensors"])
def test_lone_file_under_its_own_name_stays_visible(tmp_path, name):
    from safetensors.torch import save_file
    src = tmp_path / "src"
    src.mkdir()
    sd = _tensors(1, ["base_model.model.q.lora_A.weight", "base_model.model.q.lora_B.weight"])
    save_file(sd, str(src / name))
    (src / "adapter_config.json").write_text("{}\n")
    with mount(str(src)) as mnt:
        top = sorted(os.listdir(mnt))
        with open(src / name, "rb") as f, open(os.path.join(mnt, name), "rb") as g:
            assert f.read() == g.read()
        assert _same(_load(os.path.join(mnt, "model.safetensors")), sd)
    assert name in top and "model.safetensors" in top, top


def test_lone_torch_file_under_its_own_name_stays_visible(tmp_path):
    import torch
    src = tmp_path / "src"
    src.mkdir()
    torch.save(_tensors(2, ["w"]), str(src / "adapter_model.bin"))
    with mount(str(src)) as mnt:
        assert {"adapter_model.bin", "pytorch_model.bin"} <= set(os.listdir(mnt))


def test_model_safetensors_wins_over_an_index_and_other_files(tmp_path):
    """A stale index with its shards, an adapter beside the model: transformers loads
    model.safetensors, and so does the mount; the rest passes through."""
    import json
    from safetensors.torch import save_file
    src = tmp_path / "src"
    src.mkdir()
    model = _tensors(3, ["a.weight", "b.weight"])
    save_file(model, str(src / "model.safetensors"))
    old = _tensors(4, ["a.weight", "b.weight"])
    save_file({"a.weight": old["a.weight"]}, str(src / "model-00001-of-00002.safetensors"))
    save_file({"b.weight": old["b.weight"]}, str(src / "model-00002-of-00002.safetensors"))
    (src / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                                        "b.weight": "model-00002-of-00002.safetensors"}}))
    save_file(_tensors(5, ["q.lora_A.weight"]), str(src / "adapter_model.safetensors"))
    with mount(str(src)) as mnt:
        got = _load(os.path.join(mnt, "model.safetensors"))
        top = set(os.listdir(mnt))
    assert _same(got, model)
    assert {"model.safetensors.index.json", "model-00001-of-00002.safetensors",
            "adapter_model.safetensors"} <= top, top


def test_pytorch_model_bin_wins_over_an_index(tmp_path):
    import json
    import torch
    src = tmp_path / "src"
    src.mkdir()
    model = _tensors(6, ["a.weight"])
    torch.save(model, str(src / "pytorch_model.bin"))
    torch.save(_tensors(7, ["a.weight"]), str(src / "pytorch_model-00001-of-00001.bin"))
    (src / "pytorch_model.bin.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"a.weight": "pytorch_model-00001-of-00001.bin"}}))
    with mount(str(src)) as mnt:
        got = _load(os.path.join(mnt, "model.safetensors"))
    assert _same(got, model)
