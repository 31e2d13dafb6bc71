"""Installing, and mounting the way system tools do: mount(8) -> mount.fuse3 -> unshardfs.

`meson install --destdir` into a temporary directory (never the real system), then:
mount.fuse3 with that bin on PATH (what `mount -t fuse.unshardfs` runs), mount(8) itself
(`-t fuse` with the program named in the source field), an fstab line through
`mount -a -T <tmp fstab>` (the real /etc/fstab is not touched), and the man page.

mount(8) runs mount.fuse3 with a standard PATH (util-linux resets it; a PATH that names
the build directory does not reach the helper), so `mount -t fuse.unshardfs` and
`man unshardfs` need what a real `meson install` gives: the binary in /usr/local/bin and
the page in /usr/local/share/man. Those tests run in a private mount namespace
(`unshare --mount`) in which the --destdir tree's bin/ and share/man/ are bind-mounted
over /usr/local/bin and /usr/local/share/man: the installed files at the default prefix,
as on a fresh machine after `meson install`, while the host sees neither the binds nor
the FUSE mounts made inside.
"""
import os
import shlex
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import BUILD, FIXTURES, REPO, SOURCES, require_tool, unmount

MOUNT_FUSE = shutil.which("mount.fuse3") or "/sbin/mount.fuse3"
MAN = os.path.join(REPO, "docs", "man", "unshardfs.1")
# options fstab lines and systemd hand to mount.fuse3, which libfuse alone would refuse
MOUNT_ONLY = "rw,nofail,_netdev,defaults,x-systemd.automount,x-systemd.requires=a.service"


def need_root_mount():
    if os.geteuid() != 0:
        pytest.skip("mounting through mount(8) needs root")
    require_tool("mount")
    assert os.path.exists(MOUNT_FUSE), f"{MOUNT_FUSE} is missing (package fuse3, tools/setup.sh)"


