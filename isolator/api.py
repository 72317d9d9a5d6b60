"""The agent daemon's local API: the one contract between the daemon and its clients.

The daemon (isolator/daemon/server.py, isolator/daemon/service.py) and every client (the executor,
tools, tests) import the requests and answers from here; nothing else reads the
JSON by raw keys. Each request checks itself when read from JSON and names the
field that is wrong (the daemon answers 400 with that message).

HTTP/1.1 + JSON on the unix socket <work_dir>/agent.sock (mode 0600):

    POST /v1/prepare   PrepareRequest  -> Grant
    POST /v1/isolate   IsolateRequest  -> Grant
    POST /v1/update    UpdateRequest   -> Grant
    POST /v1/cleanup   CleanupRequest  -> Cleanup
    GET  /v1/usage?container_id=ID     -> Usage
    GET  /v1/health                    -> NodeHealth
    GET  /v1/info                      -> the daemon's state (dict)
    GET  /metrics                      -> Prometheus text

With --metrics_address HOST:PORT the daemon also serves the read-only
GET /metrics and GET /v1/health over HTTP on that TCP address (the framework
reads each agent's GPU health there, a Prometheus server scrapes it).

Containers are of two types, named as Marathon and Mesos name them: MESOS (the
unified containerizer: a process, or a runc container, in cgroups the daemon
makes) and DOCKER (a container of the local Docker engine, labelled
`mesos-gpu.container-id=<container id>`).
"""
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from isolator.discovery.devices import DeviceNode as Device
from isolator.errors import BadRequest

SOCKET_NAME = "agent.sock"
DEFAULT_WORK_DIR = "/var/lib/mesos-gpu"
DEFAULT_SOCKET = f"{DEFAULT_WORK_DIR}/{SOCKET_NAME}"
SOCKET_ENV = "MESOS_GPU_AGENT_SOCKET"          # how the executor learns the socket
# The Mesos agent attribute naming the port of the daemon's read-only HTTP endpoint
# (--metrics_address): how the framework finds GET /v1/health.
METRICS_PORT_ATTRIBUTE = "gpu_metrics_port"

MESOS = "MESOS"
DOCKER = "DOCKER"
CONTAINER_TYPES = (MESOS, DOCKER)
CONTAINER_LABEL = "mesos-gpu.container-id"     # on every Docker container of a GPU task

_CONTAINER_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


def check_container_id(value: object) -> str:
    """1-128 characters of A-Z a-z 0-9 _ . - (it names cgroups and Docker containers)."""
    if not isinstance(value, str) or not _CONTAINER_ID.match(value) or value in (".", ".."):
        raise BadRequest(f"'container_id' must be 1-128 characters of A-Z a-z 0-9 _ . -, "
                         f"got {value!r}")
    return value


