"""`unshardfs export`: the mounted views written to disk without FUSE.

The contract is byte identity with the mount (the same views, read the same way), atomic
output (a temporary renamed when complete, removed on failure or a signal), and the exit
statuses of the mount: 0 done, 1 usage, 2 the checkpoint cannot be served or written.
Also here: two mounts of one source at once (the multi-node pattern of docs/troubleshooting.md).
"""
import filecmp
import json
import glob
import os
import pty
import shutil
import signal
import subprocess
import time

import pytest

from conftest import FIXTURES, SOURCES, mount, require_binary, require_tool, run_cli

TORCH = os.path.join(FIXTURES, "torch")
EXPORT_SOURCES = dict(SOURCES, **{
    "llama_fsdp2": os.path.join(TORCH, "llama_fsdp2"),
    "fsdp2_3rank": os.path.join(TORCH, "fsdp2_3rank"),
    "ddp_compile": os.path.join(TORCH, "ddp_compile.pt"),
    "bin_sharded": os.path.join(TORCH, "bin_sharded"),
    "zstd": os.path.join(TORCH, "zstd"),
})


# What a mount of each fixture passes through (its files that are not the checkpoint's).
PASSED_THROUGH = {
    "sample": ["README.md", "config.json", "generation_config.json", "tokenizer_config.json"],
    "single": ["notes.txt"],
}


def leftovers(d):
    return [p for p in os.listdir(d) if ".tmp." in p]


@pytest.mark.parametrize("name", sorted(EXPORT_SOURCES))
def test_export_matches_mount(name, tmp_path):
    src = EXPORT_SOURCES[name]
    st, binf = tmp_path / "model.safetensors", tmp_path / "model.bin"
    r = run_cli("export", src, str(st))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    r = run_cli("export", "--view=bin", src, str(binf))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    with mount(src) as mnt:
        assert filecmp.cmp(os.path.join(mnt, "model.safetensors"), st, shallow=False)
        assert filecmp.cmp(os.path.join(mnt, "pytorch_model.bin"), binf, shallow=False)
    assert leftovers(tmp_path) == []


def test_export_sharded_matches_sharded_mount(tmp_path):
    src = os.path.join(TORCH, "llama_fsdp2")
    out = tmp_path / "out"
    r = run_cli("export", "--max-shard-size=64K", src, str(out))
    assert r.returncode == 0, r.stderr
    names = sorted(os.listdir(out))
    assert "model.safetensors.index.json" in names and len(names) > 2
    with mount(src, "--max-shard-size=64K") as mnt:
        for n in names:
            assert filecmp.cmp(os.path.join(mnt, n), out / n, shallow=False), n


def test_export_into_existing_directory_and_stdout(tmp_path):
    src = SOURCES["sample"]
    r = run_cli("export", "--view=bin", src, str(tmp_path))
    assert r.returncode == 0, r.stderr
    # an existing directory is OUTDIR/: the view and every passed-through file
    assert sorted(os.listdir(tmp_path)) == sorted(PASSED_THROUGH["sample"] +
                                                  ["pytorch_model.bin"])
    binary = require_binary()
    piped = subprocess.run([binary, "export", src, "-"], capture_output=True, timeout=30)
    assert piped.returncode == 0, piped.stderr
    with mount(src) as mnt:
        with open(os.path.join(mnt, "model.safetensors"), "rb") as f:
            assert piped.stdout == f.read()


def test_export_exit_statuses(tmp_path):
    src = SOURCES["sample"]
    # usage errors: 1
    for argv in (["export", src], ["export", "--view=gguf", src, str(tmp_path / "x")],
                 ["export", "--dtype=int4", src, str(tmp_path / "x")],
                 ["export", "-f", src, str(tmp_path / "x")],
                 ["export", "--max-shard-size=1M", src, "-"],
                 ["export", "--max-shard-size=1M", "--view=bin", src, str(tmp_path / "x")],
                 ["export", "--max-shard-size=0", src, str(tmp_path / "x")]):
        r = run_cli(*argv)
        assert r.returncode == 1, (argv, r.stderr)
        assert r.stderr.startswith("unshardfs: "), r.stderr
    # a cast export works and is the cast view
    r = run_cli("export", "--dtype=bf16", src, str(tmp_path / "bf16.safetensors"))
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "bf16.safetensors", "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        assert b'"dtype":"BF16"' in f.read(n)
    os.unlink(tmp_path / "bf16.safetensors")
    # the checkpoint cannot be served: 2, one line
    r = run_cli("export", str(tmp_path / "missing"), str(tmp_path / "x"))
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    # OUT cannot be written: 2, and nothing left behind
    r = run_cli("export", src, str(tmp_path / "no" / "such" / "dir" / "m.safetensors"))
    assert r.returncode == 2 and r.stderr.startswith("unshardfs: "), r.stderr
    assert leftovers(tmp_path) == [] and not os.path.exists(tmp_path / "x")


