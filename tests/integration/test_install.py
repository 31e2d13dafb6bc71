"""Installing, and mounting the way system tools do: mount(8) -> mount.fuse3 -> unshardfs.

`meson install --destdir` into a temporary directory (never the real system), then:
mount.fuse3 with that bin on PATH (what `mount -t fuse.unshardfs` runs), mount(8) itself
(`-t fuse` with the program named in the source field: mount(8) gives helpers a standard
PATH, so `-t fuse.unshardfs` needs the binary installed in /usr/local/bin or /usr/bin),
an fstab line through `mount -a -T <tmp fstab>` (the real /etc/fstab is not touched),
and the man page rendering.
"""
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import BUILD, FIXTURES, REPO, SOURCES, unmount

MOUNT_FUSE = shutil.which("mount.fuse3") or "/sbin/mount.fuse3"
MAN = os.path.join(REPO, "docs", "man", "unshardfs.1")
# options fstab lines and systemd hand to mount.fuse3, which libfuse alone would refuse
MOUNT_ONLY = "rw,nofail,_netdev,defaults,x-systemd.automount,x-systemd.requires=a.service"


def need_root_mount():
    if os.geteuid() != 0:
        pytest.skip("mounting through mount(8) needs root")
    if not os.path.exists(MOUNT_FUSE) or not shutil.which("mount"):
        pytest.skip("mount.fuse3 / mount(8) not installed")


@pytest.fixture(scope="module")
def installed():
    """The binary and man page installed by `meson install --destdir` (prefix as configured)."""
    if not shutil.which("meson"):
        pytest.skip("meson not installed")
    dest = tempfile.mkdtemp(prefix="unshardfs-install-")
    r = subprocess.run(["meson", "install", "-C", BUILD, "--no-rebuild", "--destdir", dest],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    found = {}
    for root, _dirs, files in os.walk(dest):
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


def test_mount8_type_fuse_unshardfs_when_on_standard_path(installed, mnt):
    need_root_mount()
    std = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    if not shutil.which("unshardfs", path=std):
        pytest.skip("unshardfs is not installed on mount(8)'s PATH (a real meson install)")
    r = subprocess.run(["mount", "-t", "fuse.unshardfs", SOURCES["sample"], mnt, "-o", "ro"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    wait_mounted(mnt)
    check_served(mnt)


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
    if not shutil.which("man"):
        pytest.skip("man not installed")
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
                "--view=", "--version", "export", "inspect"):
        assert opt in r.stdout, opt
    with open(MAN) as f:
        man = f.read().replace("\\-", "-")
    for opt in ("--format=", "--no-unwrap", "--strip-prefix=", "--dtype=", "--device=",
                "--cache-size=", "--ties=", "--max-shard-size=", "--view="):
        assert opt in man, opt
