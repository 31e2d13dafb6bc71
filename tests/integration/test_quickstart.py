"""docs/quickstart.md's DeepSpeed recipe, run as written: `unshardfs ckpt /mnt/m` (the root
with `latest`) and `unshardfs ckpt/global_stepN /mnt/m`, then the model class that was
trained loads the mount's state dict with load_state_dict (strict), and its weights are
DeepSpeed's own fp32 result (zero_to_fp32's get_fp32_state_dict_from_zero_checkpoint,
tests/fixtures/deepspeed/_ref/). The checkpoints were written by real DeepSpeed 0.19.8
(tests/fixtures/make_deepspeed_fixtures.py), ZeRO-2 and ZeRO-3, fp32 and bf16."""
import gc
import os
import sys

import pytest

import torch  # noqa: E402

from conftest import FIXTURES, mount  # noqa: E402

DS = os.path.join(FIXTURES, "deepspeed")


def fixture_net():
    """The model class the DeepSpeed fixtures were trained with."""
    sys.path.insert(0, FIXTURES)
    try:
        import make_deepspeed_fixtures
    finally:
        sys.path.remove(FIXTURES)
    return make_deepspeed_fixtures.Net()


def reference(name):
    from safetensors.torch import load_file
    return load_file(os.path.join(DS, "_ref", f"{name}.safetensors"))


@pytest.mark.parametrize("name", ["z2_3rank_bf16", "z3_2rank"])
@pytest.mark.parametrize("where", ["root", "tag"])
def test_deepspeed_recipe(name, where):
    src = os.path.join(DS, name)
    if where == "tag":
        with open(os.path.join(src, "latest")) as f:
            src = os.path.join(src, f.read().strip())
    ref = reference(name)
    with mount(src) as mnt:
        # the recipe: every name, ties sharing one storage, into the trained class
        model = fixture_net()
        sd = torch.load(os.path.join(mnt, "pytorch_model.bin"), weights_only=True)
        model.load_state_dict(sd)  # strict: no missing or unexpected names
        del sd
        # the safetensors file stores the tied head.weight once (as embed.weight)
        from safetensors.torch import load_file
        st = load_file(os.path.join(mnt, "model.safetensors"))
        other = fixture_net()
        missing, unexpected = other.load_state_dict(st, strict=False)
        del st
        gc.collect()
    assert missing == ["head.weight"] and unexpected == [], (missing, unexpected)
    assert other.head.weight is other.embed.weight  # tied in the class, so loaded too
    got = model.state_dict()
    assert set(got) == set(ref), sorted(set(got) ^ set(ref))
    for k, v in ref.items():  # load_state_dict casts into the class's dtypes (a frozen
        v = v.to(got[k].dtype)  # bf16 param has no fp32 master: it stays bf16 values)
        assert torch.equal(got[k], v), k
        assert torch.equal(other.state_dict()[k], v), k
