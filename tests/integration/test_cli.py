"""Command line: usage, --help, inspect and inspect --json."""
import json
import os
import math
import re

import pytest
from safetensors import safe_open

from conftest import DTYPE_SIZE, FIXTURES, SOURCES, mount, run_cli, source_tensors


def test_no_args_is_usage_error():
    r = run_cli()
    assert r.returncode == 1, (r.returncode, r.stderr)
    text = (r.stderr + r.stdout).lower()
    assert r.stderr.strip(), "no message on stderr"
    assert "usage" in text or "--help" in text, text


def test_help():
    r = run_cli("--help")
    assert r.returncode == 0, (r.returncode, r.stderr)
    text = (r.stdout + r.stderr).lower()
    assert "usage" in text and "inspect" in text


def test_one_argument_is_usage_error(tmp_path):
    r = run_cli(str(tmp_path))
    assert r.returncode == 1, (r.returncode, r.stderr)


def test_unknown_option_is_usage_error(tmp_path):
    r = run_cli("--no-such-option", str(tmp_path), str(tmp_path))
    assert r.returncode == 1, (r.returncode, r.stderr)


def test_inspect_table(source):
    """One row per tensor, under the header, each field exactly the source's."""
    _id, src = source
    expect = source_tensors(src)
    r = run_cli("inspect", src)
    assert r.returncode == 0, r.stderr
    # the model's table is the first block; optimizer and passthrough sections follow
    lines = [ln for ln in r.stdout.split("\n\n")[0].splitlines() if ln.strip()]
    assert lines[0].split() == ["NAME", "DTYPE", "SHAPE", "BYTES", "CHUNKS", "SOURCE"], lines[0]
    total = re.fullmatch(r"(\d+) tensors \((\d+) tied to another\), (\d+) bytes, "
                         r"(\d+) source files? \(safetensors\)", lines[-1])
    assert total, f"no summary line: {lines[-1]!r}"
    assert int(total[1]) == len(expect) and int(total[2]) == 0, lines[-1]
    assert int(total[3]) == sum(len(raw) for _d, _s, raw, _r in expect.values()), lines[-1]
    assert int(total[4]) >= len({rel for *_x, rel in expect.values()}), lines[-1]
    rows = {}
    for ln in lines[1:-1]:
        fields = ln.split()
        assert len(fields) == 6, f"not a row of six fields: {ln!r}"
        assert fields[0] not in rows, f"{fields[0]} listed twice"
        rows[fields[0]] = fields[1:]
    assert set(rows) == set(expect), (sorted(set(expect) - set(rows))[:5],
                                      sorted(set(rows) - set(expect))[:5])
    for name, (dtype, shape, raw, rel) in expect.items():
        d, shp, nbytes, chunks, where = rows[name]
        assert d == dtype, (name, d, dtype)
        assert shp == "[" + ",".join(map(str, shape)) + "]", (name, shp, shape)
        assert int(nbytes) == len(raw), (name, nbytes, len(raw))
        assert int(chunks) == (1 if raw else int(chunks)) and int(chunks) in (0, 1), (name, chunks)
        if raw:
            assert where == rel, (name, where, rel)


def test_inspect_json(source):
    _id, src = source
    expect = source_tensors(src)
    r = run_cli("inspect", "--json", src)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["format"] == "safetensors"
    rows = doc["tensors"]
    names = [t["name"] for t in rows]
    assert len(names) == len(set(names))
    assert set(names) == set(expect)
    for t in rows:
        dtype, shape, raw, rel = expect[t["name"]]
        assert t["dtype"] == dtype, t
        assert t["shape"] == shape, t
        assert t["bytes"] == len(raw) == math.prod(shape) * DTYPE_SIZE[dtype], t
        assert isinstance(t["chunks"], int), t
        assert isinstance(t["sources"], list), t
        if raw:
            assert t["chunks"] >= 1, t
            assert t["sources"] == [rel], t
        else:
            assert t["chunks"] in (0, 1), t
            assert set(t["sources"]) <= {rel}, t