def test_export_failure_removes_temp(tmp_path):
    """A write that fails (a full disk, simulated with RLIMIT_FSIZE) leaves no temp."""
    import resource

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, 50_000))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death

    out = tmp_path / "m.safetensors"
    p = subprocess.run([require_binary(), "export", SOURCES["sample"], str(out)],
                       capture_output=True, text=True, preexec_fn=small_files, timeout=30)
    assert p.returncode == 2, p.stderr
    assert "File too large" in p.stderr
    assert os.listdir(tmp_path) == []


def test_export_sigint_removes_temp(tmp_path):
    """SIGINT mid-write: the temporary is removed and the process dies of SIGINT."""
    strace = require_tool("strace")  # slows the writes down
    out = tmp_path / "m.safetensors"
    # every write(2) takes 0.2 s: the export is still running when SIGINT comes
    proc = subprocess.Popen([strace, "-f", "-qq", "-o", "/dev/null",
                             "-e", "inject=write:delay_exit=200000",
                             require_binary(), "export", "--max-shard-size=64K",
                             os.path.join(TORCH, "llama_fsdp2"), str(out)],
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while not glob.glob(str(out / "*.tmp.*")):
        assert proc.poll() is None and time.monotonic() < deadline, "export never started"
        time.sleep(0.01)
    pid = int(glob.glob(str(out / "*.tmp.*"))[0].rsplit(".", 1)[1])
    os.kill(pid, signal.SIGINT)
    proc.wait(timeout=30)
    assert leftovers(out) == [], os.listdir(out)
    assert not os.path.exists(out / "model.safetensors.index.json")
    # nothing was published: config.json, written first, waits for the set's renames too
    assert os.listdir(out) == [], os.listdir(out)


def test_export_progress_only_on_a_terminal(tmp_path):
    src = os.path.join(TORCH, "llama_fsdp2")
    r = run_cli("export", src, str(tmp_path / "a"))
    assert r.returncode == 0 and r.stderr == ""

    def on_tty(*extra):
        master, slave = pty.openpty()
        p = subprocess.Popen([require_binary(), "export", *extra, src,
                              str(tmp_path / ("b" + str(len(extra))))],
                             stderr=slave, stdout=subprocess.DEVNULL)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        os.close(master)
        assert p.wait(timeout=30) == 0
        return b"".join(chunks).decode(errors="replace")

    shown = on_tty()
    assert "100%" in shown and "ETA" in shown and "/s" in shown, shown
    assert on_tty("-q") == ""


def test_two_mounts_of_one_source_are_independent():
    """The multi-node pattern: every node mounts the same (shared) checkpoint itself."""
    src = os.path.join(TORCH, "llama_fsdp2")
    with mount(src) as a, mount(src, "--max-shard-size=64K") as b:
        assert os.path.exists(os.path.join(a, "model.safetensors"))
        assert os.path.exists(os.path.join(b, "model.safetensors.index.json"))
        with open(os.path.join(a, "pytorch_model.bin"), "rb") as f:
            bin_a = f.read()
        with mount(src) as c:
            with open(os.path.join(c, "pytorch_model.bin"), "rb") as f:
                assert f.read() == bin_a
        # c is gone; a and b still serve
        with open(os.path.join(a, "model.safetensors"), "rb") as f:
            whole = f.read()
        assert len(whole) == os.path.getsize(os.path.join(a, "model.safetensors"))
        assert os.listdir(b)


def test_export_into_a_device_a_fifo_and_through_a_symlink(tmp_path):
    """OUT an existing device or FIFO is written in place (a rename used to put a
    regular file where /dev/null was); a symlink's target is replaced, not the link."""
    import stat as st
    import threading
    src = SOURCES["single"]
    with mount(src) as mnt:
        with open(os.path.join(mnt, "model.safetensors"), "rb") as f:
            want = f.read()
    dev = str(tmp_path / "null")
    os.mknod(dev, 0o666 | st.S_IFCHR, os.makedev(1, 3))
    assert run_cli("export", src, dev).returncode == 0
    assert st.S_ISCHR(os.stat(dev).st_mode)
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    got = []
    t = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    t.start()
    r = run_cli("export", src, fifo)
    t.join(10)
    assert r.returncode == 0 and got == [want] and st.S_ISFIFO(os.stat(fifo).st_mode)
    real, link = tmp_path / "real.st", tmp_path / "link.st"
    real.write_bytes(b"old")
    link.symlink_to(real)
    r = run_cli("export", src, str(link))
    assert r.returncode == 1 and "already exists" in r.stderr and real.read_bytes() == b"old"
    assert run_cli("export", "--force", src, str(link)).returncode == 0
    assert os.path.islink(link) and real.read_bytes() == want


def test_export_to_a_new_directory_and_errors_name_the_output(tmp_path):
    r = run_cli("export", SOURCES["single"], str(tmp_path / "new") + "/")
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path / "new")) == ["model.safetensors", "notes.txt"]
    r = run_cli("export", SOURCES["single"], str(tmp_path / "missing" / "x.st"))
    assert r.returncode == 2 and ".tmp." not in r.stderr
    assert r.stderr.startswith(f"unshardfs: {tmp_path / 'missing' / 'x.st'}: "), r.stderr


