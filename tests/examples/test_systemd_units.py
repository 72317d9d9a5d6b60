"""examples/systemd: the units pass `systemd-analyze verify`, and the agent
unit's own command lines (paths moved under a scratch directory, as an operator
would edit them) write the Mesos agent's merged environment file, start a
working daemon and report it ready; SIGTERM stops it with status 0."""
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Dict, List

import pytest

from localcluster import device_nodes, driver_files, fake_nvml
from tests.bed import REPO
from tests.bed import cgroups as bed_cgroups
from isolator.cgroups import cgroup_host

UNITS = REPO / "examples" / "systemd"
EXE = str(Path(sys.executable).parent / "mesos-gpu")


def commands(unit_text: str) -> Dict[str, List[str]]:
    """Exec*= command lines of a unit, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", unit_text)
    out: Dict[str, List[str]] = {}
    for line in text.splitlines():
        m = re.match(r"(Exec\w+)=(.*)", line)
        if m:
            out.setdefault(m.group(1), []).append(m.group(2))
    return out


def test_units_pass_systemd_analyze_verify(tmp_path):
    for name in ("mesos-gpu-agent.service", "mesos-gpu-framework.service"):
        (tmp_path / name).write_text((UNITS / name).read_text().replace("/usr/local/bin/mesos-gpu", EXE))
    r = subprocess.run(["systemd-analyze", "verify", "--man=no",
                        *(str(p) for p in sorted(tmp_path.iterdir()))],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    drop_in = (UNITS / "mesos-slave.service.d" / "mesos-gpu.conf").read_text()
    assert "After=mesos-gpu-agent.service" in drop_in and "gpu/nvidia" not in \
        re.findall(r"MESOS_ISOLATION=(.*)", drop_in)[0]


@pytest.fixture
def cgroups_root():
    name = bed_cgroups.unique_name("mesos-gpu-unit")
    yield name
    host = cgroup_host.detect()
    for mount in (host.devices_v1, host.unified):
        if mount:
            bed_cgroups.remove_tree(Path(mount) / name)


def test_agent_unit_commands_start_a_ready_daemon(tmp_path, cgroups_root):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    plugin = f"nvd-unit-{secrets.token_hex(3)}"
    text = (UNITS / "mesos-gpu-agent.service").read_text()
    for old, new in (("/usr/local/bin/mesos-gpu", EXE), ("/var/lib/mesos-gpu", str(tmp_path / "lib")),
                     ("/run/mesos-gpu", str(tmp_path / "run")),
                     ("/var/run/cdi/mesos-gpu.json", str(tmp_path / "cdi" / "mesos-gpu.json")),
                     ("--volume_plugin nvidia-docker", f"--volume_plugin {plugin}"),
                     ("127.0.0.1:3476", f"127.0.0.1:{port}")):
        assert old in text, old
        text = text.replace(old, new)
    cmd = commands(text)
    (tmp_path / "run").mkdir()                                # systemd's RuntimeDirectory=
    lay = fake_nvml.layout("k80")
    lay.name, lay.driver = "k80-unit", driver_files.DRIVER_VERSION
    device_nodes.make_device_nodes(tmp_path / "dev", [0, 1])
    env = {**os.environ, **lay.env(),
           "MESOS_RESOURCES": "cpus:2;mem:512", "MESOS_ATTRIBUTES": "rack:r1",
           "MESOS_GPU_CPUINFO": str(REPO / "tests/isolator/cpuinfo/zen2-epyc-7742"),
           "MESOS_GPU_FLAGS": f"--dev_dir {tmp_path / 'dev'} --cgroups_root {cgroups_root} "
                              f"--docker_socket none --driver_root {driver_files.build()} "
                              f"--volume_root {tmp_path / 'volumes'} "
                              f"--plugin_socket_dir {tmp_path / 'plugins'}"}
    pre = subprocess.run(["sh", "-c", cmd["ExecStartPre"][0]], env=env, capture_output=True, text=True)
    assert pre.returncode == 0, pre.stderr
    assert (tmp_path / "run" / "mesos-agent.env").read_text().splitlines() == [
        "MESOS_RESOURCES='cpus:2;mem:512;gpus:2'",
        "MESOS_ATTRIBUTES='rack:r1;gpu_type:tesla_k80;gpu_model:tesla_k80;gpu_types:tesla_k80;"
        f"gpu_memory_mb:12032;gpu_compute_capability:3.7;nvidia_driver:{driver_files.DRIVER_VERSION};"
        "cuda_driver:12.2;platform_features:nvidia-535-261/cuda-12-2/nv-compute-3-7/x86-64-v3/zen2'"]
    log = open(tmp_path / "daemon.log", "wb")
    daemon = subprocess.Popen(["sh", "-c", "exec " + cmd["ExecStart"][0]], env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    try:
        started = time.monotonic()
        post = subprocess.run(["sh", "-c", cmd["ExecStartPost"][0]], env=env,
                              capture_output=True, text=True, timeout=60)
        assert post.returncode == 0, (post.stderr, (tmp_path / "daemon.log").read_text())
        assert time.monotonic() - started < 30
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1.0/docker/cli", timeout=10) as r:
            assert r.read().decode().startswith(f"--volume-driver={plugin} ")
        assert (tmp_path / "cdi" / "mesos-gpu.json").exists()
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        log.close()
