"""Mount command line: usage errors and mount failures are one line with a remedy,
-o uid=,gid=,umask= and --views shape what is served, SOURCE refusals name SOURCE
as given and point at the checkpoint meant, consumed shard folders are not shown."""
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time

import pytest

from conftest import FIXTURES, FUSERMOUNT, hub_snapshot, mount, require_binary, run_cli

SAMPLE = os.path.join(FIXTURES, "sample")
ACCELERATE = os.path.join(FIXTURES, "torch", "accelerate")
DS_Z2 = os.path.join(FIXTURES, "deepspeed", "z2_2rank")
UNIVERSAL = os.path.join(FIXTURES, "deepspeed", "uc_z3_2rank")
NOBODY = 65534


def one_line(r, status):
    """The single stderr line of a run that must exit @status."""
    lines = r.stderr.splitlines()
    assert r.returncode == status, (r.returncode, r.stderr)
    assert len(lines) == 1, f"expected one stderr line, got {lines!r}"
    assert lines[0].startswith("unshardfs: "), lines[0]
    return lines[0]


def mount_argv(*opts, source=SAMPLE, mnt):
    return [require_binary(), "-f", *opts, source, mnt]


def run_mount(*opts, source=SAMPLE, mnt, timeout=10, **kw):
    """Run a mount that must fail; never leave one behind."""
    try:
        return subprocess.run(mount_argv(*opts, source=source, mnt=mnt), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kw)
    finally:
        if os.path.ismount(mnt):
            subprocess.run([FUSERMOUNT, "-u", mnt], capture_output=True)


# ---- usage errors: one line, exit 1 ----------------------------------------------

@pytest.mark.parametrize("opts, says", [
    (("-o", "bogus"), "unknown -o option 'bogus'"),
    (("-o", "ro,noatime,bogus=1"), "unknown -o option 'bogus=1'"),
    (("-o", "max_readahead=4096"), "unknown -o option 'max_readahead=4096'"),
    (("-o", "format"), "-o format needs a value"),
    (("-o", "no_unwrap=yes"), "-o no-unwrap takes no value"),
    (("-o", "uid=abc"), "bad -o uid=abc"),
    (("-o", "uid=-1"), "bad -o uid=-1"),
    (("-o", "gid=1x"), "bad -o gid=1x"),
    (("-o", "umask=8"), "bad -o umask=8"),
    (("-o", "umask=1000"), "bad -o umask=1000"),
    (("--uid=0",), "unknown option '--uid=0'"),
    (("--views=safetensors,foo",), "unknown view 'foo'"),
    (("-o", "views=bins"), "unknown view 'bins'"),
    (("-o", "views=bin,bogus"), "unknown -o option 'bogus'"),
    (("-o", "views=bin", "-o", "tensors"), "unknown -o option 'tensors'"),
    (("--views=",), "unknown view ''"),
    (("--device=cuda:-1",), "unknown --device 'cuda:-1'"),
    (("--device=cuda:4097",), "unknown --device 'cuda:4097'"),
    (("--no-unwrap=1",), "--no-unwrap takes no value"),
    (("--format", "nope"), "unknown --format 'nope'"),
])
def test_usage_error_is_one_line(tmp_path, opts, says):
    mnt = str(tmp_path)
    line = one_line(run_mount(*opts, mnt=mnt), 1)
    assert says in line, line
    assert not os.path.ismount(mnt)


def test_missing_value_is_one_line():
    line = one_line(run_cli(SAMPLE, "/mnt", "--views"), 1)
    assert "--views needs a value" in line, line


def test_unknown_view_lists_the_valid_ones(tmp_path):
    line = one_line(run_mount("--views=model", mnt=str(tmp_path)), 1)
    assert "safetensors, bin, tensors, optimizer" in line, line


def test_views_is_a_mount_option():
    line = one_line(run_cli("inspect", "--views=bin", SAMPLE), 1)
    assert "--views" in line, line


def test_fuse_options_still_reach_fuse():
    with mount(SAMPLE, "-o", "noatime,nodev,nosuid,default_permissions") as mnt:
        assert "model.safetensors" in os.listdir(mnt)


