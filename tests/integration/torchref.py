"""The torch-made fixtures (tests/fixtures/torch/, written by
tests/fixtures/make_torch_fixtures.py) and their references (tests/fixtures/torch/_ref/):
what each one is, and how a view read through the mount is compared with torch's own
consolidation of it."""
import json
import os

from conftest import FIXTURES, tensor_bytes

TORCH_FIXTURES = os.path.join(FIXTURES, "torch")
REF = os.path.join(TORCH_FIXTURES, "_ref")

# name -> (SOURCE relative to tests/fixtures/torch, files passed through unchanged)
CASES = {
    "fsdp2_2rank": ("fsdp2_2rank", []),
    "fsdp2_3rank": ("fsdp2_3rank", []),
    "fsdp1_sharded": ("fsdp1_sharded", []),
    "dtensor_2d": ("dtensor_2d", []),
    "dcp_hf": ("dcp_hf", []),
    "ddp_compile": ("ddp_compile.pt", []),
    "ddp_named_params": ("ddp_named_params.pt", []),
    "bin_sharded": ("bin_sharded", ["config.json", "generation_config.json"]),
    "single_bin": ("single_bin", []),
    "accelerate": ("accelerate", ["config.json", "trainer_state.json", "rng_state_0.pth",
                                  "rng_state_1.pth", "scheduler.pt"]),
    "lightning": ("lightning", ["meta.pt"]),
    "lightning_ckpt": ("lightning_ckpt", []),
    "script_rng": ("script_rng", []),
    "zstd": ("zstd", []),
    "llama_fsdp2": ("llama_fsdp2", ["config.json"]),
}


# fixtures whose source itself stores tied names in one storage (torch.save of a tied
# model); in DCP every FQN is a separate copy, so a tie there is only known to the mount
# if it says so (a dropped name in model.safetensors' __metadata__)
SOURCE_SHARES_TIES = {"ddp_compile", "ddp_named_params", "single_bin"}


def source(name):
    return os.path.join(TORCH_FIXTURES, CASES[name][0])


def passthrough(name):
    return CASES[name][1]


def load_ref(name):
    """({name: tensor}, [[a, b], ...] tie pairs) of a fixture's model reference."""
    from safetensors import safe_open
    path = os.path.join(REF, f"{name}.safetensors")
    out = {}
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
        for k in f.keys():
            out[k] = f.get_tensor(k)
    return out, json.loads(meta.get("ties", "[]"))


def load_optim_ref(name):
    """{state.<param>.<slot>: tensor} or None when the fixture has no optimizer state."""
    path = os.path.join(REF, f"{name}.optimizer.safetensors")
    if not os.path.exists(path):
        return None
    from safetensors.torch import load_file
    return load_file(path)


def load_optim_json_ref(name):
    path = os.path.join(REF, f"{name}.optimizer.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def same_tensor(name, got, want):
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
    assert tuple(got.shape) == tuple(want.shape), \
        f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    assert tensor_bytes(got) == tensor_bytes(want), f"{name}: bytes differ"


def compare(got, ref, ties, metadata=None, require_all=False, what="view"):
    """Every tensor of `got` equals the reference tensor of that name byte for byte, and
    the name sets are equal modulo ties: a tied name may be missing from `got` when
    `metadata` (the safetensors __metadata__) records it as "<dropped>": "<kept>" with
    <kept> its partner and present. With require_all, no name may be missing."""
    metadata = metadata or {}
    extra = sorted(set(got) - set(ref))
    assert not extra, f"{what}: names not in the reference: {extra[:10]}"
    partner = {}
    for a, b in ties:
        partner.setdefault(a, set()).add(b)
        partner.setdefault(b, set()).add(a)
    for n, want in ref.items():
        if n in got:
            same_tensor(f"{what}: {n}", got[n], want)
            continue
        assert not require_all, f"{what}: {n} missing"
        kept = metadata.get(n)
        assert kept is not None and kept in partner.get(n, ()), \
            (f"{what}: {n} missing and not recorded as a dropped tie "
             f"(metadata[{n!r}]={kept!r}, ties={sorted(partner.get(n, ()))})")
        assert kept in got, f"{what}: {n} recorded as tied to {kept}, which is missing too"


def dcp_state_dict(path):
    """The whole DCP checkpoint at @path as the nested dict torch's own converter loads it
    (dcp_to_torch_save without the torch.save), read in the calling test run."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
    sd = {}
    _load_state_dict(sd, storage_reader=FileSystemReader(path),
                     planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    return sd
