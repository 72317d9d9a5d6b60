"""Fixtures of the examples/ tests: the real NVIDIA 535 libcuda from the test
bed's driver tree (no GPU here: its cuInit fails for real). Running the workload
as a user would: tests/bed/glyphnet.py."""
from pathlib import Path

import pytest

from localcluster import driver_files

@pytest.fixture(scope="session")
def real_libcuda() -> Path:
    """libcuda.so.1 of the NVIDIA 535 driver, as Debian ships it."""
    lib = (driver_files.build() / "usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1")
    assert lib.exists(), f"the test bed's driver tree has no {lib}"
    return lib
