#!/usr/bin/env python3
"""Extract the fuzz targets' seed corpora from tests/fixtures (stdlib only).

    python3 tests/fuzz/make_seeds.py OUTDIR

writes OUTDIR/<target>/<seed> for every target in tests/fuzz/meson.build:
  safetensors   every *.safetensors fixture up to 256 KiB
  index         every model.safetensors.index.json
  pickle        every data.pkl (of .bin/.pt files and of DCP items), every .metadata
                and its cuts
  zip           every torch.save file, and the plain DCP items as archives of their own
  torch         every torch.save file (.bin/.pt/.pth) up to 256 KiB
  dcp_metadata  every DCP .metadata (fsdp2_2rank's is the valid one: the target
                mounts its input beside fsdp2_2rank's .distcp files), and each cut
                down to 1, 2 and 4 state_dict_metadata entries (small_metadata)
  dcp_zstd      b"\\0" + each item of the zstd fixtures as stored (zstd frames; pyzstd's
                end with an empty frame) and b"\\2" + the same (the frame walk checked
                against the decoder), b"\\1" and b"\\3" + each plain DCP item (a decoded
                archive, compressed by the target into one frame, or two and an
                empty one), and b"\\2" + hand-made frames (SMALL_FRAMES)
  deepspeed     slot byte + each file fuzz_deepspeed.c may replace (DS_SLOTS), with
                and without the --deepspeed-weights=module bit (0x80)
  ds_universal  the same for fuzz_ds_universal.c
Nothing is written into the repository unless OUTDIR is inside it.
"""
import copyreg
import glob
import hashlib
import io
import os
import pickle
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))

# Hand-made zstd frames for the frame walk (raw and RLE blocks need no entropy coder):
# pyzstd's empty frame, a single-segment "hello" frame with and without a checksum,
# skippable frames around it, an RLE block, and a windowed frame without a size.
_ZMAGIC = bytes.fromhex("28b52ffd")
_EMPTY = _ZMAGIC + bytes.fromhex("2000010000")
_HELLO = _ZMAGIC + bytes([0xA0]) + (5).to_bytes(4, "little") + \
    ((5 << 3) | 1).to_bytes(3, "little") + b"hello"
_HELLO_CK = _ZMAGIC + bytes([0xA4]) + (5).to_bytes(4, "little") + \
    ((5 << 3) | 1).to_bytes(3, "little") + b"hello" + bytes.fromhex("8c8ab4e9")
_RLE = _ZMAGIC + bytes([0x00, 0x00]) + ((1000 << 3) | 2 | 1).to_bytes(3, "little") + b"z"
_SKIP = bytes.fromhex("5e2a4d18") + (3).to_bytes(4, "little") + b"abc"
SMALL_FRAMES = [_EMPTY, _HELLO, _HELLO_CK, _HELLO + _EMPTY, _SKIP + _HELLO + _SKIP,
                _RLE, _RLE + _HELLO, _HELLO + b"x"]
FIXTURES = os.path.join(os.path.dirname(HERE), "fixtures")
MAX_SEED = 256 << 10


class _Stub:
    """Any class a DCP .metadata pickle names: keeps its state, runs nothing.

    It pickles back as it was built (REDUCE with its arguments, or NEWOBJ and
    BUILD), so a .metadata can be loaded, cut down and dumped again."""

    def __init__(self, *args, **kwargs):
        self.args = args

    def __setstate__(self, state):
        self.state = state

    def __call__(self, *args, **kwargs):
        return _Stub(*args)

    def __hash__(self):
        return id(self)

    def __reduce_ex__(self, protocol):
        state = self.__dict__.get("state")
        if "args" in self.__dict__:
            return (type(self), self.args) + ((state,) if state is not None else ())
        return (copyreg.__newobj__, (type(self),), state)


class _StubUnpickler(pickle.Unpickler):
    classes = {}  # one class per (module, name), so that they pickle back

    def find_class(self, module, name):
        if module in ("collections", "builtins", "__builtin__") and name in (
                "OrderedDict", "getattr", "set", "frozenset", "dict", "list", "tuple"):
            return super().find_class(module, name)
        key = (module, name)
        if key not in self.classes:
            self.classes[key] = type(name, (_Stub,), {"__module__": module})
        return self.classes[key]


class _StubPickler(pickle._Pickler):
    """Writes a stub class as the global it was read from (no import)."""

    def save_global(self, obj, name=None):
        self.save(obj.__module__)
        self.save(name or obj.__qualname__)
        self.write(pickle.STACK_GLOBAL)
        self.memoize(obj)


