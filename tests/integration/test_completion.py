"""Bash completion (tools/completion/unshardfs): installed by meson where bash-completion
looks (share/bash-completion/completions/unshardfs), loadable by plain bash, and completing
subcommands, options, option values and paths."""
import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import BUILD, REPO, require_tool

SCRIPT = os.path.join(REPO, "tools", "completion", "unshardfs")


@pytest.fixture(scope="module")
def installed_script():
    require_tool("meson")
    dest = tempfile.mkdtemp(prefix="unshardfs-completion-")
    r = subprocess.run(["meson", "install", "-C", BUILD, "--no-rebuild", "--destdir", dest],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    found = [os.path.join(d, f) for d, _dirs, files in os.walk(dest) for f in files
             if os.path.join(d, f).endswith(os.path.join("share", "bash-completion",
                                                         "completions", "unshardfs"))]
    yield found
    shutil.rmtree(dest, ignore_errors=True)


def test_meson_installs_it_where_bash_completion_looks(installed_script):
    assert len(installed_script) == 1, installed_script
    with open(installed_script[0]) as a, open(SCRIPT) as b:
        assert a.read() == b.read()
    r = subprocess.run(["bash", "-c", f"source {installed_script[0]}; complete -p unshardfs"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and r.stdout.strip() == "complete -F _unshardfs unshardfs", r


def complete(*words, cwd=None):
    """COMPREPLY for the command line @words (the last one being completed), as bash
    splits it: '=' is a word of its own (COMP_WORDBREAKS)."""
    script = (f"source {SCRIPT}\n"
              'COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _unshardfs\n'
              'printf "%s\\n" "${COMPREPLY[@]}"\n')
    r = subprocess.run(["bash", "-c", script, "bash", "unshardfs", *words], cwd=cwd,
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return set(r.stdout.split())


def test_subcommands_options_and_values():
    assert {"inspect", "export"} <= complete("")
    assert complete("export", "--f") >= {"--force", "--format="}
    assert "--optimizer" in complete("export", "--")
    assert complete("inspect", "--j") == {"--json"}
    assert "--json" not in complete("--")            # mounting has no --json
    assert "--direct-io=" in complete("--") and {"-f", "-o", "-d"} <= complete("-")
    assert complete("--format", "=", "") == {"auto", "safetensors", "torch", "dcp",
                                             "deepspeed", "deepspeed-universal"}
    assert complete("--format", "=", "de") == {"deepspeed", "deepspeed-universal"}
    assert complete("--dtype", "b") == {"bf16", "bfloat16"}         # --dtype VALUE
    assert complete("--device", "=", "") == {"auto", "cpu", "cuda", "cuda:0"}
    assert complete("--ties", "=", "") == {"auto", "declared", "off", "equal"}
    assert complete("export", "--view", "=", "") == {"safetensors", "bin"}


def test_paths(tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "mnt").mkdir()
    (tmp_path / "model.pt").write_bytes(b"")
    (tmp_path / "notes.txt").write_bytes(b"")
    # SOURCE: directories and checkpoint files; MOUNTPOINT: directories only
    assert complete("", cwd=tmp_path) >= {"ckpt", "mnt", "model.pt"}
    assert "notes.txt" not in complete("", cwd=tmp_path)
    assert complete("ckpt", "", cwd=tmp_path) == {"ckpt", "mnt"}
    assert complete("--ties", "=", "off", "ckpt", "m", cwd=tmp_path) == {"mnt"}
    assert complete("--dtype", "bf16", "ckpt", "", cwd=tmp_path) == {"ckpt", "mnt"}
    # export's OUT: anything
    assert "notes.txt" in complete("export", "ckpt", "", cwd=tmp_path)
    assert complete("inspect", "c", cwd=tmp_path) == {"ckpt"}


def test_every_option_of_help_is_completed():
    """The completion's lists follow fs/opts.c: each option --help names is offered."""
    from conftest import run_cli
    import re
    text = run_cli("--help").stdout
    opts = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+|-[a-zA-Z])(?=[=\s,])", text))
    opts -= {"--NAME", "-u"}  # "--NAME=VALUE", "fusermount3 -u"
    offered = complete("--") | complete("-") | complete("export", "--") | \
        complete("inspect", "--")
    offered = {o.rstrip("=") for o in offered}
    assert opts - offered == set(), sorted(opts - offered)
