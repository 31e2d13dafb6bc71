"""--dtype=bf16|f16|f32: every view serves floating tensors cast exactly as torch's own
Tensor.to(dtype) casts them (specials included: infinities, subnormals, values that
round up to infinity, ties); other tensors are served as they are. NaNs must stay NaNs
at the same positions: torch's own NaN bit patterns depend on its loop (vectorized or
scalar tail, i.e. on the tensor's length), so their bits are not compared."""
import os

import pytest

from conftest import FIXTURES, mount

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

TARGETS = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def specials():
    """Bit patterns that exercise every rounding and NaN rule, per source dtype."""
    torch.manual_seed(0)
    f32_bits = [0x7fc00000, 0xffc00000, 0x7fc00001, 0xffa00000, 0x7f800001, 0x7fbfffff,
                0x7f800000, 0xff800000, 0x00000001, 0x80000001, 0x007fffff, 0x00800000,
                0x477ff000, 0x477fefff, 0x477fe000, 0x33800000, 0x33000000, 0x33000001,
                0x3f808000, 0x3f818000, 0x3f800001, 0x387fc000, 0x38800000, 0x7f7fffff]
    f32 = torch.tensor(f32_bits, dtype=torch.int64).to(torch.int32).view(torch.float32)
    f32 = torch.cat([f32, torch.randn(1000) * 1000, torch.randn(1000) * 1e-6])
    f16_bits = [0x7e00, 0xfe00, 0x7e01, 0xfc01, 0x7c01, 0x7c00, 0xfc00, 0x0001, 0x8001,
                0x03ff, 0x0400, 0x7bff, 0x3c00]
    f16 = torch.tensor(f16_bits, dtype=torch.int32).to(torch.int16).view(torch.float16)
    f16 = torch.cat([f16, torch.randn(500).to(torch.float16)])
    bf16_bits = [0x7fc0, 0xffc0, 0x7fc1, 0xff81, 0x7f81, 0x7f80, 0x0001, 0x8001, 0x3f80]
    bf16 = torch.tensor(bf16_bits, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    bf16 = torch.cat([bf16, torch.randn(500).to(torch.bfloat16)])
    f64 = torch.tensor([1.0000000596046448, float("nan"), -float("nan"), 1e-45, 1e-46,
                        65520.0, 65519.99, 3.0e38, 3.5e38, float("inf"), -0.0,
                        2.0 ** -24 * 1.5], dtype=torch.float64)
    f64 = torch.cat([f64, torch.randn(500, dtype=torch.float64)])
    return {
        "a.f32": f32.reshape(-1, 4), "b.f16": f16, "c.bf16": bf16, "d.f64": f64,
        "e.i64": torch.arange(7, dtype=torch.int64), "f.u8": torch.arange(9, dtype=torch.uint8),
        "g.scalar": torch.tensor(2.5), "h.empty": torch.zeros(0, 3),
        "i.t": torch.randn(6, 10).t().contiguous(),
    }


def raw(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def same(got, want):
    """Bytes equal except at NaNs, which must be NaN in both."""
    if not want.is_floating_point():
        return torch.equal(raw(got), raw(want))
    g, w = got.reshape(-1), want.reshape(-1)
    gn, wn = torch.isnan(g), torch.isnan(w)
    if not torch.equal(gn, wn):
        return False
    keep = ~wn
    return torch.equal(raw(g[keep]), raw(w[keep]))


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_cast_matches_torch(tmp_path, target):
    src = tmp_path / "ckpt"
    src.mkdir()
    tensors = specials()
    save_file(tensors, str(src / "model.safetensors"), metadata={"format": "pt"})
    to = TARGETS[target]
    with mount(str(src), f"--dtype={target}") as mnt:
        got = {k: v.clone() for k, v in load_file(os.path.join(mnt, "model.safetensors")).items()}
        binsd = torch.load(os.path.join(mnt, "pytorch_model.bin"), weights_only=True)
        with open(os.path.join(mnt, "tensors", "a.f32"), "rb") as f:
            tensor_file = f.read()
        sizes = {k: os.path.getsize(os.path.join(mnt, "tensors", k)) for k in tensors}
    for k, v in tensors.items():
        want = v.to(to) if v.is_floating_point() else v
        assert got[k].dtype == want.dtype, (k, got[k].dtype, want.dtype)
        assert got[k].shape == want.shape, k
        assert same(got[k], want), f"{k}: cast differs from torch"
        assert same(binsd[k], want), f"{k}: pytorch_model.bin differs"
        assert sizes[k] == want.numel() * want.element_size(), k
    flat = torch.frombuffer(bytearray(tensor_file), dtype=to)
    assert same(flat, tensors["a.f32"].to(to).reshape(-1))


def test_cast_dcp_fixture(tmp_path):
    """A sharded DCP checkpoint cast to bf16: each tensor equals torch's cast of the
    consolidated reference, and partial reads across chunk boundaries agree."""
    ref = load_file(os.path.join(FIXTURES, "torch", "_ref", "fsdp2_3rank.safetensors"))
    oref = load_file(os.path.join(FIXTURES, "torch", "_ref", "fsdp2_3rank.optimizer.safetensors"))
    with mount(os.path.join(FIXTURES, "torch", "fsdp2_3rank"), "--dtype=bf16") as mnt:
        got = {k: v.clone() for k, v in load_file(os.path.join(mnt, "model.safetensors")).items()}
        optim = {k: v.clone() for k, v in
                 load_file(os.path.join(mnt, "optimizer.safetensors")).items()}
        p = os.path.join(mnt, "tensors", "embed.weight")
        with open(p, "rb") as f:
            whole = f.read()
        fd = os.open(p, os.O_RDONLY)
        try:
            pieces = b"".join(os.pread(fd, 7, off) for off in range(0, len(whole), 7))
        finally:
            os.close(fd)
    assert pieces == whole
    for k, v in got.items():
        want = ref[k].to(torch.bfloat16) if ref[k].is_floating_point() else ref[k]
        assert v.dtype == want.dtype and same(v, want), k
    # the optimizer is training state: moments and step counts as stored
    assert sorted(optim) == sorted(oref)
    for k, v in oref.items():
        assert optim[k].dtype == v.dtype and same(optim[k], v), k


def test_bad_dtype_is_usage_error(tmp_path):
    import subprocess
    from conftest import BINARY
    r = subprocess.run([BINARY, "--dtype=int4", os.path.join(FIXTURES, "single"), str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "dtype" in r.stderr
