"""The stored references (tests/fixtures/*/_ref/) hold only bytes that are copied: the
tensors a writer's own loader or converter gives (safetensors) and the scalars it saved
(JSON). Nothing computed by floating-point arithmetic on the machine that made them is
stored (logits, sums, narrowing casts): tests compute those in their own run, on the CPU
that runs them (docs/testing.md, "References"). This guards the rule."""
import glob
import json
import os

import torch
from safetensors import safe_open

from conftest import FIXTURES

REFS = sorted(glob.glob(os.path.join(FIXTURES, "*", "_ref", "*")))


def test_references_are_tensors_or_json():
    assert REFS, "no references found"
    odd = [p for p in REFS if not p.endswith((".safetensors", ".json"))]
    assert not odd, f"a stored reference that is neither safetensors nor JSON: {odd}"


def test_reference_tensors_hold_no_nan():
    """A NaN's bits after a cast depend on the kernel that cast it (docs/dtype-and-devices.md):
    a reference with NaNs could only be compared on the CPU that made it."""
    bad = []
    for p in REFS:
        if not p.endswith(".safetensors"):
            continue
        with safe_open(p, framework="pt") as f:
            for k in f.keys():
                t = f.get_tensor(k)
                if t.is_floating_point() and torch.isnan(t.float()).any():
                    bad.append(f"{os.path.basename(p)}:{k}")
    assert not bad, bad


def test_reference_json_parses():
    for p in REFS:
        if p.endswith(".json"):
            with open(p) as f:
                json.load(f)
