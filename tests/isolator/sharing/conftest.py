"""Fixtures of the shared-GPU tests: the bed's real MPS control daemon program, and
the end of every control daemon a test's agent daemon started (they outlive the
agent daemon on purpose, see isolator/sharing/mps_control.py)."""
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from localcluster import driver_files


@pytest.fixture(scope="session")
def mps_program() -> str:
    """The real nvidia-cuda-mps-control of the bed's 535 driver tree: it runs without
    a GPU (it starts a server only when a CUDA client connects)."""
    return str(driver_files.build() / "usr/bin/nvidia-cuda-mps-control")


@pytest.fixture
def work_dir():
    """A short work dir (the control daemons' socket paths must fit in 108 bytes, which
    pytest's tmp_path may not leave room for); after the test, the control daemons
    started under it are SIGKILLed by pid and it is removed."""
    top = Path(tempfile.mkdtemp(prefix="mgs", dir="/tmp"))
    yield top / "work"
    for pid_file in top.rglob("mps/nvidia*/control.pid"):
        pid = int(pid_file.read_text())
        try:
            if b"nvidia-cuda-mps-control" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    shutil.rmtree(top, ignore_errors=True)