def small_metadata(data, limit=48):
    """Seeds of 1, 2 and 4 state_dict_metadata entries, cut from a .metadata.

    The fuzzer's time per input grows with the pickle's size (a fixture's is
    ~32 KiB; the VM dominates), so most mutations should start from a
    .metadata of a few tensors (1-4 KiB) that still mounts: those entries,
    their storage_data and planner_data, nothing else."""
    md = _StubUnpickler(io.BytesIO(data)).load()
    st = _state(md)
    sdm, storage = st.get("state_dict_metadata"), st.get("storage_data")
    if not isinstance(sdm, dict) or not isinstance(storage, dict):
        return []
    names = list(sdm)
    cuts = [names[i:i + 1] for i in range(min(limit, len(names)))]
    cuts += [names[i:i + k] for k in (2, 4) for i in range(0, len(names) - k + 1, k)]
    out = []
    for keep in cuts:
        small = dict(st)
        small["state_dict_metadata"] = {fqn: sdm[fqn] for fqn in keep}
        small["storage_data"] = {k: v for k, v in storage.items()
                                 if _state(k).get("fqn") in keep}
        if isinstance(st.get("planner_data"), dict):
            small["planner_data"] = {k: v for k, v in st["planner_data"].items()
                                     if k in keep}
        md.state = small
        buf = io.BytesIO()
        _StubPickler(buf, protocol=4).dump(md)
        out.append(buf.getvalue())
    md.state = st
    return out


def _state(obj):
    st = getattr(obj, "state", None)
    if isinstance(st, tuple) and len(st) == 2:  # (None, slots)
        merged = dict(st[0] or {})
        merged.update(st[1] or {})
        return merged
    return st if isinstance(st, dict) else {}


# The files fuzz_deepspeed.c and fuzz_ds_universal.c let byte 0 of an input
# replace, in their slots[] order: a seed is that byte and the file as is.
_U = "global_step2_universal/"
DS_SLOTS = {
    "deepspeed": [
        ("deepspeed/z2_2rank", "latest"),
        ("deepspeed/z2_2rank", "global_step2/mp_rank_00_model_states.pt"),
        ("deepspeed/z2_2rank", "global_step2/zero_pp_rank_0_mp_rank_00_optim_states.pt"),
        ("deepspeed/z2_2rank", "global_step2/zero_pp_rank_1_mp_rank_00_optim_states.pt"),
        ("deepspeed/z3_2rank", "global_step2/zero_pp_rank_0_mp_rank_00_model_states.pt"),
        ("deepspeed/z3_2rank", "global_step2/zero_pp_rank_1_mp_rank_00_model_states.pt"),
        ("deepspeed/z3_2rank", "global_step2/zero_pp_rank_0_mp_rank_00_optim_states.pt"),
    ],
    "ds_universal": [
        ("deepspeed/uc_z3_2rank", "latest_universal"),
        ("deepspeed/uc_z3_2rank", _U + "zero_pp_rank_0_mp_rank_00_model_states.pt"),
        ("deepspeed/uc_z3_2rank", _U + "zero/optimizer_state.pt"),
        ("deepspeed/uc_z3_2rank", _U + "zero/body.weight/fp32.pt"),
        ("deepspeed/uc_z3_2rank", _U + "zero/body.weight/exp_avg.pt"),
        ("deepspeed/uc_z3_2rank", _U + "zero/frozen.bias/fp32.pt"),
        ("deepspeed/uc_z2_3rank_bf16", _U + "mp_rank_00_model_states.pt"),
        ("deepspeed/uc_z2_3rank_bf16", _U + "zero/optimizer_state.pt"),
        ("deepspeed/uc_z2_3rank_bf16", _U + "zero/cube/fp32.pt"),
        ("deepspeed/uc_z2_3rank_bf16", _U + "zero/cube/exp_avg_sq.pt"),
    ],
}


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
            for small in small_metadata(data):
                add("dcp_metadata", small)
                add("pickle", small)
            d = os.path.dirname(p)
            for rel, off, length, xf in dcp_items(d):
                with open(os.path.join(d, rel), "rb") as f:
                    f.seek(off)
                    item = f.read(length)
                if xf:
                    add("dcp_zstd", b"\0" + item)
                    add("dcp_zstd", b"\2" + item)
                else:
                    add("zip", item)
                    add("pickle", data_pkl(item))
                    add("dcp_zstd", b"\1" + item)
                    add("dcp_zstd", b"\3" + item)
    for frames in SMALL_FRAMES:
        add("dcp_zstd", b"\2" + frames)
    for target, slots in DS_SLOTS.items():
        for i, (fixture, name) in enumerate(slots):
            data = read(os.path.join(FIXTURES, fixture, name))
            add(target, bytes([i]) + data)
            add(target, bytes([0x80 | i]) + data)  # --deepspeed-weights=module
    for t in sorted(seeds):
        print(f"{t}: {seeds[t]} seeds", file=sys.stderr)
    return seeds


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
