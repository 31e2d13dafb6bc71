"""Command line: usage, --help, inspect and inspect --json."""
import json
import math
import re

from conftest import DTYPE_SIZE, run_cli, source_tensors


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
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert lines[0].split() == ["NAME", "DTYPE", "SHAPE", "BYTES", "CHUNKS", "SOURCE"], lines[0]
    total = re.fullmatch(r"(\d+) tensors \((\d+) tied to another\), (\d+) bytes, "
                         r"(\d+) source files \(safetensors\)", lines[-1])
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
