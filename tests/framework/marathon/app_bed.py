"""A bed for Marathon apps as people write them: a real Mesos 1.11 master and
agent (hostname 127.0.0.1, so the framework's own health checks reach its
tasks), the real agent daemon over a fake K80, our executor, the Docker engine
(with its bridge) and runc, the `mesos-gpu framework` service; plus a small
HTTP file server for `fetch`, and a tap on /v2/events."""
import glob
import http.client
import http.server
import json
import os
import socket
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

from framework.process.framework_process import FrameworkProcess
from localcluster import fake_nvml
from localcluster.gpu_node import GpuNode, layout_for_driver_files
from localcluster.mesos import Agent, Master
from tests.bed.framework_process import client_of, framework_args
from tests.bed.waiting import wait_until

HOSTNAME = "127.0.0.1"
ALLOWED = "cap-add,volume,privileged"


@contextmanager
def bed(docker_engine, state_dir: Path, *extra: str, cpus: float = 4,
        mem: int = 4096) -> Iterator["Bed"]:
    with GpuNode(layout_for_driver_files(fake_nvml.k80(), "apps-bed"), docker_engine.host) as node:
        resources, attributes = node.flags(cpus, mem)
        with Master() as master, Agent(master, resources, attributes, hostname=HOSTNAME) as agent:
            running = Bed(node, agent, docker_engine, state_dir, extra)
            try:
                yield running.start()
            finally:
                running.stop()


def bed_fixture(**resources):
    """A module's bed, as a pytest fixture (`bed = app_bed.bed_fixture()`)."""
    @pytest.fixture(scope="module")
    def bed_(docker_engine, mesos_prefix, tmp_path_factory):
        with bed(docker_engine, tmp_path_factory.mktemp("framework"), **resources) as running:
            yield running
    return bed_


@pytest.fixture(scope="module")
def image(busybox_image) -> str:
    """The bed's busybox image (import it into a test module to use it)."""
    return busybox_image()


class Bed:
    def __init__(self, node: GpuNode, agent: Agent, docker_engine, state_dir: Path,
                 extra) -> None:
        self.node, self.agent, self.docker_engine = node, agent, docker_engine
        self.args = framework_args(agent.master, state_dir, "--agent_socket", str(node.socket),
                                   "--docker_host", docker_engine.host, "--refuse_seconds", "1",
                                   "--gpu_scheduling_behavior", "unrestricted",
                                   "--allow_docker_parameters", ALLOWED, *extra)
        self.service: Optional[FrameworkProcess] = None

    def start(self) -> "Bed":
        self.service = FrameworkProcess(self.args).start()
        assert self.service.scheduler.wait_subscribed(30)
        return self

    def stop(self) -> None:
        if self.service is not None and not self.service.http.closing.is_set():
            self.service.stop()
        self.service = None

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def api(self):
        return client_of(self.service)

    # -- apps and tasks ---------------------------------------------------------------
    def create(self, app: dict) -> dict:
        reply = self.api.post("/v2/apps", app)
        assert reply.status == 201, reply.json
        return reply.json

    def delete(self, app_id: str) -> None:
        self.api.delete(f"/v2/apps{app_id}?force=true")
        wait_until(lambda: self.api.get(f"/v2/apps{app_id}").status == 404, timeout=60)

    def app(self, app_id: str) -> dict:
        return self.api.get(f"/v2/apps{app_id}?embed=app.readiness").json["app"]

    def tasks(self, app_id: str) -> List[dict]:
        return self.api.get(f"/v2/apps{app_id}/tasks").json.get("tasks", [])

    def running(self, app_id: str, count: int = 1, healthy: bool = False) -> List[dict]:
        """Waits for `count` running tasks (healthy ones, if asked)."""
        def enough():
            tasks = [t for t in self.tasks(app_id) if t["state"] == "TASK_RUNNING"]
            if healthy:
                tasks = [t for t in tasks if t["healthCheckResults"]
                         and all(r["alive"] for r in t["healthCheckResults"])]
            return tasks if len(tasks) == count else None
        return wait_until(enough, timeout=120, interval=0.5)

    def sandbox(self, task_id: str) -> Path:
        """The task's sandbox on the agent (its executor's, `runs/latest`)."""
        pattern = str(self.agent.run_dir / "work" / "slaves" / "*" / "frameworks" / "*" /
                      "executors" / f"mesos-gpu.{task_id}" / "runs" / "latest")
        found = glob.glob(pattern)
        assert found, f"no sandbox for {task_id} ({pattern})"
        return Path(found[0])


class FileServer:
    """Serves a directory over HTTP on 127.0.0.1 (the URIs tasks fetch)."""

    def __init__(self, root: Path) -> None:
        handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(root))  # noqa: E731
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.RequestHandlerClass.log_message = lambda *a, **k: None
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class EventTap:
    """Collects the events of /v2/events (server-sent events) in a thread."""

    def __init__(self, service: FrameworkProcess, types: str = "") -> None:
        self.events: List[dict] = []
        client = client_of(service)
        self.connection = http.client.HTTPConnection(client.host, client.port, timeout=300)
        query = f"?event_type={types}" if types else ""
        self.connection.request("GET", f"/v2/events{query}",
                                headers={**client.headers, "Accept": "text/event-stream"})
        self.socket = self.connection.sock
        self.response = self.connection.getresponse()
        assert self.response.status == 200
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for line in self.response:
                if line.startswith(b"data:"):
                    self.events.append(json.loads(line[5:]))
        except (OSError, ValueError):
            pass

    def of(self, event_type: str, **match) -> List[dict]:
        return [e for e in list(self.events) if e.get("eventType") == event_type
                and all(e.get(k) == v for k, v in match.items())]

    def close(self) -> None:
        try:
            self.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.connection.close()


def processes_with(marker: str) -> List[int]:
    """Pids of the processes whose command line holds `marker`."""
    found = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(cmdline, "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(cmdline.split("/")[2]))
        except OSError:
            continue
    return [pid for pid in found if pid != os.getpid()]
