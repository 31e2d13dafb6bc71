"""The docs' runnable examples, run: every fenced block marked as a doc-test in README.md
and docs/*.md runs against the fixtures, and fails the test when a command in it fails.

The marker is an HTML comment (invisible when the Markdown is rendered) on the line just
before the fence, which must be a ```sh block:

    <!-- doctest NAME=FIXTURE ... -->

Each block runs on its own, with `bash -euo pipefail`, in a fresh temporary directory
(so `out/` and other relative paths land there), with `unshardfs` ($UNSHARDFS_BUILD/fs)
and `python` (the test venv's) first on PATH, and with these placeholders replaced where
they stand as a whole path:
- `/mnt/m`: a fresh, empty mount point, unmounted after the block if it is still mounted;
- each NAME given in the marker: tests/fixtures/FIXTURE (a trailing '/' kept as written).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import BUILD, FIXTURES, FUSERMOUNT, REPO

MARKER = re.compile(r"^<!--\s*doctest((?:\s+\S+=\S+)*)\s*-->\s*$")
FENCE = re.compile(r"^```(\S*)\s*$")
MOUNTPOINT = "/mnt/m"


class DocTestError(Exception):
    pass


def marked_blocks(path):
    """[(line number of the fence, {placeholder: fixture}, code)] of @path's marked blocks;
    a marker not followed by a ```sh fence is an error, not a silent skip."""
    with open(path) as f:
        lines = f.read().split("\n")
    blocks = []
    in_fence = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue  # a marker shown inside a block is text
        m = MARKER.match(line)
        if not m:
            if "doctest" in line and line.lstrip().startswith("<!--"):
                raise DocTestError(f"{path}:{i + 1}: malformed doctest marker: {line!r}")
            continue
        fence = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if not fence or fence[1] != "sh":
            raise DocTestError(f"{path}:{i + 1}: a doctest marker must come just before "
                               "a ```sh fence")
        end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise DocTestError(f"{path}:{i + 2}: the fenced block never ends")
        subs = dict(kv.split("=", 1) for kv in m[1].split())
        blocks.append((i + 2, subs, "\n".join(lines[i + 2:end]) + "\n"))
    return blocks


def substitute(code, subs, mnt):
    """Replace each placeholder where it stands as a whole path (not inside a longer one)."""
    for name, value in sorted(subs.items(), key=lambda kv: -len(kv[0])) + [(MOUNTPOINT, mnt)]:
        code = re.sub(r"(?<![\w.\-/])" + re.escape(name) + r"(?![\w.\-])",
                      lambda _m, v=value: v, code)
    return code


def fixture_path(name, fixture):
    path = os.path.join(FIXTURES, fixture.rstrip("/"))
    if not os.path.exists(path):
        raise DocTestError(f"placeholder {name}: no fixture {fixture!r} in tests/fixtures")
    return path + ("/" if name.endswith("/") else "")


def run_block(subs, code, timeout=180):
    """Run one block as described above; returns the CompletedProcess (never raises on a
    failing command: the caller judges)."""
    work = tempfile.mkdtemp(prefix="unshardfs-doctest-")
    mnt = os.path.join(work, "mnt")
    os.mkdir(mnt)
    run_dir = os.path.join(work, "cwd")
    os.mkdir(run_dir)
    env = dict(os.environ, PATH=os.pathsep.join([os.path.join(BUILD, "fs"),
                                                 os.path.dirname(sys.executable),
                                                 os.environ.get("PATH", "/usr/bin:/bin")]))
    try:
        script = substitute(code, {k: fixture_path(k, v) for k, v in subs.items()}, mnt)
        return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=run_dir,
                              env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        if os.path.ismount(mnt):
            if subprocess.run([FUSERMOUNT, "-u", mnt], capture_output=True).returncode:
                subprocess.run([FUSERMOUNT, "-uz", mnt], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


DOCS = [os.path.join(REPO, "README.md")] + sorted(
    os.path.join(REPO, "docs", f) for f in os.listdir(os.path.join(REPO, "docs"))
    if f.endswith(".md"))
CASES = [(os.path.relpath(d, REPO), line, subs, code)
         for d in DOCS for line, subs, code in marked_blocks(d)]


@pytest.mark.parametrize("doc,line,subs,code", CASES,
                         ids=[f"{d}:{line}" for d, line, _s, _c in CASES])
def test_marked_block_runs(doc, line, subs, code):
    r = run_block(subs, code)
    assert r.returncode == 0, (f"{doc}:{line}: a command failed (status {r.returncode}):\n"
                               f"{code}\n--- stdout\n{r.stdout[-3000:]}\n"
                               f"--- stderr\n{r.stderr[-3000:]}")


def test_the_quick_usage_blocks_are_marked():
    """CI runs the README's quick usage and the quickstart's main commands: their markers
    must not get lost in an edit."""
    per_doc = {}
    for doc, _line, _subs, code in CASES:
        per_doc.setdefault(doc, []).append(code)
    assert any("fusermount3 -u /mnt/m" in c for c in per_doc.get("README.md", [])), per_doc
    assert len(per_doc.get(os.path.join("docs", "quickstart.md"), [])) >= 4, per_doc


def test_a_failing_command_fails_the_doctest(tmp_path):
    """The harness itself: a marked block whose command fails is reported as failing, the
    placeholders are replaced, and a marker without a sh fence is an error."""
    doc = tmp_path / "doc.md"
    doc.write_text("intro\n\n<!-- doctest src=single -->\n```sh\n"
                   "unshardfs src /mnt/m\nls /mnt/m/model.safetensors\n```\n\n"
                   "<!-- doctest -->\n```sh\nfalse\necho not reached\n```\n\n"
                   "```sh\nfalse   # not marked: never run\n```\n"
                   "```\n<!-- doctest -->\n```\n")  # a marker quoted in a block: text
    (ok, ok_subs, ok_code), (bad, bad_subs, bad_code) = marked_blocks(str(doc))
    assert (ok, bad) == (4, 10)
    r = run_block(ok_subs, ok_code)
    assert r.returncode == 0 and r.stdout.strip().endswith("model.safetensors"), r
    r = run_block(bad_subs, bad_code)
    assert r.returncode != 0 and "not reached" not in r.stdout
    doc.write_text("<!-- doctest -->\n```python\nprint(1)\n```\n")
    with pytest.raises(DocTestError):
        marked_blocks(str(doc))
    with pytest.raises(DocTestError):
        run_block({"x": "no_such_fixture"}, "true\n")