def test_reexport_removes_stale_shards(tmp_path):
    """As save_pretrained does: the shards of an earlier export (another count) go;
    other files stay."""
    out = tmp_path / "out"
    assert run_cli("export", "--max-shard-size=20K", SOURCES["sample"], str(out)).returncode == 0
    before = set(os.listdir(out))
    (out / "notes.txt").write_text("mine")
    assert run_cli("export", "--force", "--max-shard-size=100K", SOURCES["sample"],
                   str(out)).returncode == 0
    after = set(os.listdir(out))
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = set(index["weight_map"].values())
    assert after == shards | {"model.safetensors.index.json", "notes.txt",
                              *PASSED_THROUGH["sample"]}, sorted(after)
    assert before - after  # the old set was another one


@pytest.mark.parametrize("opt", ["--cache-size=-1", "--cache-size=+5", "--max-shard-size=-5",
                                 "--device=cuda:-1", "--device=cuda:99999999999999999999"])
def test_signed_and_wrapped_numbers_are_usage_errors(opt):
    r = run_cli("inspect", opt, SOURCES["single"])
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, (r.returncode, r.stderr)


def test_no_unwrap_keeps_the_container_level():
    """--no-unwrap keeps source names exactly, the container key ("model") included."""
    for src, want in ((os.path.join(FIXTURES, "torch", "fsdp2_2rank"), "model.blocks.0.lin1.bias"),
                      (os.path.join(FIXTURES, "torch", "ddp_compile.pt"),
                       "model.module._orig_mod.blocks.0.lin1.bias")):
        r = run_cli("inspect", "--json", "--no-unwrap", src)
        names = {t["name"] for t in json.loads(r.stdout)["tensors"]}
        assert want in names, sorted(names)[:4]


@pytest.mark.parametrize("cmd", ["inspect", "export"])
@pytest.mark.parametrize("opt", [["-f"], ["-d"], ["-o", "allow_other"]], ids=["f", "d", "o"])
def test_mount_options_are_usage_errors_elsewhere(cmd, opt, tmp_path):
    args = [cmd, *opt, SOURCES["single"]] + ([str(tmp_path / "x")] if cmd == "export" else [])
    r = run_cli(*args)
    assert r.returncode == 1 and "is a mount option" in r.stderr, (r.returncode, r.stderr)


# ---------------------------------------------------------------- OUTDIR/: a loadable directory

VIEW_NAMES = {"model.safetensors", "pytorch_model.bin", "optimizer.safetensors",
              "optimizer.json", "model.safetensors.index.json"}


def files_under(root, skip=()):
    """{relative path: bytes} of every regular file under @root, top names in @skip left out."""
    out = {}
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        if rel == ".":
            dirs[:] = [x for x in dirs if x not in skip]
        for f in files:
            p = os.path.normpath(os.path.join(rel, f))
            if p not in skip:
                with open(os.path.join(d, f), "rb") as fh:
                    out[p] = fh.read()
    return out


def is_shard(name):
    return name.startswith("model-") and name.endswith(".safetensors")


@pytest.mark.parametrize("name", ["sample", "accelerate", "llama_fsdp2", "script_rng"])
def test_outdir_is_the_mount_minus_tensors(name, tmp_path):
    """OUTDIR/ holds exactly the files the mount's root shows -- the weights and every
    passed-through file, byte for byte -- without tensors/ and pytorch_model.bin; with
    --optimizer, the optimizer files too. A directory that would stay empty is not made."""
    src = dict(EXPORT_SOURCES, accelerate=os.path.join(TORCH, "accelerate"),
               script_rng=os.path.join(TORCH, "script_rng"))[name]
    out = str(tmp_path / "out") + "/"
    opt = ["--optimizer"] if name in ("accelerate", "script_rng") else []
    r = run_cli("export", *opt, src, out)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    with mount(src) as mnt:
        want = files_under(mnt, skip={"tensors", "pytorch_model.bin"})
    if not opt:
        want = {k: v for k, v in want.items() if not k.startswith("optimizer.")}
    got = files_under(out)
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k] == want[k], k
    for d, dirs, files in os.walk(out):
        assert dirs or files, f"empty directory {d}"
    if name == "accelerate":
        assert "optimizer.safetensors" in got and "trainer_state.json" in got
        assert not os.path.exists(os.path.join(out, "pytorch_model_fsdp_0"))


