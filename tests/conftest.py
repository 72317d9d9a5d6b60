"""Shared fixtures: the real parts of the one-machine cluster (the `localcluster`
package), started and stopped by the tests; test-only probes are in tests/bed.

Fixture names are a contract with every test package; keep them stable.

Session scope
- `mesos_prefix` -> Path: the built Mesos 1.11 prefix (`localcluster.mesos.build()`).
- `docker_engine` -> localcluster.docker_engine.DockerEngine: ONE private dockerd for the
  session (own data root, exec root and unix socket in a temp dir; vfs; no iptables,
  no bridge), started on first use, stopped (containers removed) at session end.
  `.client()` is a docker SDK client; `.host` is "unix://..." for DOCKER_HOST;
  `.remove_containers()` cleans up between tests if a test needs an empty engine.
- `busybox_image(labels=None, env=None, cmd=None, tag=None)` -> "name:tag": a tiny
  busybox-static image imported into `docker_engine` with these LABEL/ENV/CMD
  changes (no registry); the same labels/env/cmd are imported only once.

Function scope (everything started is stopped when the test ends)
- `nvml_layout(name_or_layout)` -> localcluster.fake_nvml.Layout: applies the layout's
  environment (FAKE_NVML_CONFIG, MESOS_GPU_NVML_LIBRARY, FAKE_NVML_INIT_ERROR) to
  os.environ with monkeypatch, for in-process `isolator.discovery.nvml.discover()`; pass
  `layout.env()` to child processes. Names: k80, v100x8, mixed, nodriver, nolib;
  or a `fake_nvml.custom(...)` layout. Caveat: in-process "nolib" is only true in a
  process that has not loaded the fake library yet (dlopen finds the loaded one by
  its soname); test "nolib" in a child process.
- `mesos_cluster(resources="cpus:2;mem:1024;gpus:2", attributes="", env=None, agents=1)`
  -> localcluster.mesos.LocalCluster: master + agent(s) in one process on a free port,
  registered agents. `.address` "127.0.0.1:PORT", `.state()`, `.agents()`,
  `.wait_agents(n, timeout)`.
  `env` holds more MESOS_* flags (MESOS_ISOLATION, MESOS_LAUNCHER, ...).
- `mesos_master(env=None)` -> localcluster.mesos.Master: a master-only process.
- `mesos_agent(master, resources, attributes="", hostname="127.0.0.1", env=None)`
  -> localcluster.mesos.Agent: one agent process, returned once it has registered.
  `.address`, `.state()` (agent /state), `.id`, `.run_dir`, `.stop()`.
- `zookeeper` -> localcluster.zookeeper.ZooKeeper: a started ZooKeeper server (Debian's
  `zookeeper`) of the test's own on 127.0.0.1; `.hosts`, `.url(path)`, `.crash()`,
  `.restart()`, `.pause()`, `.resume()`.
- `mesos_quorum(zookeeper, count=3, quorum=2, env=None)` -> localcluster.mesos.MasterQuorum:
  `count` real masters electing a leader on ZooKeeper, a replicated-log registry;
  `.address` is `zk://.../mesos` (for agents and frameworks), `.leader()`, `.masters`.
- `mesos_gpu_cli(*args, env=None, timeout=60)` -> subprocess.CompletedProcess (text):
  runs the installed `mesos-gpu` console script of this venv with os.environ plus
  `env`; when `env` is a layout's `.env()`, the NVML variables come from it alone.

For a cluster or engine shared by a whole module, use the classes directly in a
module-scoped fixture: `with LocalCluster(...) as cluster: yield cluster`.
Offers as a framework sees them: `tests.bed.v1_scheduler.SchedulerStream` /
`collect_offers` (plain HTTP v1 API, with or without GPU_RESOURCES).
"""
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Union

import pytest

from localcluster import fake_nvml, mesos
from localcluster.docker_engine import DockerEngine
from localcluster.zookeeper import ZooKeeper
from localcluster.paths import LocalClusterError

NVML_VARS = ("FAKE_NVML_CONFIG", "MESOS_GPU_NVML_LIBRARY", "FAKE_NVML_INIT_ERROR")


