"""Many GPU nodes on this machine: one Mesos master, N Mesos agents, each over its
own agent daemon (a GpuNode) with a fake 8-GPU NVML (V100s, UUIDs of its own), and
optionally one framework (`mesos-gpu framework`, a process of its own so that its
CPU and memory can be read), all brought up and torn down by one call:

    with GpuCluster(nodes=20, framework=True) as cluster:
        cluster.api_url, cluster.credentials     # the Marathon API
        cluster.memory()                         # RSS per node (daemon, Mesos agent)

Every node is a separate agent daemon and a separate Mesos agent process on
127.0.0.1 (its own port, work dir, cgroups root and device nodes); its executors
learn their node's daemon socket from the agent's --executor_environment_variables,
so the framework is told `--agent_socket none`; they and the framework import this
checkout (PYTHONPATH), not an installed copy of the project. Leaving stops the framework, the
agents (and every executor and task under them), the daemons and the master, and
removes their directories and cgroups; `leftovers()` says what would remain.
"""
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional

from isolator.cgroups import cgroup_host
from localcluster import fake_nvml, processes
from localcluster.gpu_node import GpuNode
from localcluster.mesos import Agent, Master
from localcluster.paths import LocalClusterError

log = logging.getLogger("mesos-gpu.localcluster.gpu_cluster")

GPUS_PER_NODE = 8
# Daemons and agents start a few at a time: each start is mostly Python imports and
# libmesos start-up, CPU-bound; more at once only makes each slower on a small machine.
START_PARALLEL = 4
FRAMEWORK_USER = "bench"


def checkout_path() -> str:
    """PYTHONPATH for the framework and the executors: this checkout first. They are
    started as `python -m mesos_gpu ...`, which would otherwise import whichever copy of
    the project is installed, not the code that a bench or a test is measuring."""
    checkout = str(Path(__file__).resolve().parents[1])
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != checkout]
    return os.pathsep.join([checkout] + rest)


def node_layout(index: int) -> fake_nvml.Layout:
    """The v100x8 board with UUIDs and a name of node `index`'s own (real nodes never
    share a GPU UUID, and the framework's views key GPUs by them)."""
    base = fake_nvml.v100x8()
    gpus = [replace(g, uuid=f"GPU-{index:08x}-{g.minor:04x}-4a7e-9c1d-00000100{g.minor:04x}")
            for g in base.gpus]
    return replace(base, name=f"v100x8-node{index:03d}", gpus=gpus)