def test_inspect_refuses_like_mount(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    r = run_cli("inspect", str(tmp_path))
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("unshardfs: model.safetensors: "), lines


# ---------------------------------------------------------------- option forms

def _export(tmp_path, tag, *opts, src="sample"):
    out = tmp_path / tag
    r = run_cli("export", "-q", "--force", *opts, SOURCES[src], str(out) + ("/" if "--max-shard-size" in
                                                                  " ".join(opts) else ""))
    assert r.returncode == 0, (opts, r.stderr)
    if out.is_dir():
        return {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    return out.read_bytes()


def test_value_options_take_both_forms(tmp_path):
    """--opt=value and --opt value (getopt_long's two forms) mean the same."""
    pairs = [(["--dtype=bf16"], ["--dtype", "bf16"]),
             (["--strip-prefix=model."], ["--strip-prefix", "model."]),
             (["--max-shard-size=64K"], ["--max-shard-size", "64K"]),
             (["--ties=off", "--format=safetensors"], ["--ties", "off", "--format", "safetensors"]),
             (["--view=bin"], ["--view", "bin"])]
    for i, (eq, sp) in enumerate(pairs):
        assert _export(tmp_path, f"eq{i}", *eq) == _export(tmp_path, f"sp{i}", *sp), eq


def test_value_option_without_its_value_is_a_usage_error(tmp_path):
    for opt in ("--dtype", "--max-shard-size", "--strip-prefix"):
        r = run_cli("inspect", SOURCES["sample"], opt)
        assert r.returncode == 1, (opt, r.returncode, r.stderr)
        lines = r.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("unshardfs: ") and opt in lines[0], lines


def test_remote_store_options_parse_and_leave_a_local_source_alone(tmp_path):
    """The remote SOURCE options (fs/opts.c): any of them with a local SOURCE changes
    nothing; a bad value is a usage error of one line naming the option."""
    plain = run_cli("inspect", SOURCES["sample"])
    assert plain.returncode == 0, plain.stderr
    r = run_cli("inspect", "--endpoint-url=http://127.0.0.1:9", "--region", "eu-west-1",
                "--profile=p", "--addressing=path", "--no-sign-request", "--block-size=1M",
                "--cache-dir=/nonexistent", "--cache-dir-size=1G", "--connections=4",
                "--retries=1", "--timeout=5", SOURCES["sample"])
    assert r.returncode == 0 and r.stdout == plain.stdout, r.stderr
    for bad in ("--addressing=sideways", "--endpoint-url=ftp://x", "--block-size=0",
                "--connections=0", "--retries=0", "--retries=101", "--timeout=x", "--region="):
        r = run_cli("inspect", bad, SOURCES["sample"])
        lines = r.stderr.splitlines()
        assert r.returncode == 1 and len(lines) == 1, (bad, r.returncode, r.stderr)
        assert bad.split("=")[0] in lines[0], (bad, lines)
    # and as -o NAME=V on a mount ('_' for '-'), checked before anything mounts
    r = run_cli("-o", "endpoint_url=http://127.0.0.1:9,no_sign_request,retries=0",
                SOURCES["sample"], str(tmp_path))
    lines = r.stderr.splitlines()
    assert r.returncode == 1 and len(lines) == 1 and "--retries" in lines[0], r.stderr


def test_dtype_aliases_as_torch_spells_them(tmp_path):
    want = {"bf16": _export(tmp_path, "bf16", "--dtype=bf16"),
            "f16": _export(tmp_path, "f16", "--dtype=f16"),
            "f32": _export(tmp_path, "f32", "--dtype=f32")}
    for alias, canon in [("bfloat16", "bf16"), ("torch.bfloat16", "bf16"), ("float16", "f16"),
                         ("fp16", "f16"), ("half", "f16"), ("float32", "f32"), ("fp32", "f32"),
                         ("float", "f32")]:
        assert _export(tmp_path, alias, f"--dtype={alias}") == want[canon], alias
    r = run_cli("inspect", "--dtype=int4", SOURCES["sample"])
    assert r.returncode == 1 and "int4" in r.stderr


def test_sizes_as_huggingface_reads_them(tmp_path):
    """KB/MB/GB are powers of 1000 (save_pretrained(max_shard_size="5GB")), KiB/MiB/GiB
    and the bare K/M/G powers of 1024, a bare number bytes; case does not matter."""
    def limit_of(size):
        return _export(tmp_path, f"s{size}", f"--max-shard-size={size}")
    # the sample's tensors are 256..65536 bytes: shards of at most 40000 and of at most
    # 40960 bytes are cut differently
    assert limit_of("40KB") != limit_of("40KiB")
    assert limit_of("40KB") == limit_of("40000") == limit_of("40kb")
    assert limit_of("40KiB") == limit_of("40960") == limit_of("40K") == limit_of("40kib")
    assert limit_of("1MB") == limit_of("1000000") and limit_of("1MiB") == limit_of("1048576")
    assert limit_of("1GB") == limit_of("1000000000")
    for bad in ("5XB", "5 GB", "-1", "1.5GB", "GB", "99999999999999999999"):
        r = run_cli("inspect", f"--max-shard-size={bad}", SOURCES["sample"])
        assert r.returncode == 1, (bad, r.stderr)
    r = run_cli("inspect", "--cache-size=20000000TB", SOURCES["sample"])
    assert r.returncode == 1, r.stderr  # overflows 2^64


def test_version_says_plainly_when_there_is_no_gpu():
    """No GPU is the usual case: "no CUDA device", not the CUDA runtime's "driver version
    is insufficient", which reads as something to fix."""
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("unshardfs "), r
    if os.path.exists("/proc/driver/nvidia/version"):
        assert re.search(r"(\d+ CUDA devices?|no CUDA device)\)$", r.stdout.strip()), r.stdout
    else:
        assert "no CUDA device" in r.stdout and "insufficient" not in r.stdout, r.stdout


def test_inspect_summary_is_pluralised(tmp_path):
    """One of a thing is singular: "1 tensor", "1 source file"."""
    from safetensors.numpy import save_file
    import numpy as np
    save_file({"w": np.zeros(1, dtype=np.uint8)}, str(tmp_path / "model.safetensors"))
    r = run_cli("inspect", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == \
        "1 tensor (0 tied to another), 1 byte, 1 source file (safetensors)", r.stdout


def _passed_through(mnt):
    """{relative path: size} of the files a mount serves as they are."""
    views = {"model.safetensors", "pytorch_model.bin", "optimizer.safetensors",
             "optimizer.json", "tensors"}
    out = {}
    for d, dirs, files in os.walk(mnt):
        rel = os.path.relpath(d, mnt)
        if rel == ".":
            dirs[:] = [x for x in dirs if x not in views]
        for f in files:
            p = os.path.normpath(os.path.join(rel, f))
            if p not in views:
                out[p] = os.path.getsize(os.path.join(d, f))
    return out


@pytest.mark.parametrize("name", ["sample", "single", "torch/accelerate", "torch/script_rng",
                                  "torch/fsdp2_2rank"])
def test_inspect_lists_optimizer_and_passthrough(name):
    """inspect shows what a mount serves besides the model: optimizer.safetensors' tensors,
    optimizer.json's size, and every passed-through file, in text (sections after the model
    table) and in --json ("optimizer", "passthrough"); the model's part is unchanged."""
    src = SOURCES.get(name) or os.path.join(FIXTURES, name)
    with mount(src) as mnt:
        pt = _passed_through(mnt)
        opt = None
        if os.path.exists(os.path.join(mnt, "optimizer.safetensors")):
            with safe_open(os.path.join(mnt, "optimizer.safetensors"), "np") as f:
                opt = {k: f.get_slice(k).get_shape() for k in f.keys()}
        opt_json = os.path.exists(os.path.join(mnt, "optimizer.json")) and \
            os.path.getsize(os.path.join(mnt, "optimizer.json"))
    doc = json.loads(run_cli("inspect", "--json", src).stdout)
    assert {p["path"]: p["bytes"] for p in doc["passthrough"]} == pt
    if opt is None and not opt_json:
        assert doc["optimizer"] is None
    else:
        assert {t["name"]: t["shape"] for t in doc["optimizer"]["tensors"]} == (opt or {})
        assert doc["optimizer"]["json_bytes"] == (opt_json or None)
    blocks = run_cli("inspect", src).stdout.split("\n\n")
    titles = [b.splitlines()[0] for b in blocks[1:]]
    assert ("optimizer (optimizer.safetensors, optimizer.json):" in titles) == \
        (doc["optimizer"] is not None), titles
    if pt:
        block = blocks[titles.index("passed through (served as they are):") + 1]
        rows = block.splitlines()
        assert rows[1].split() == ["BYTES", "PATH"]
        assert {r.split(None, 1)[1]: int(r.split()[0]) for r in rows[2:-1]} == pt
        assert rows[-1] == f"{len(pt)} file{'s' if len(pt) != 1 else ''}, " \
            f"{sum(pt.values())} byte{'s' if sum(pt.values()) != 1 else ''}"
    if opt:
        block = blocks[titles.index("optimizer (optimizer.safetensors, optimizer.json):") + 1]
        rows = block.splitlines()
        assert rows[1].split()[:3] == ["NAME", "DTYPE", "SHAPE"]
        assert {r.split()[0] for r in rows[2:-1]} == set(opt)
        assert rows[-1].startswith(f"{len(opt)} optimizer tensors, ")


def test_device_cuda_without_a_gpu_says_so_plainly(tmp_path):
    """--device=cuda is a demand: refused in one line, exit 1, in the same plain words
    as --version when the machine has no GPU (not "driver version is insufficient")."""
    if os.path.exists("/proc/driver/nvidia/version"):
        pytest.skip("this machine has an NVIDIA driver")
    mnt = tmp_path / "m"
    mnt.mkdir()
    r = run_cli("--device=cuda", SOURCES["sample"], str(mnt))
    assert r.returncode == 1, r
    assert r.stderr == "unshardfs: --device=cuda: no CUDA device: no NVIDIA driver is loaded\n" \
        or r.stderr == "unshardfs: --device=cuda: no CUDA device\n", r.stderr