@pytest.fixture(scope="module")
def installed():
    """The binary and man page installed by `meson install --destdir` (prefix as configured)."""
    require_tool("meson")
    dest = tempfile.mkdtemp(prefix="unshardfs-install-")
    r = subprocess.run(["meson", "install", "-C", BUILD, "--no-rebuild", "--destdir", dest],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    found = {}
    for root, _dirs, files in os.walk(dest):
        if "bash-completion" in root:
            continue  # completions/unshardfs: test_completion.py; not the binary's name
        for f in files:
            found[f] = os.path.join(root, f)
    yield found
    shutil.rmtree(dest, ignore_errors=True)


def wait_mounted(mnt, timeout=10):
    deadline = time.monotonic() + timeout
    while not os.path.ismount(mnt):
        assert time.monotonic() < deadline, f"{mnt} not mounted"
        time.sleep(0.02)


def mount_opts(mnt):
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[1] == mnt:
                return fields[2], fields[3].split(",")
    return None, []


@pytest.fixture
def mnt():
    tmp = tempfile.mkdtemp(prefix="unshardfs-install-mnt-")
    path = os.path.join(tmp, "mnt")
    os.mkdir(path)
    yield path
    if os.path.ismount(path):
        unmount(path)
    shutil.rmtree(tmp, ignore_errors=True)


def check_served(path, *, sharded=False):
    names = os.listdir(path)
    assert "config.json" in names and "tensors" in names, names
    assert ("model.safetensors.index.json" in names) == sharded, names
    fstype, opts = mount_opts(path)
    assert fstype == "fuse.unshardfs" and "ro" in opts, (fstype, opts)


def test_meson_install_puts_binary_and_man_page(installed):
    assert "unshardfs" in installed and os.access(installed["unshardfs"], os.X_OK)
    assert installed["unshardfs"].endswith(os.path.join("bin", "unshardfs"))
    man = [p for n, p in installed.items() if n.startswith("unshardfs.1")]
    assert man and os.sep + os.path.join("man", "man1") + os.sep in man[0], installed
    r = subprocess.run([installed["unshardfs"], "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("unshardfs "), r


def test_mount_fuse3_with_mount_only_options(installed, mnt):
    """What `mount -t fuse.unshardfs SRC MNT -o ...` runs: mount.fuse3 finds unshardfs on
    PATH and runs `unshardfs SRC MNT -o OPTS`; rw is overridden, mount-only options ignored."""
    need_root_mount()
    env = dict(os.environ, PATH=os.path.dirname(installed["unshardfs"]) + ":" +
               os.environ.get("PATH", "/usr/bin:/bin"))
    r = subprocess.run([MOUNT_FUSE, SOURCES["sample"], mnt, "-t", "unshardfs",
                        "-o", MOUNT_ONLY + ",dev,suid"],
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    wait_mounted(mnt)  # the daemon forked: mount.fuse3 has returned
    check_served(mnt)
    with pytest.raises(OSError):
        open(os.path.join(mnt, "config.json"), "a")


def test_mount8_program_in_source_field(installed, mnt):
    need_root_mount()
    src = installed["unshardfs"] + "#" + os.path.join(FIXTURES, "torch", "llama_fsdp2")
    r = subprocess.run(["mount", "-t", "fuse", src, mnt, "-o", "ro," + MOUNT_ONLY],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    wait_mounted(mnt)
    check_served(mnt)


UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"


def in_installed_namespace(installed, script, mnt=None, timeout=60):
    """Run the sh @script in a new mount namespace where the installed tree is at the
    default prefix (see the module docstring); an @mnt still mounted at the end is
    unmounted before the namespace goes. Returns the CompletedProcess."""
    need_root_mount()
    bindir = os.path.dirname(installed["unshardfs"])
    page = next(p for n, p in installed.items() if n.startswith("unshardfs.1"))
    mandir = os.path.dirname(os.path.dirname(page))  # <prefix>/share/man
    q = shlex.quote
    pre = ["set -e"]
    if mnt:
        pre.append(f"trap 'mountpoint -q {q(mnt)} && fusermount3 -u {q(mnt)}; true' EXIT")
    pre.append(f"mount --bind {q(bindir)} /usr/local/bin")
    if not os.path.isdir("/usr/local/share/man"):  # cover /usr/local/share instead
        pre.append("mount -t tmpfs unshardfs-test /usr/local/share && "
                   "mkdir /usr/local/share/man")
    pre.append(f"mount --bind {q(mandir)} /usr/local/share/man")
    env = {k: v for k, v in os.environ.items() if k not in ("MANPATH", "PATH")}
    env.update(PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
               MANPAGER="cat", MANWIDTH="80", LC_ALL="C.UTF-8")
    r = subprocess.run([UNSHARE, "--mount", "--propagation", "private", "sh", "-c",
                        "\n".join(pre) + "\n" + script],
                       capture_output=True, text=True, timeout=timeout, env=env)
    assert r.returncode == 0, f"rc {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


# In the namespace: mounted yet? then its /proc/self/mounts line and top-level names.
SHOW = """
mountpoint -q {mnt}
echo "MOUNT $(awk -v m={mnt} '$2 == m {{print $3, $4}}' /proc/self/mounts)"
echo "NAMES $(ls -A {mnt} | tr '\\n' ' ')"
fusermount3 -u {mnt}
"""


def shown(r):
    out = dict(line.split(" ", 1) for line in r.stdout.splitlines()
               if line.startswith(("MOUNT ", "NAMES ")))
    fstype, opts = out["MOUNT"].split(" ")
    return fstype, opts.split(","), out["NAMES"].split()


def test_mount8_type_fuse_unshardfs(installed, mnt):
    """`mount -t fuse.unshardfs SRC MNT -o ro`, with unshardfs where `meson install` puts
    it: mount(8) -> mount.fuse3 -> /bin/sh -> unshardfs found on the standard PATH."""
    q = shlex.quote
    r = in_installed_namespace(installed, f"""
command -v unshardfs
mount -t fuse.unshardfs {q(SOURCES["sample"])} {q(mnt)} -o ro,nofail,_netdev
""" + SHOW.format(mnt=q(mnt)), mnt=mnt)
    assert r.stdout.splitlines()[0] == "/usr/local/bin/unshardfs", r.stdout
    fstype, opts, names = shown(r)
    assert fstype == "fuse.unshardfs" and "ro" in opts, (fstype, opts)
    assert "config.json" in names and "model.safetensors" in names, names
    assert not os.path.ismount(mnt)  # the host never saw it


def test_fstab_line_type_fuse_unshardfs_with_mount_a(installed, mnt, tmp_path):
    """The fstab line of the man page and docs/quickstart.md (type fuse.unshardfs, the
    unshardfs option in the options field), mounted by `mount -a -T FSTAB`."""
    q = shlex.quote
    fstab = tmp_path / "fstab"
    fstab.write_text(f"# test\n{SOURCES['sample']}  {mnt}  fuse.unshardfs  "
                     f"ro,nofail,_netdev,defaults,max_shard_size=100K  0 0\n")
    r = in_installed_namespace(installed, f"mount -a -T {q(str(fstab))}\n" +
                               SHOW.format(mnt=q(mnt)), mnt=mnt)
    fstype, opts, names = shown(r)
    assert fstype == "fuse.unshardfs" and "ro" in opts, (fstype, opts)
    assert "model.safetensors.index.json" in names, names  # max_shard_size took effect


def test_man_unshardfs_after_meson_install(installed):
    """`man unshardfs` (not `man -l`) finds the page where `meson install` put it."""
    require_tool("man")
    r = in_installed_namespace(installed, "man -w unshardfs\nman unshardfs\n")
    where, text = r.stdout.split("\n", 1)
    assert where.startswith("/usr/local/") and "man1/unshardfs.1" in where, where
    for section in ("NAME", "SYNOPSIS", "OPTIONS", "EXIT STATUS", "EXAMPLES"):
        assert section in text, section
    assert "fuse.unshardfs" in text


def test_fstab_line_with_mount_a(installed, mnt, tmp_path):
    """`mount -a -T FSTAB`: util-linux's alternative fstab, so /etc/fstab is untouched.
    The unshardfs option travels as max_shard_size=... in the options field."""
    need_root_mount()
    src = installed["unshardfs"] + "#" + SOURCES["sample"]
    fstab = tmp_path / "fstab"
    fstab.write_text(f"# test\n{src} {mnt} fuse ro,nofail,_netdev,defaults,"
                     f"x-systemd.automount,max_shard_size=100K 0 0\n")
    r = subprocess.run(["mount", "-a", "-T", str(fstab)], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    wait_mounted(mnt)
    check_served(mnt, sharded=True)
    unmount(mnt)
    # noauto: `mount -a` leaves it alone, naming the mountpoint mounts it
    fstab.write_text(f"{src} {mnt} fuse ro,noauto,user 0 0\n")
    r = subprocess.run(["mount", "-a", "-T", str(fstab)], capture_output=True, text=True)
    assert r.returncode == 0 and not os.path.ismount(mnt), r.stderr
    r = subprocess.run(["mount", "-T", str(fstab), mnt], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    wait_mounted(mnt)
    check_served(mnt)


def test_man_page_renders():
    require_tool("man")
    r = subprocess.run(["man", "-l", MAN], capture_output=True, text=True,
                       env=dict(os.environ, MANPAGER="cat", MANWIDTH="80"), timeout=30)
    assert r.returncode == 0, r.stderr
    for section in ("SYNOPSIS", "OPTIONS", "EXIT STATUS", "EXAMPLES"):
        assert section in r.stdout
    for example in ("unshardfs inspect", "unshardfs export", "fuse.unshardfs",
                    "fusermount3 -u"):
        assert example in r.stdout, example


def test_help_lists_every_option_with_its_default():
    from conftest import run_cli
    r = run_cli("--help")
    assert r.returncode == 0
    for opt in ("-f", "-d", "-q", "-o", "--format=", "--no-unwrap", "--strip-prefix=",
                "--dtype=", "--device=", "--cache-size=", "--ties=", "--max-shard-size=",
                "--view=", "--direct-io=", "--version", "export", "inspect"):
        assert opt in r.stdout, opt
    with open(MAN) as f:
        man = f.read().replace("\\-", "-")
    for opt in ("--format=", "--no-unwrap", "--strip-prefix=", "--dtype=", "--device=",
                "--cache-size=", "--ties=", "--max-shard-size=", "--view=", "--direct-io="):
        assert opt in man, opt
