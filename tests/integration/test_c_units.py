"""Run the C unit tests (tests/unit, registered with meson) from the pytest suite."""
import os
import shutil
import subprocess

import pytest

from conftest import REPO, require_tool

BUILDS = [os.environ.get("UNSHARDFS_BUILD", "build"), "build-asan"]


@pytest.mark.parametrize("build", BUILDS, ids=["build", "build-asan"])
def test_meson_unit_tests(build):
    require_tool("meson")
    d = os.path.join(REPO, build)
    if not os.path.exists(os.path.join(d, "build.ninja")):
        if build == "build-asan":
            pytest.skip(f"{build} not set up (tools/setup.sh makes it)")
        pytest.fail(f"{d} is not a meson build directory: run `bash tools/setup.sh`")
    r = subprocess.run(["meson", "test", "-C", d, "--print-errorlogs"], cwd=REPO,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout[-8000:] + r.stderr[-4000:])
