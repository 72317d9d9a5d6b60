"""Fixtures of the agent-side module's tests: device nodes, a unique cgroup root
(removed at the end), and the real daemon as a child process."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

from isolator.client import AgentClient
from tests.bed import cgroups as bed_cgroups
from tests.bed.cgroups import VERSION_MOUNTS
from localcluster import device_nodes, fake_nvml


@pytest.fixture
def cgroups_root() -> Iterator[str]:
    """A cgroup root name no other test run uses; everything under it is
    removed (processes killed) when the test ends."""
    name = bed_cgroups.unique_name("mesos-gpu-test")
    yield name
    for mount in VERSION_MOUNTS.values():
        if mount:
            bed_cgroups.remove_tree(Path(mount) / name)


@pytest.fixture
def dev_dir(tmp_path) -> Path:
    """nvidia0..7, nvidiactl and nvidia-uvm(-tools) nodes."""
    d = tmp_path / "dev"
    bed_cgroups.make_device_nodes(d, range(8))
    return d


class Daemon:
    """`mesos-gpu agent` as a child process on a fake NVML layout."""
    started = 0

    def __init__(self, work_dir: Path, dev_dir: Path, cgroups_root: str, layout: str = "v100x8",
                 device_cgroup: str = "v1", extra: Optional[List[str]] = None,
                 env: Optional[Dict[str, str]] = None, control: Optional[Path] = None) -> None:
        self.work_dir = Path(work_dir)
        self.args = ["--work_dir", str(work_dir), "--dev_dir", str(dev_dir),
                     "--cgroups_root", cgroups_root, "--device_cgroup", device_cgroup,
                     "--docker_socket", "none", "--driver_volume", "none",
                     "--ledger_flush_interval", "0.2", *(extra or [])]
        self.layout = fake_nvml.layout(layout) if isinstance(layout, str) else layout
        self.control = control               # the fake NVML's fault file (control.Control)
        self.env = {**os.environ, **self.layout.env(control=control), **(env or {})}
        if control is None:
            self.env.pop("FAKE_NVML_CONTROL", None)
        for key in ("MESOS_GPU_NVML_LIBRARY", "FAKE_NVML_INIT_ERROR"):
            if key not in self.layout.env() and key not in (env or {}):
                self.env.pop(key, None)
        self.proc: Optional[subprocess.Popen] = None
        Daemon.started += 1
        self.log_path = self.work_dir.parent / f"{self.work_dir.name}.{Daemon.started}.log"
        # a dead daemon shows at once (the crash tests expect it); retrying is tested apart
        self.client = AgentClient(str(self.work_dir / "agent.sock"), timeout=30,
                                  connect_timeout=1.0)

    def start(self, wait: bool = True) -> "Daemon":
        self.log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [*device_nodes.NO_MKNOD, sys.executable, "-m", "mesos_gpu", "agent", *self.args],
            env=self.env, stdout=self.log_file, stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 30) -> None:
        # not wait_until: a daemon that exited fails at once, with its log, not after `timeout`
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited {self.proc.returncode}:\n{self.log()}")
            if "serving the agent API" in self.log():
                return
            time.sleep(0.05)
        raise RuntimeError(f"agent not ready after {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.log_file.close()
        return rc

    def kill9(self) -> int:
        return self.stop(signal.SIGKILL)

    def run_to_exit(self, timeout: float = 30) -> int:
        """Start and wait for exit (a daemon that refuses its flags)."""
        self.start(wait=False)
        try:
            return self.proc.wait(timeout)
        finally:
            self.log_file.close()


@pytest.fixture
def daemon_factory(tmp_path, dev_dir, cgroups_root):
    started: List[Daemon] = []

    def make(layout="v100x8", device_cgroup="v1", extra=None, env=None, work_dir=None,
             start=True, control=None) -> Daemon:
        d = Daemon(work_dir or tmp_path / "work", dev_dir, cgroups_root, layout,
                   device_cgroup, extra, env, control)
        started.append(d)
        return d.start() if start else d
    yield make
    for d in started:
        d.stop(signal.SIGKILL)


@pytest.fixture
def probers() -> Iterator[List[bed_cgroups.Prober]]:
    made: List[bed_cgroups.Prober] = []
    yield made
    for p in made:
        p.close()