def check_gpu_count(value: object, name: str = "gpus") -> int:
    """Whole GPUs only, as Mesos: fractional or negative counts are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"'{name}' must be a non-negative integer, got {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise BadRequest(f"'{name}' must be a non-negative integer: GPUs are not "
                             f"shared, {value} is fractional")
        value = int(value)
    if value < 0:
        raise BadRequest(f"'{name}' must be a non-negative integer, got {value}")
    return value


def check_container_type(value: object) -> str:
    if value not in CONTAINER_TYPES:
        raise BadRequest(f"'container_type' must be one of {', '.join(CONTAINER_TYPES)}, "
                         f"got {value!r}")
    return value


def _field(doc: Mapping[str, Any], name: str) -> Any:
    if name not in doc:
        raise BadRequest(f"'{name}' is missing from the request")
    return doc[name]


def _object(doc: object) -> Mapping[str, Any]:
    if not isinstance(doc, dict):
        raise BadRequest("the request body must be a JSON object")
    return doc


# --- requests -------------------------------------------------------------------------------

@dataclass(frozen=True)
class TaskLabels:
    """Which Mesos task a container runs, as its executor says: labels for the
    metrics (each GPU's series name the task while it holds it), never trusted
    for anything else."""
    task_id: str = ""
    framework_id: str = ""
    executor_id: str = ""
    app_id: str = ""

    def to_json(self) -> Dict[str, str]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: object) -> "TaskLabels":
        d = _object(doc) if doc is not None else {}
        out = {}
        for name in cls.__dataclass_fields__:
            value = d.get(name, "")
            if not isinstance(value, str) or len(value) > 512 or "\n" in value:
                raise BadRequest(f"'task.{name}' must be a line of text (at most 512 "
                                 f"characters), got {str(value)[:80]!r}")
            out[name] = value
        return cls(**out)


@dataclass(frozen=True)
class PrepareRequest:
    """Give `gpus` whole GPUs to a container about to be created. Asked again by the
    same caller with the same count, it answers the same grant (a client may retry).
    Unhealthy GPUs are never given (409 naming them when only they are free)."""
    container_id: str
    gpus: int
    container_type: str = MESOS
    task: Optional[TaskLabels] = None

    @classmethod
    def from_json(cls, doc: object) -> "PrepareRequest":
        d = _object(doc)
        return cls(check_container_id(_field(d, "container_id")),
                   check_gpu_count(_field(d, "gpus")),
                   check_container_type(d.get("container_type", MESOS)),
                   TaskLabels.from_json(d["task"]) if d.get("task") is not None else None)

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"container_id": self.container_id, "gpus": self.gpus,
                               "container_type": self.container_type}
        if self.task is not None:
            out["task"] = self.task.to_json()
        return out


@dataclass(frozen=True)
class IsolateRequest:
    """The container now exists: a MESOS one as the process `pid` (the caller or one of
    its descendants, not yet running the task), a DOCKER one as `docker_id` (created,
    not started, labelled with the container id)."""
    container_id: str
    pid: Optional[int] = None
    docker_id: Optional[str] = None

    @classmethod
    def from_json(cls, doc: object) -> "IsolateRequest":
        d = _object(doc)
        pid, docker_id = d.get("pid"), d.get("docker_id")
        if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0):
            raise BadRequest(f"'pid' must be a positive integer, got {pid!r}")
        if docker_id is not None and (not isinstance(docker_id, str) or not docker_id.isalnum()
                                      or len(docker_id) > 128):
            raise BadRequest(f"'docker_id' must be the Docker container's id, got {docker_id!r}")
        if (pid is None) == (docker_id is None):
            raise BadRequest("give exactly one of 'pid' (a MESOS container) and 'docker_id' "
                             "(a DOCKER container)")
        return cls(check_container_id(_field(d, "container_id")), pid, docker_id)


@dataclass(frozen=True)
class UpdateRequest:
    container_id: str
    gpus: int

    @classmethod
    def from_json(cls, doc: object) -> "UpdateRequest":
        d = _object(doc)
        return cls(check_container_id(_field(d, "container_id")),
                   check_gpu_count(_field(d, "gpus")))


@dataclass(frozen=True)
class CleanupRequest:
    container_id: str

    @classmethod
    def from_json(cls, doc: object) -> "CleanupRequest":
        return cls(check_container_id(_field(_object(doc), "container_id")))


# --- answers --------------------------------------------------------------------------------

@dataclass(frozen=True)
class GrantedGpu:
    index: int                      # NVML index on the host
    minor: int
    uuid: str
    name: str
    memory_total: int
    pci_bus_id: str
    compute_capability: str
    board_id: Optional[int] = None
    major: int = 195
    device_path: str = ""


@dataclass(frozen=True)
class Volume:
    """The read-only driver volume (`nvidia_<driver version>`) on the host."""
    name: str
    path: str


@dataclass(frozen=True)
class Grant:
    """What a prepared container holds and how to give it to the container."""
    container_id: str
    container_type: str
    gpus: Tuple[GrantedGpu, ...] = ()
    devices: Tuple[Device, ...] = ()           # control devices + one node per GPU
    env: Dict[str, str] = field(default_factory=dict)   # NVIDIA_/CUDA_VISIBLE_DEVICES
    driver_version: Optional[str] = None
    cuda_driver_version: Optional[str] = None
    volume: Optional[Volume] = None            # only when the container holds GPUs
    topology: str = ""

    @property
    def uuids(self) -> Tuple[str, ...]:
        return tuple(g.uuid for g in self.gpus)

    def to_json(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Grant":
        volume = doc.get("volume")
        return cls(container_id=doc["container_id"], container_type=doc["container_type"],
                   gpus=tuple(GrantedGpu(**g) for g in doc.get("gpus") or ()),
                   devices=tuple(Device(**d) for d in doc.get("devices") or ()),
                   env=dict(doc.get("env") or {}),
                   driver_version=doc.get("driver_version"),
                   cuda_driver_version=doc.get("cuda_driver_version"),
                   volume=Volume(**volume) if volume else None,
                   topology=doc.get("topology", ""))


NO_GRANT = None     # a task without GPUs on an agent without the daemon gets no grant


@dataclass(frozen=True)
class GpuFaultStop:
    """The daemon stopped the container itself: a GPU it held became unhealthy with a
    fault that loses the work on it (see isolator/health/gpu_health.py)."""
    message: str                     # e.g. "GPU 2 (GPU-...) became unhealthy: XID 79 (...)"
    uuids: Tuple[str, ...] = ()
    xid: Optional[int] = None


@dataclass(frozen=True)
class Cleanup:
    """The answer to cleanup. A container the daemon already stopped for a GPU fault is
    answered (not 404) with `stopped` saying why, so its executor can tell the task."""
    container_id: str
    released: Tuple[int, ...] = ()   # GPU minors back in the pool
    killed: Tuple[int, ...] = ()     # leftover processes of the container it killed
    stopped: Optional[GpuFaultStop] = None

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"container_id": self.container_id,
                               "released": list(self.released), "killed": list(self.killed)}
        if self.stopped is not None:
            out["stopped"] = {"message": self.stopped.message,
                              "uuids": list(self.stopped.uuids), "xid": self.stopped.xid}
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Cleanup":
        stopped = doc.get("stopped")
        return cls(doc["container_id"], tuple(doc.get("released") or ()),
                   tuple(doc.get("killed") or ()),
                   GpuFaultStop(stopped["message"], tuple(stopped.get("uuids") or ()),
                                stopped.get("xid")) if stopped else None)


# --- GPU health (GET /v1/health) ---------------------------------------------------------------

HEALTHY, UNHEALTHY, PROBING = "healthy", "unhealthy", "probing"


@dataclass(frozen=True)
class GpuHealth:
    """One managed GPU's health. Not healthy (unhealthy, or probing: its self-check
    runs) means it is not allocated."""
    minor: int
    index: int
    uuid: str
    name: str
    state: str                        # HEALTHY, UNHEALTHY or PROBING
    since: float                      # in this state since (unix time)
    reason: str = ""                  # why it is not healthy
    cause: str = ""                   # xid, ecc_dbe, gpu_lost, thermal, ... (gpu_health.CAUSES)
    xid: Optional[int] = None
    self_check_at: Optional[float] = None   # unhealthy: when the self-check is due
    container_id: str = ""            # the container holding it, if any

    @property
    def healthy(self) -> bool:
        return self.state == HEALTHY


@dataclass(frozen=True)
class NodeHealth:
    gpus: Tuple[GpuHealth, ...] = ()
    monitor: str = ""                 # how health is watched ("events and polling", ...)
    checked_at: float = 0.0           # the last poll (unix time)

    @property
    def unhealthy_free(self) -> Tuple[GpuHealth, ...]:
        """GPUs no container holds that must not be given: what an offer's free
        `gpus` count includes but no task can get."""
        return tuple(g for g in self.gpus if not g.healthy and not g.container_id)

    def to_json(self) -> Dict[str, Any]:
        return {"gpus": [asdict(g) for g in self.gpus], "monitor": self.monitor,
                "checked_at": self.checked_at}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "NodeHealth":
        names = GpuHealth.__dataclass_fields__
        return cls(tuple(GpuHealth(**{k: v for k, v in g.items() if k in names})
                         for g in doc.get("gpus") or ()),
                   doc.get("monitor", ""), float(doc.get("checked_at") or 0.0))


# --- usage (GET /v1/usage) -------------------------------------------------------------------------

@dataclass(frozen=True)
class ProcessUsage:
    pid: int
    memory_used: int
    sm_utilization: Optional[int] = None
    in_container: Optional[bool] = None   # None: the daemon cannot tell (process unreadable)


@dataclass(frozen=True)
class GpuUsage:
    """One GPU of a container. `memory_used`/`gpu_utilization` are the whole GPU's;
    `task_*` only the container's own processes (by their cgroups)."""
    minor: int
    uuid: str
    index: int
    memory_used: int
    memory_total: int
    gpu_utilization: Optional[int] = None
    memory_utilization: Optional[int] = None
    task_memory_used: int = 0
    task_sm_utilization: Optional[int] = None
    processes: Tuple[ProcessUsage, ...] = ()


@dataclass(frozen=True)
class Usage:
    container_id: str
    gpus: Tuple[GpuUsage, ...] = ()

    @property
    def memory_used(self) -> int:
        return sum(g.memory_used for g in self.gpus)

    @property
    def memory_total(self) -> int:
        return sum(g.memory_total for g in self.gpus)

    @property
    def task_memory_used(self) -> int:
        return sum(g.task_memory_used for g in self.gpus)

    def to_json(self) -> Dict[str, Any]:
        return {"container_id": self.container_id, "gpus": [asdict(g) for g in self.gpus],
                "memory_used": self.memory_used, "memory_total": self.memory_total,
                "task_memory_used": self.task_memory_used}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Usage":
        gpus = []
        names = GpuUsage.__dataclass_fields__
        for g in doc.get("gpus") or ():
            fields = {k: v for k, v in g.items() if k in names}
            fields["processes"] = tuple(ProcessUsage(**p) for p in g.get("processes") or ())
            gpus.append(GpuUsage(**fields))
        return cls(doc["container_id"], tuple(gpus))
