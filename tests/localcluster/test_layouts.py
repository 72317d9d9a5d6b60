"""Fake NVML layouts: what a test may ask for, and the clear errors when it asks
for a host that cannot exist."""
import subprocess
import sys

import pytest

from isolator.discovery import nvml
from localcluster import fake_nvml
from localcluster.paths import LocalClusterError
from tests.bed import REPO


def _gpu(minor: int, name: str = "Tesla T4") -> fake_nvml.FakeGpu:
    return fake_nvml.FakeGpu(minor, f"GPU-test-{minor:04d}", f"00000000:{minor % 256:02X}:00.0", name)


def test_duplicate_minors_are_refused():
    with pytest.raises(LocalClusterError, match="duplicate minor numbers"):
        fake_nvml.custom("dup", [_gpu(0), fake_nvml.FakeGpu(0, "GPU-other", "00000000:09:00.0", "T4")])


def test_more_than_64_gpus_are_refused():
    with pytest.raises(LocalClusterError, match="65 GPUs.*at most 64"):
        fake_nvml.custom("big", [_gpu(m) for m in range(65)])


def test_topology_pair_out_of_range_is_refused():
    with pytest.raises(LocalClusterError, match=r"GPU pair \(0, 2\).*2 GPUs"):
        fake_nvml.custom("topo", [_gpu(0), _gpu(1)], topology={(0, 2): fake_nvml.SINGLE})


def test_unknown_layout_is_refused():
    with pytest.raises(LocalClusterError, match="unknown fake NVML layout 'nosuch'.*k80"):
        fake_nvml.layout("nosuch")


def test_layout_command_prints_the_env():
    r = subprocess.run([sys.executable, "-m", "localcluster", "layout", "k80"], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    env = dict(line.split("=", 1) for line in r.stdout.splitlines())
    assert env == fake_nvml.layout("k80").env()


def test_layout_command_with_an_unknown_name_is_one_line():
    r = subprocess.run([sys.executable, "-m", "localcluster", "layout", "nosuch"], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert r.stdout == ""
    assert len(r.stderr.splitlines()) == 1
    assert "nosuch" in r.stderr


def test_nvml_layout_fixture_applies_the_layout_in_process(nvml_layout):
    layout = nvml_layout("mixed")
    inv = nvml.discover()
    assert [g.uuid for g in inv.gpus] == [g.uuid for g in layout.gpus]


def test_custom_layout_through_the_fixture(nvml_layout):
    nvml_layout(fake_nvml.custom("two-t4", [_gpu(3), _gpu(7)]))
    inv = nvml.discover()
    assert [g.minor for g in inv.gpus] == [3, 7]
    assert {g.name for g in inv.gpus} == {"Tesla T4"}