def rss_kib(pid: int) -> int:
    """The process's resident set (VmRSS), 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Node:
    """One GPU node: its agent daemon and its Mesos agent."""

    def __init__(self, index: int, daemon: GpuNode, agent: Agent) -> None:
        self.index, self.daemon, self.agent = index, daemon, agent
        self.hostname = agent.hostname

    def stop(self) -> None:
        try:
            self.agent.stop()          # its executors and tasks first: they use the daemon
        finally:
            self.daemon.stop()


class GpuCluster:
    def __init__(self, nodes: int = 20, framework: bool = False, cpus: float = 8,
                 mem: int = 8192, master_env: Optional[Dict[str, str]] = None,
                 framework_args: tuple = (), docker_host: Optional[str] = None,
                 agent_env: Optional[Dict[str, str]] = None) -> None:
        if nodes < 1:
            raise LocalClusterError(f"a GPU cluster needs at least one node, not {nodes}")
        self.size, self.cpus, self.mem = nodes, cpus, mem
        self.master_env = dict(master_env or {})
        self.agent_env = dict(agent_env or {})      # more flags of every agent (MESOS_*)
        self.with_framework = framework
        self.framework_args = list(framework_args)
        # a Docker engine (DOCKER_HOST) every node's daemon and the executors use: DOCKER tasks
        self.docker_host = docker_host
        self.master: Optional[Master] = None
        self.nodes: List[Node] = []
        self.framework: Optional[subprocess.Popen] = None
        self.dir: Optional[Path] = None
        self.credentials = f"{FRAMEWORK_USER}:{secrets.token_hex(8)}"
        self.api_url = ""
        self._traces: List[tuple] = []   # (what, dir, cgroups root, pid) of each daemon started

    # -- up -------------------------------------------------------------------
    def start(self) -> "GpuCluster":
        self.dir = Path(tempfile.mkdtemp(prefix="mgpu-cluster-"))
        try:
            self.master = Master(self.master_env).start()
            self._traces.append(("Mesos master", self.master.run_dir, self.master.cgroups_root,
                                 self.master.pid))
            with ThreadPoolExecutor(START_PARALLEL) as pool:
                started = list(pool.map(self._start_node, range(self.size)))
            self.nodes = [n for n in started if n is not None]
            if len(self.nodes) != self.size:
                raise LocalClusterError(f"{self.size - len(self.nodes)} of {self.size} GPU "
                                        f"nodes did not start (see the log above)")
            self.master.wait_agents(self.size, timeout=60)
            if self.with_framework:
                self._start_framework()
        except BaseException:
            self.stop()
            raise
        log.info("GPU cluster up: master %s, %d nodes x %d GPUs%s", self.master.address,
                 self.size, GPUS_PER_NODE, f", framework {self.api_url}" if self.api_url else "")
        return self

    def _start_node(self, index: int) -> Optional[Node]:
        daemon = agent = None
        try:
            daemon = GpuNode(node_layout(index), self.docker_host, volume=False,
                             metrics_address=f"127.0.0.1:{processes.free_port()}").start()
            resources, attributes = daemon.flags(cpus=self.cpus, mem=self.mem)
            env = {"MESOS_EXECUTOR_ENVIRONMENT_VARIABLES": json.dumps(
                {"MESOS_GPU_AGENT_SOCKET": str(daemon.socket), "PATH": os.environ["PATH"],
                 "PYTHONPATH": checkout_path()}), **self.agent_env}
            agent = Agent(self.master, resources, attributes,
                          hostname=f"gpu-node-{index:03d}", env=env).start()
            self._traces += [(f"agent daemon {index}", daemon.dir, daemon.cgroups_root,
                              daemon.proc.pid),
                             (f"Mesos agent {index}", agent.run_dir, agent.cgroups_root,
                              agent.pid)]
            return Node(index, daemon, agent)
        except Exception as e:  # noqa: BLE001 - one line per node that failed, then stop()
            log.error("GPU node %d did not start: %s", index, e)
            if agent is not None:
                agent.stop()
            if daemon is not None:
                daemon.stop()
            return None

    def _start_framework(self) -> None:
        port = processes.free_port()
        self.api_url = f"http://127.0.0.1:{port}"
        self.framework_log = self.dir / "framework.log"
        args = [sys.executable, "-m", "mesos_gpu", "framework", "--master", self.master.address,
                "--http_port", str(port), "--http_credentials", self.credentials,
                "--state_dir", str(self.dir / "framework"), "--agent_socket", "none",
                "--refuse_seconds", "1", *self.framework_args,
                *(["--docker_host", self.docker_host] if self.docker_host else [])]
        with open(self.framework_log, "ab") as out:
            self.framework = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out,
                                              stderr=subprocess.STDOUT, start_new_session=True,
                                              env=dict(os.environ, PYTHONPATH=checkout_path()))
        self._traces.append(("framework", self.dir, None, self.framework.pid))
        processes.wait_until(self._framework_subscribed, 60, f"the framework at {self.api_url}",
                             self._framework_died, interval=0.2)

    def _framework_subscribed(self) -> bool:
        return any(f.get("active") for f in self.master.state().get("frameworks", []))

    def _framework_died(self) -> Optional[str]:
        if self.framework.poll() is None:
            return None
        tail = self.framework_log.read_text(errors="replace").strip().splitlines()[-5:]
        return f"exited with status {self.framework.returncode}: {' | '.join(tail)}"

    # -- what it costs ----------------------------------------------------------
    def memory(self) -> List[Dict]:
        """Per node: the RSS of its agent daemon and of its Mesos agent, in KiB."""
        return [{"node": n.hostname, "daemon_kib": rss_kib(n.daemon.proc.pid),
                 "agent_kib": rss_kib(n.agent.pid) if n.agent.pid else 0}
                for n in self.nodes]

    # -- down -----------------------------------------------------------------
    def stop(self) -> None:
        """Everything down, in the order that leaves no task without its daemon."""
        if self.framework is not None and self.framework.poll() is None:
            self.framework.send_signal(signal.SIGTERM)
            try:
                self.framework.wait(30)
            except subprocess.TimeoutExpired:
                self.framework.kill()
                self.framework.wait()
        with ThreadPoolExecutor(START_PARALLEL) as pool:
            list(pool.map(Node.stop, self.nodes))
        self.nodes = []
        if self.master is not None:
            self.master.stop()
            self.master = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)   # self.dir stays: leftovers() checks it

    def leftovers(self) -> List[str]:
        """After stop(): what any part of the cluster left (a process of its own or
        below its directories, a directory, a mount, a cgroup); [] when nothing."""
        mounts = set(cgroup_host.cgroup_mounts().values())
        left = []
        for what, directory, cgroups_root, pid in self._traces:
            if pid is not None and processes.alive(pid):
                left.append(f"{what}: process {pid}")
            if directory is not None:
                left += [f"{what}: process {p} below {directory}"
                         for p in processes.members(Path(directory))]
                left += [f"{what}: mount {m}" for m in processes.mounts_under(Path(directory))]
                if Path(directory).exists():
                    left.append(f"{what}: directory {directory}")
            if cgroups_root is not None:
                left += [f"{what}: cgroup {Path(m) / cgroups_root}" for m in mounts
                         if (Path(m) / cgroups_root).exists()]
        if self.dir is not None and self.dir.exists():
            left.append(f"the cluster's directory {self.dir}")
        return left

    def __enter__(self) -> "GpuCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