@pytest.fixture(scope="session", autouse=True)
def host_dev_left_as_found() -> Iterator[None]:
    """NVIDIA's real user-space programs, run as root on this host without the kernel
    driver, make the device nodes they miss in the host's /dev (/dev/nvidiactl): the
    tests run them without CAP_MKNOD; should one slip through, what it made is removed
    at the end of the session and named in a warning."""
    before = set(Path("/dev").glob("nvidia*"))
    yield
    made = sorted(set(Path("/dev").glob("nvidia*")) - before)
    for node in made:
        node.unlink(missing_ok=True)
    if made:
        warnings.warn(f"tests made {', '.join(map(str, made))} in the host's /dev "
                      f"(removed): run what made it under localcluster.device_nodes.NO_MKNOD")


@pytest.fixture(scope="session")
def mesos_prefix() -> Path:
    return mesos.build()


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[DockerEngine]:
    engine = DockerEngine().start()
    try:
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="session")
def busybox_image(docker_engine: DockerEngine):
    def make(labels: Optional[Dict[str, str]] = None, env: Optional[Dict[str, str]] = None,
             cmd: Union[None, str, Sequence[str]] = None, tag: Optional[str] = None) -> str:
        if tag is None:
            import hashlib
            import json
            key = json.dumps([labels or {}, env or {}, cmd], sort_keys=True).encode()
            tag = "bed/busybox:" + hashlib.sha256(key).hexdigest()[:12]
        return docker_engine.make_image(tag, labels=labels, env=env, cmd=cmd)
    return make


@pytest.fixture
def nvml_layout(monkeypatch):
    def apply(layout: Union[str, fake_nvml.Layout]) -> fake_nvml.Layout:
        lay = fake_nvml.layout(layout) if isinstance(layout, str) else layout
        env = lay.env()
        for key in NVML_VARS:
            if key in env:
                monkeypatch.setenv(key, env[key])
            else:
                monkeypatch.delenv(key, raising=False)
        return lay
    return apply


class _Started:
    """Daemons a test started, stopped in reverse order at its end."""

    def __init__(self) -> None:
        self.daemons: List = []

    def start(self, daemon):
        self.daemons.append(daemon)
        return daemon.start()

    def stop_all(self) -> None:
        errors = []
        while self.daemons:
            try:
                self.daemons.pop().stop()
            except Exception as e:  # noqa: BLE001 - stop the others, then report
                errors.append(e)
        if errors:
            raise errors[0]


@pytest.fixture
def _mesos_daemons(mesos_prefix) -> Iterator[_Started]:
    started = _Started()
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def mesos_cluster(_mesos_daemons):
    def start(resources: str = "cpus:2;mem:1024", attributes: str = "",
              env: Optional[Dict[str, str]] = None, agents: int = 1) -> mesos.LocalCluster:
        return _mesos_daemons.start(mesos.LocalCluster(resources, attributes, env, agents))
    return start


@pytest.fixture
def mesos_master(_mesos_daemons):
    def start(env: Optional[Dict[str, str]] = None) -> mesos.Master:
        return _mesos_daemons.start(mesos.Master(env))
    return start


@pytest.fixture
def mesos_agent(_mesos_daemons):
    def start(master, resources: str, attributes: str = "", hostname: str = "127.0.0.1",
              env: Optional[Dict[str, str]] = None) -> mesos.Agent:
        return _mesos_daemons.start(mesos.Agent(master, resources, attributes, hostname, env))
    return start


@pytest.fixture
def zookeeper() -> Iterator[ZooKeeper]:
    with ZooKeeper() as server:
        yield server


@pytest.fixture
def mesos_quorum(_mesos_daemons):
    def start(zookeeper: ZooKeeper, count: int = 3, quorum: int = 2,
              env: Optional[Dict[str, str]] = None) -> mesos.MasterQuorum:
        return _mesos_daemons.start(mesos.MasterQuorum(zookeeper, count, quorum, env=env))
    return start


@pytest.fixture(scope="session")
def mesos_gpu_cli():
    exe = Path(sys.executable).parent / "mesos-gpu"
    if not exe.exists():
        raise LocalClusterError(f"{exe} not found: run ./install.sh (pip install -e .)")

    def run(*args: str, env: Optional[Dict[str, str]] = None,
            timeout: float = 60) -> subprocess.CompletedProcess:
        env = dict(env or {})
        full_env = dict(os.environ)
        if any(k in env for k in NVML_VARS):     # a layout's env: only its NVML settings
            for key in NVML_VARS:
                full_env.pop(key, None)
        full_env.update(env)
        return subprocess.run([str(exe), *args], env=full_env, capture_output=True,
                              text=True, timeout=timeout)
    return run
