"""Fixtures only the volume tests use: the real NVIDIA 535 driver tree, tmpfs
mounts, and small driver trees compiled with gcc."""
import subprocess
from pathlib import Path
from typing import Callable, Iterator

import pytest

from localcluster import driver_files, processes


@pytest.fixture(scope="session")
def driver_root() -> Path:
    """The real NVIDIA 535 user-space files laid out as a Debian host (built once)."""
    return driver_files.build()


@pytest.fixture(scope="session")
def two_version_root(tmp_path_factory) -> Path:
    """A host with two real 535 releases: the old release's files beside the
    running one's (read-only for the tests: hard links of the bed's files)."""
    return driver_files.two_version_host(tmp_path_factory.mktemp("two-versions") / "root")


@pytest.fixture
def tmpfs(tmp_path) -> Iterator[Callable[..., Path]]:
    """mount(name, options) -> a fresh tmpfs mounted at tmp_path/name; all
    unmounted (lazily, with anything mounted inside) when the test ends."""
    mounted = []

    def mount(name: str = "tmpfs", options: str = "mode=755") -> Path:
        point = tmp_path / name
        point.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
                       check=True, capture_output=True)
        mounted.append(point)
        return point

    try:
        yield mount
    finally:
        for point in reversed(mounted):
            processes.unmount_under(point)


@pytest.fixture
def tree_copy(tmp_path, driver_root) -> Callable[[], Path]:
    """A hard-linked copy of the real driver tree that a test may change (only
    by replacing names; never write into its files, they are the bed's)."""
    def make(name: str = "copy") -> Path:
        dest = tmp_path / name
        subprocess.run(["cp", "-al", str(driver_root), str(dest)], check=True)
        return dest
    return make
