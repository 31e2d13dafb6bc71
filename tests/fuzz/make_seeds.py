#!/usr/bin/env python3
"""Extract the fuzz targets' seed corpora from tests/fixtures (stdlib only).

    python3 tests/fuzz/make_seeds.py OUTDIR

writes OUTDIR/<target>/<seed> for every target in tests/fuzz/meson.build:
  safetensors   every *.safetensors fixture up to 256 KiB
  index         every model.safetensors.index.json
  pickle        every data.pkl (of .bin/.pt files and of DCP items), every .metadata
  zip           every torch.save file, and the plain DCP items as archives of their own
  torch         every torch.save file (.bin/.pt/.pth) up to 256 KiB
  dcp_metadata  every DCP .metadata (fsdp2_2rank's is the valid one: the target
                mounts its input beside fsdp2_2rank's .distcp files)
  dcp_zstd      b"\\0" + each item of the zstd fixture as stored (a zstd frame), and
                b"\\1" + each plain DCP item (a decoded archive, compressed by the target)
Nothing is written into the repository unless OUTDIR is inside it.
"""
import glob
import hashlib
import io
import os
import pickle
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(os.path.dirname(HERE), "fixtures")
MAX_SEED = 256 << 10


class _Stub:
    """Any class a DCP .metadata pickle names: keeps its state, runs nothing."""

    def __init__(self, *args, **kwargs):
        self.args = args

    def __setstate__(self, state):
        self.state = state

    def __call__(self, *args, **kwargs):
        return _Stub(*args)

    def __hash__(self):
        return id(self)


class _StubUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module in ("collections", "builtins", "__builtin__") and name in (
                "OrderedDict", "getattr", "set", "frozenset", "dict", "list", "tuple"):
            return super().find_class(module, name)
        return type(name, (_Stub,), {"__module__": module})


def _state(obj):
    st = getattr(obj, "state", None)
    if isinstance(st, tuple) and len(st) == 2:  # (None, slots)
        merged = dict(st[0] or {})
        merged.update(st[1] or {})
        return merged
    return st if isinstance(st, dict) else {}


def dcp_items(dcp_dir):
    """[(relative_path, offset, length, transforms)] of a DCP directory's .metadata."""
    with open(os.path.join(dcp_dir, ".metadata"), "rb") as f:
        md = _StubUnpickler(f).load()
    out = []
    for info in _state(md).get("storage_data", {}).values():
        s = _state(info)
        out.append((s["relative_path"], s["offset"], s["length"],
                    tuple(s.get("transform_descriptors") or ())))
    return sorted(out)


def data_pkl(archive):
    try:
        with zipfile.ZipFile(io.BytesIO(archive)) as z:
            names = [n for n in z.namelist() if n.endswith("/data.pkl")]
            return z.read(names[0]) if names else None
    except (zipfile.BadZipFile, KeyError, OSError):
        return None


def main(out):
    seeds = {}

    def add(target, data):
        if data is None or len(data) > MAX_SEED:
            return
        d = os.path.join(out, target)
        os.makedirs(d, exist_ok=True)
        name = hashlib.sha1(data).hexdigest()[:16]
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
        seeds[target] = seeds.get(target, 0) + 1

    def read(p):
        with open(p, "rb") as f:
            return f.read()

    files = sorted(glob.glob(os.path.join(FIXTURES, "**", "*"), recursive=True)
                   + glob.glob(os.path.join(FIXTURES, "**", ".metadata"), recursive=True))
    for p in files:
        if not os.path.isfile(p) or "__pycache__" in p:
            continue
        base = os.path.basename(p)
        if base.endswith(".safetensors"):
            add("safetensors", read(p))
        elif base.endswith(".safetensors.index.json"):
            add("index", read(p))
        elif base.endswith((".bin", ".pt", ".pth")):
            data = read(p)
            add("torch", data)
            add("zip", data)
            add("pickle", data_pkl(data))
        elif base == ".metadata":
            data = read(p)
            add("dcp_metadata", data)
            add("pickle", data)
            d = os.path.dirname(p)
            for rel, off, length, xf in dcp_items(d):
                with open(os.path.join(d, rel), "rb") as f:
                    f.seek(off)
                    item = f.read(length)
                if xf:
                    add("dcp_zstd", b"\0" + item)
                else:
                    add("zip", item)
                    add("pickle", data_pkl(item))
                    add("dcp_zstd", b"\1" + item)
    for t in sorted(seeds):
        print(f"{t}: {seeds[t]} seeds", file=sys.stderr)
    return seeds


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
