"""`python -m localcluster build` and the Mesos prefix it makes."""
import os
import re
import subprocess
import sys

from localcluster import mesos
from tests.bed import REPO


def test_mesos_build_is_idempotent_and_uses_this_python(mesos_prefix):
    assert mesos.build() == mesos_prefix
    assert (mesos_prefix / "bin" / "mesos_local").exists()
    assert (mesos_prefix / "lib" / "libmesos-bundle.so").stat().st_size > 100 * 2**20
    executor = (mesos_prefix / "libexec" / "mesos-executor").read_text()
    assert sys.executable in executor      # the stand-in runs where mesos-gpu is installed


def test_build_command_times_each_part():
    r = subprocess.run([sys.executable, "-m", "localcluster", "build"], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    parts = re.findall(r"^\[localcluster\] ([\w-]+): [\d.]+ s", r.stdout, re.M)
    assert parts == ["mesos", "fake-nvml", "driver-files", "driver-files-old", "driver-files-470",
                     "cuda-probe"]


def test_failed_build_is_one_line():
    env = {**os.environ, "MESOS_GPU_LOCALCLUSTER_DIR": "/proc/mesos-gpu-bed-cannot-be-here"}
    r = subprocess.run([sys.executable, "-m", "localcluster", "build"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert "/proc/mesos-gpu-bed-cannot-be-here" in lines[0]