def test_help_documents_views_and_owner():
    r = run_cli("--help")
    assert r.returncode == 0
    for s in ("--views=LIST", "uid=N", "gid=N", "umask=M"):
        assert s in r.stdout, s


# ---- -o uid=,gid=,umask= -------------------------------------------------------

def walk(mnt):
    for root, dirs, files in os.walk(mnt):
        for n in dirs + files:
            yield os.path.join(root, n)
    yield mnt


def test_uid_gid_umask(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(SAMPLE, src)
    (src / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(src / "run.sh", 0o755)
    (src / "sub").mkdir()
    (src / "sub" / "notes.txt").write_text("x")
    with mount(str(src), "-o", "uid=1234,gid=4321,umask=027") as mnt:
        paths = list(walk(mnt))
        assert len(paths) > 20
        for p in paths:
            st = os.lstat(p)
            assert (st.st_uid, st.st_gid) == (1234, 4321), (p, st.st_uid, st.st_gid)
            want = 0o550 if stat.S_ISDIR(st.st_mode) else 0o440
            if p.endswith("run.sh"):
                want = 0o550
            assert stat.S_IMODE(st.st_mode) == want, (p, oct(st.st_mode))


def test_umask_alone_keeps_owner():
    src_st = os.stat(os.path.join(SAMPLE, "config.json"))
    with mount(SAMPLE, "-o", "umask=0222") as mnt:
        st = os.stat(os.path.join(mnt, "config.json"))
        assert (st.st_uid, st.st_gid) == (src_st.st_uid, src_st.st_gid)
        assert stat.S_IMODE(st.st_mode) == 0o444
        assert stat.S_IMODE(os.stat(os.path.join(mnt, "tensors")).st_mode) == 0o555


def test_owner_is_what_the_kernel_checks(tmp_path):
    """default_permissions: with umask=077 and uid=0, another user may not read."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to read as another user")
    with mount(SAMPLE, "-o", "uid=0,gid=0,umask=077,allow_other") as mnt:
        r = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                            "--clear-groups", "cat", os.path.join(mnt, "config.json")],
                           capture_output=True, text=True)
        assert r.returncode != 0 and "Permission denied" in r.stderr, (r.returncode, r.stderr)


# ---- --views -------------------------------------------------------------------

VIEW_FILES = {
    "safetensors": {"model.safetensors"},
    "bin": {"pytorch_model.bin"},
    "tensors": {"tensors"},
    "optimizer": {"optimizer.safetensors", "optimizer.json"},
}


@pytest.mark.parametrize("views", ["safetensors", "bin", "tensors", "optimizer",
                                   "safetensors,tensors", "bin,optimizer",
                                   "safetensors,bin,tensors,optimizer"])
def test_views_choose_what_appears(views):
    every = set().union(*VIEW_FILES.values())
    with mount(ACCELERATE) as mnt:
        passthrough = set(os.listdir(mnt)) - every
    want = set().union(*(VIEW_FILES[v] for v in views.split(","))) | passthrough
    with mount(ACCELERATE, f"--views={views}") as mnt:
        assert set(os.listdir(mnt)) == want, (views, sorted(os.listdir(mnt)))
    # fstab's way: -o splits on commas, and the names after views= continue it
    with mount(ACCELERATE, "-o", f"ro,views={views},noatime") as mnt:
        assert set(os.listdir(mnt)) == want, (views, sorted(os.listdir(mnt)))
    escaped = views.replace(",", "\\,")
    with mount(ACCELERATE, "-o", f"views={escaped}") as mnt:
        assert set(os.listdir(mnt)) == want, (views, sorted(os.listdir(mnt)))


def test_views_serve_the_same_bytes():
    with mount(SAMPLE) as mnt:
        with open(os.path.join(mnt, "model.safetensors"), "rb") as f:
            full = f.read()
    with mount(SAMPLE, "--views", "safetensors") as mnt:
        with open(os.path.join(mnt, "model.safetensors"), "rb") as f:
            assert f.read() == full


# ---- consumed shard folders ------------------------------------------------------

@pytest.mark.parametrize("src, gone", [
    (ACCELERATE, {"pytorch_model_fsdp_0", "optimizer_0"}),
    (DS_Z2, {"global_step2", "latest"}),
    (UNIVERSAL, {"global_step2_universal", "latest_universal"}),
])
def test_consumed_folders_are_not_shown(src, gone):
    assert gone & set(os.listdir(src)), "fixture changed"
    with mount(src) as mnt:
        names = set(os.listdir(mnt))
        assert not gone & names, sorted(names)
        for root, dirs, _files in os.walk(mnt):
            if os.path.relpath(root, mnt).split(os.sep)[0] == "tensors":
                continue
            for d in dirs:
                assert os.listdir(os.path.join(root, d)), f"empty directory {d} served"


def test_folders_with_other_files_or_none_stay(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ACCELERATE, src)
    (src / "pytorch_model_fsdp_0" / "NOTES.txt").write_text("kept")
    (src / "logs").mkdir()  # empty in SOURCE: served as it is
    with mount(str(src)) as mnt:
        names = set(os.listdir(mnt))
        assert "optimizer_0" not in names, sorted(names)
        assert os.listdir(os.path.join(mnt, "pytorch_model_fsdp_0")) == ["NOTES.txt"]
        assert os.listdir(os.path.join(mnt, "logs")) == []


# ---- SOURCE refusals name SOURCE, and point at the checkpoint ----------------------

def refusal(*args):
    return one_line(run_cli("inspect", *args), 2)


def test_missing_source_is_named_as_given():
    given = os.path.join("tests", "fixtures", "sampel")
    line = refusal(given)
    assert line.startswith(f"unshardfs: {given}: cannot access SOURCE"), line


def test_missing_source_on_mount(tmp_path):
    given = os.path.join(FIXTURES, "sampel")
    line = one_line(run_mount(source=given, mnt=str(tmp_path)), 2)
    assert line.startswith(f"unshardfs: {given}: "), line


def test_no_checkpoint_names_source_not_dot(tmp_path):
    (tmp_path / "README.md").write_text("hi")
    line = refusal(str(tmp_path))
    assert line.startswith(f"unshardfs: {tmp_path}: no checkpoint found"), line
    assert "mount" not in line.split("no checkpoint found", 1)[1].split(")", 1)[1], line


def test_hub_repo_root_suggests_its_snapshot():
    snap = hub_snapshot()
    repo = os.path.dirname(os.path.dirname(snap))
    line = refusal(repo)
    assert line.startswith(f"unshardfs: {repo}: no checkpoint found"), line
    assert os.path.join(repo, "snapshots", os.path.basename(snap)) in line, line


def test_directory_of_checkpoints_names_them(tmp_path):
    for n in ("checkpoint-100", "checkpoint-200"):
        shutil.copytree(SAMPLE, tmp_path / n)
    (tmp_path / "runs").mkdir()
    line = refusal(str(tmp_path))
    assert f"{tmp_path}/checkpoint-100" in line and f"{tmp_path}/checkpoint-200" in line, line
    assert "runs" not in line, line


def test_many_checkpoints_are_counted(tmp_path):
    for i in range(5):
        shutil.copytree(SAMPLE, tmp_path / f"step{i}")
    line = refusal(str(tmp_path))
    assert "step0" in line and "and 2 more" in line and "step4" not in line, line


def test_global_step_folder_without_latest_is_pointed_at(tmp_path):
    shutil.copytree(os.path.join(DS_Z2, "global_step2"), tmp_path / "global_step2")
    line = refusal(str(tmp_path))
    assert f"{tmp_path}/global_step2" in line, line


def test_global_step_folder_given_directly_mounts():
    with mount(os.path.join(DS_Z2, "global_step2")) as mnt:
        assert "model.safetensors" in os.listdir(mnt)


def test_format_deepspeed_on_safetensors_says_no_deepspeed():
    line = refusal("--format=deepspeed", SAMPLE)
    assert line.startswith(f"unshardfs: {SAMPLE}: no DeepSpeed checkpoint"), line
    assert "latest file" in line and "global_step*/" in line, line
    assert not line.startswith("unshardfs: latest:"), line


# ---- mount failures: one line with the remedy --------------------------------------

def test_stale_mountpoint_after_kill_9(tmp_path):
    """Mount, kill -9 the daemon, mount again: the line says how to clear it."""
    mnt = str(tmp_path / "mnt")
    os.mkdir(mnt)
    proc = subprocess.Popen(mount_argv(mnt=mnt), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not os.path.ismount(mnt):
            assert proc.poll() is None and time.monotonic() < deadline, "did not mount"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with pytest.raises(OSError) as e:
            os.statvfs(mnt)  # stat may be answered from cached attributes
        assert "not connected" in str(e.value), e.value
        r = subprocess.run(mount_argv(mnt=mnt), capture_output=True, text=True, timeout=10,
                           stdin=subprocess.DEVNULL)
        line = one_line(r, 1)
        assert line.startswith(f"unshardfs: {mnt}: "), line
        assert "Transport endpoint is not connected" in line, line
        assert f"fusermount3 -u {mnt}" in line, line
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run([FUSERMOUNT, "-u", mnt], capture_output=True)
    assert not os.path.ismount(mnt)
    os.statvfs(mnt)  # cleared


def as_nobody_with_fuse_mode(mode, *opts, mnt_owner=NOBODY):
    """Run the mount as user nobody, in a private mount namespace whose /dev/fuse is
    a node of @mode (so the machine's own /dev/fuse is left alone)."""
    needs = [shutil.which(t) for t in ("unshare", "setpriv", "mount")]
    if os.geteuid() != 0 or not all(needs):
        pytest.skip("needs root, unshare, setpriv and mount to act as an unprivileged user")
    tmp = tempfile.mkdtemp(prefix="unshardfs-nobody-")
    try:
        os.chmod(tmp, 0o755)
        mnt = os.path.join(tmp, "mnt")
        os.mkdir(mnt)
        os.chown(mnt, mnt_owner, mnt_owner)
        node = os.path.join(tmp, "fuse")
        script = (f"mknod -m {mode:o} {node} c 10 229 && mount --bind {node} /dev/fuse "
                  f"|| exit 99; exec setpriv --reuid={NOBODY} --regid={NOBODY} "
                  f"--clear-groups \"$@\"")
        argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
                *mount_argv(*opts, mnt=mnt)]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=15,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            pytest.fail("mounted as nobody instead of refusing")
        if r.returncode == 99:
            pytest.skip(f"this machine cannot make a private /dev/fuse: {r.stderr.strip()}")
        return r
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_non_root_without_dev_fuse_access():
    line = one_line(as_nobody_with_fuse_mode(0o600), 1)
    assert line.startswith("unshardfs: /dev/fuse: Permission denied"), line
    assert "group" in line and "fuse" in line, line


@pytest.mark.parametrize("opt", ["allow_other", "allow_root"])
def test_allow_other_without_user_allow_other(opt):
    try:
        with open("/etc/fuse.conf") as f:
            if any(ln.split("#")[0].split() == ["user_allow_other"] for ln in f):
                pytest.skip("/etc/fuse.conf has user_allow_other on this machine")
    except FileNotFoundError:
        pass
    line = one_line(as_nobody_with_fuse_mode(0o666, "-o", opt), 1)
    assert line.startswith(f"unshardfs: /etc/fuse.conf: -o {opt} "), line
    assert "user_allow_other" in line, line


def test_fusermount_refusal_is_one_line():
    """What only fusermount3 knows (a mount point this user may not write) still
    comes out as one line."""
    line = one_line(as_nobody_with_fuse_mode(0o666, mnt_owner=0), 1)
    assert "cannot mount: " in line and "mountpoint" in line, line


# ---- one option table: the three spellings of an option are the same option ---------

def model_bytes(*opts):
    with mount(SAMPLE, *opts) as mnt:
        with open(os.path.join(mnt, "model.safetensors"), "rb") as f:
            return f.read()


def test_three_spellings_serve_the_same_bytes():
    joined = model_bytes("--dtype=bf16", "--strip-prefix=model.", "--ties=off")
    assert joined != model_bytes()
    assert model_bytes("--dtype", "bf16", "--strip-prefix", "model.", "--ties", "off") == joined
    assert model_bytes("-o", "dtype=bf16,strip_prefix=model.,ties=off") == joined
