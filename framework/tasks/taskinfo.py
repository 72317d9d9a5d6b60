"""TaskInfo builders: a TaskSpec placed on an offer, as the Mesos v1 JSON the
master accepts, run by this project's executor (one per task). The whole task
travels in TaskInfo `data` (the TaskSpec); `container`, resources, URIs and the
kill policy say the rest to Mesos. Why each field is set as it is:
ARCHITECTURE.md, "TaskInfo".
"""
import base64
import json
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from framework.tasks.ports import ranges_resource
from framework.tasks.task_spec import BRIDGE, DOCKER, TaskSpec
from isolator.api import CONTAINER_LABEL, DEFAULT_SOCKET as DEFAULT_AGENT_SOCKET  # noqa: F401
from isolator.api import SHARE_RESOURCE_PREFIX, SOCKET_ENV as AGENT_SOCKET_ENV

# Labels the executor puts on its status updates, read by the scheduler.
GPUS_LABEL = "mesos-gpu.gpus"              # granted GPU UUIDs, comma-separated
RETRY_LABEL = "mesos-gpu.retry"            # "false": a retry cannot help (bad image, ...)
# On health updates (TASK_RUNNING with `healthy`) and the kill they lead to:
HEALTH_FAILURES_LABEL = "mesos-gpu.health.failures"   # consecutive failed checks
HEALTH_CAUSE_LABEL = "mesos-gpu.health.cause"         # why the last one failed
HEALTH_KILLED_LABEL = "mesos-gpu.health.killed"       # "true": killed for failing its checks
GPU_FAULT_LABEL = "mesos-gpu.gpu_fault"    # the agent daemon stopped it: its GPU went bad
EXECUTOR_ID_PREFIX = "mesos-gpu."


def default_executor_command() -> str:
    """This Python running the CLI's `executor` subcommand (works from an
    installed package and from an editable checkout alike)."""
    return f"{shlex.quote(sys.executable)} -m mesos_gpu executor"


@dataclass(frozen=True)
class ExecutorSettings:
    """How the agent starts our executor, and what it hands it."""
    command: str = field(default_factory=default_executor_command)
    # None: not passed; an agent's --executor_environment_variables may then set
    # it per agent, else the executor uses the default path.
    agent_socket: Optional[str] = DEFAULT_AGENT_SOCKET
    docker_host: Optional[str] = None  # DOCKER_HOST for the executor; None: its default
    extra_env: Mapping[str, str] = field(default_factory=dict)

    def environment(self) -> dict[str, str]:
        env = {"PYTHONUNBUFFERED": "1"}
        if self.agent_socket:
            env[AGENT_SOCKET_ENV] = self.agent_socket
        if self.docker_host:
            env["DOCKER_HOST"] = self.docker_host
        env.update(self.extra_env)
        return env


def resource_name(index: int) -> str:
    """The Mesos resource of one shared GPU, as `mesos-gpu agent flags` names it
    (isolator/sharing/plan.py)."""
    return f"{SHARE_RESOURCE_PREFIX}{index}"


def scalar(name: str, value: float) -> dict[str, Any]:
    return {"name": name, "type": "SCALAR", "scalar": {"value": value}}


def task_resources(spec: TaskSpec, gpu_resource: str = "gpus") -> list[dict[str, Any]]:
    """cpus, mem, disk and gpus as the task asks (zero amounts left out: Mesos
    refuses empty scalars). `gpu_resource`: the offer's resource the GPUs come
    from: `gpus`, or `mig-<profile>` for MIG devices of a mixed node."""
    amounts = (("cpus", spec.cpus), ("mem", spec.mem), ("disk", spec.disk),
               (gpu_resource, float(spec.whole_gpus)))
    resources = [scalar(name, value) for name, value in amounts if value > 0]
    if spec.share and spec.shared_gpu is not None:     # the slots of the GPU it was placed on
        resources.append(scalar(resource_name(spec.shared_gpu), float(spec.share_slots)))
    ports = ranges_resource(spec.host_ports)
    if ports is not None:
        resources.append(ports)
    return resources


def container_info(spec: TaskSpec) -> dict[str, Any]:
    """ContainerInfo v1 JSON: DOCKER with the image, or MESOS (with the image as
    a Docker image when there is one)."""
    if spec.container == DOCKER:
        docker: dict[str, Any] = {"image": spec.image, "network": spec.network}
        if spec.network == BRIDGE:
            docker["port_mappings"] = [
                {"host_port": host, "container_port": request.container_port or host,
                 "protocol": request.protocol}
                for request, host in zip(spec.ports, spec.host_ports) if host is not None]
        return {"type": "DOCKER", "docker": docker}
    info: dict[str, Any] = {"type": "MESOS"}
    if spec.image:
        info["mesos"] = {"image": {"type": "DOCKER", "docker": {"name": spec.image}}}
    return info


def encode_spec(spec: TaskSpec) -> str:
    return base64.b64encode(json.dumps(spec.to_json(), sort_keys=True).encode()).decode()


def decode_spec(data: str) -> TaskSpec:
    """The executor's side of `encode_spec`; a TaskSpecError if it is not one."""
    return TaskSpec.from_json(json.loads(base64.b64decode(data)))


def executor_info(spec: TaskSpec, task_id: str, framework_id: str,
                  settings: ExecutorSettings) -> dict[str, Any]:
    """One executor per launch attempt, named after it, started with our command."""
    variables = [{"name": k, "value": v} for k, v in sorted(settings.environment().items())]
    command: dict[str, Any] = {"value": settings.command, "shell": True,
                               "environment": {"variables": variables}}
    if spec.fetch:
        command["uris"] = [uri.to_mesos() for uri in spec.fetch]
    return {
        "executor_id": {"value": EXECUTOR_ID_PREFIX + task_id},
        "framework_id": {"value": framework_id},
        "name": f"mesos-gpu executor for {spec.id}",
        "source": spec.app_id or spec.id,
        "type": "CUSTOM",
        "command": command,
    }


def labels(values: Mapping[str, str]) -> dict[str, Any]:
    return {"labels": [{"key": k, "value": v} for k, v in sorted(values.items())]}


def build(spec: TaskSpec, agent_id: str, framework_id: str, settings: ExecutorSettings,
          task_id: Optional[str] = None, gpu_resource: str = "gpus") -> dict[str, Any]:
    """The TaskInfo for `spec` on `agent_id` (`task_id`: the Mesos task id of
    this launch attempt, default the spec's id; `gpu_resource`: see task_resources)."""
    task_id = task_id or spec.id
    info = {
        "name": spec.id,
        "task_id": {"value": task_id},
        "agent_id": {"value": agent_id},
        "resources": task_resources(spec, gpu_resource),
        "executor": executor_info(spec, task_id, framework_id, settings),
        "container": container_info(spec),
        "data": encode_spec(spec),
    }
    if spec.labels:
        info["labels"] = labels(spec.labels)
    if spec.kill_grace is not None:
        info["kill_policy"] = {"grace_period": {"nanoseconds": int(spec.kill_grace * 1e9)}}
    return info
