"""Two simulated GPU nodes on a real Mesos 1.11 master, and the framework
service in front of them, for the dashboard's browser tests:

- `v100-node`: eight Tesla V100s (fake NVML), `k80-node`: a K80 board (two GPUs);
- each with the real agent daemon, its Mesos agent started with the flags
  `mesos-gpu agent flags` prints, and executors told (by their agent) where
  their node's daemon is;
- `mesos-gpu framework` (in process, restartable on the same port and state:
  `restart()`), credentials on as by default, tasks in the private Docker engine;
- GPU health and usage as an operator runs them: each daemon serves /v1/health
  on `--metrics_address` (a short quiet period, so an injected fault heals
  within the test), the framework reads it every 0.5 s and executors report
  usage every second.
"""
import json
import os
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Dict, Optional

from framework.process.framework_process import FrameworkProcess, default_scheduler_factory
from localcluster import fake_nvml
from localcluster.gpu_node import GpuNode, layout_for_driver_files
from localcluster.mesos import Agent, Master
from localcluster.processes import free_port
from tests.bed.framework_process import client_of, framework_args

NODES = {"v100-node": fake_nvml.v100x8, "k80-node": fake_nvml.k80}
QUIET_SECONDS = 8             # the daemons' --health_quiet_period


def _scheduler_without_socket(args, store):
    """Executors get no agent socket from the framework: each agent says where its daemon is."""
    scheduler = default_scheduler_factory(args, store)
    scheduler.config = replace(scheduler.config, executor=replace(
        scheduler.config.executor, agent_socket=None))
    return scheduler


class GpuBed:
    def __init__(self, docker_engine, state_dir: Path) -> None:
        self.engine = docker_engine
        self.state_dir = state_dir
        self.stack = ExitStack()
        self.nodes: Dict[str, GpuNode] = {}
        self.agents: Dict[str, Agent] = {}
        self.service: Optional[FrameworkProcess] = None
        self.port = 0

    def start(self) -> "GpuBed":
        try:
            self.master = self.stack.enter_context(Master())
            for host, layout in NODES.items():
                node = self.stack.enter_context(GpuNode(
                    layout_for_driver_files(layout(), f"ui-{host}"), self.engine.host,
                    metrics_address=f"127.0.0.1:{free_port()}",
                    daemon_args=["--health_quiet_period", str(QUIET_SECONDS),
                                 "--health_poll_interval", "0.5"]))
                resources, attributes = node.flags(cpus=4, mem=2048)
                env = {"MESOS_EXECUTOR_ENVIRONMENT_VARIABLES": json.dumps({
                    "MESOS_GPU_AGENT_SOCKET": str(node.socket), "PATH": os.environ["PATH"]})}
                self.agents[host] = self.stack.enter_context(
                    Agent(self.master, resources, attributes, hostname=host, env=env))
                self.nodes[host] = node
            self.start_framework()
        except BaseException:
            self.stop()
            raise
        return self

    def start_framework(self) -> FrameworkProcess:
        args = framework_args(self.master.address, self.state_dir, "--docker_host",
                              self.engine.host, "--refuse_seconds", "1",
                              "--gpu_health_interval", "0.5", "--gpu_usage_interval", "1")
        args.http_port = self.port
        self.service = FrameworkProcess(args, scheduler_factory=_scheduler_without_socket).start()
        self.port = self.service.http.server_address[1]
        assert self.service.scheduler.wait_subscribed(30), "the framework did not subscribe"
        return self.service

    def restart_framework(self) -> FrameworkProcess:
        self.service.stop()
        return self.start_framework()

    @property
    def url(self) -> str:
        return self.service.http.url

    @property
    def credentials(self) -> str:
        return self.service.auth.credentials

    def api(self):
        return client_of(self.service)

    def stop(self) -> None:
        if self.service is not None and not self.service.http.closing.is_set():
            self.service.stop()
        self.stack.close()

    def __enter__(self) -> "GpuBed":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