@pytest.mark.parametrize("shard", [None, "64K"], ids=["one", "sharded"])
def test_outdir_loads_with_from_pretrained(shard, tmp_path):
    """The point of OUTDIR/: `from_pretrained(OUTDIR)` with nothing copied by hand
    (config.json comes along); the model equals the one loaded from the mount."""
    import torch
    from transformers import AutoModelForCausalLM
    src = os.path.join(TORCH, "llama_fsdp2")
    out = tmp_path / "out"
    r = run_cli("export", *([f"--max-shard-size={shard}"] if shard else []), src, str(out) + "/")
    assert r.returncode == 0, r.stderr
    names = set(os.listdir(out))
    assert "config.json" in names
    assert ("model.safetensors.index.json" in names) == bool(shard), names
    assert any(map(is_shard, names)) == bool(shard), names
    from safetensors.torch import load as st_load
    got, info = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32,
                                                     output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    with mount(src) as mnt:  # read into memory: nothing keeps the mount busy
        with open(os.path.join(mnt, "model.safetensors"), "rb") as f:
            want = st_load(f.read())
    have = got.state_dict()
    assert set(want) <= set(have), sorted(set(want) - set(have))
    assert all(torch.equal(want[k], have[k]) for k in want)


def test_optimizer_option(tmp_path):
    src = os.path.join(TORCH, "fsdp2_2rank")
    # --optimizer writes several files: OUT is a directory even without the '/'
    r = run_cli("export", "--optimizer", src, str(tmp_path / "d"))
    assert r.returncode == 0, r.stderr
    with mount(src) as mnt:
        for n in ("optimizer.safetensors", "optimizer.json", "model.safetensors"):
            assert filecmp.cmp(os.path.join(mnt, n), tmp_path / "d" / n, shallow=False), n
    # usage errors: 1, one line
    (tmp_path / "f").write_bytes(b"")
    for out in (str(tmp_path / "f"), "-"):
        r = run_cli("export", "--optimizer", src, out)
        assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
        assert r.stderr.startswith("unshardfs: ") and "--optimizer" in r.stderr, r.stderr
    # a checkpoint without optimizer state cannot be served so: 2, one line, nothing made
    r = run_cli("export", "--optimizer", SOURCES["sample"], str(tmp_path / "none") + "/")
    assert r.returncode == 2 and r.stderr.startswith("unshardfs: .: "), r.stderr
    assert len(r.stderr.splitlines()) == 1 and not os.path.exists(tmp_path / "none")


def test_existing_outputs_are_refused_without_force(tmp_path):
    """No output file is replaced silently: one line naming it, exit 1 (usage: --force),
    and OUT as it was -- checked before anything is written."""
    src = SOURCES["sample"]
    f = tmp_path / "m.safetensors"
    f.write_bytes(b"mine")
    r = run_cli("export", src, str(f))
    assert r.returncode == 1 and r.stderr == \
        f"unshardfs: {f}: already exists (--force replaces it)\n", r.stderr
    assert f.read_bytes() == b"mine"
    # one passed-through name taken in OUTDIR/: nothing at all is written
    d = tmp_path / "d"
    d.mkdir()
    (d / "config.json").write_text("{}")
    r = run_cli("export", src, str(d) + "/")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
    assert str(d / "config.json") in r.stderr
    assert os.listdir(d) == ["config.json"] and (d / "config.json").read_text() == "{}"
    # --force replaces them all
    r = run_cli("export", "--force", src, str(d) + "/")
    assert r.returncode == 0, r.stderr
    assert (d / "config.json").read_bytes() == open(os.path.join(src, "config.json"), "rb").read()
    r = run_cli("export", "--force", src, str(f))
    assert r.returncode == 0 and f.read_bytes()[:8] != b"mine"
    assert leftovers(tmp_path) == [] and leftovers(d) == []


def test_binary_is_not_written_to_a_terminal(tmp_path):
    """`export SRC -` on a terminal, or OUT naming one: refused (1), nothing written."""
    master, slave = pty.openpty()
    try:
        for argv, stdout in ((["-"], slave), ([os.ttyname(slave)], subprocess.PIPE)):
            p = subprocess.run([require_binary(), "export", SOURCES["single"], *argv],
                               stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=30)
            assert p.returncode == 1, (argv, p.stderr)
            lines = p.stderr.splitlines()
            assert len(lines) == 1 and "terminal" in lines[0], lines
            assert lines[0].startswith(f"unshardfs: {argv[0]}: "), lines
        os.set_blocking(master, False)
        try:
            written = os.read(master, 1 << 16)
        except BlockingIOError:
            written = b""
        assert written == b"", written[:40]
    finally:
        os.close(master)
        os.close(slave)
