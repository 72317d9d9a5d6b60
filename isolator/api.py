"""The agent daemon's local API: the one contract between the daemon and its clients.

The daemon (isolator/server.py, isolator/service.py) and every client (the executor,
tools, tests) import the requests and answers from here; nothing else reads the
JSON by raw keys. Each request checks itself when read from JSON and names the
field that is wrong (the daemon answers 400 with that message).

HTTP/1.1 + JSON on the unix socket <work_dir>/agent.sock (mode 0600):

    POST /v1/prepare   PrepareRequest  -> Grant
    POST /v1/isolate   IsolateRequest  -> Grant
    POST /v1/update    UpdateRequest   -> Grant
    POST /v1/cleanup   CleanupRequest  -> Cleanup
    GET  /v1/usage?container_id=ID     -> usage figures (dict)
    GET  /v1/info                      -> the daemon's state (dict)
    GET  /metrics                      -> Prometheus text

Containers are of two types, named as Marathon and Mesos name them: MESOS (the
unified containerizer: a process, or a runc container, in cgroups the daemon
makes) and DOCKER (a container of the local Docker engine, labelled
`mesos-gpu.container-id=<container id>`).
"""
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from isolator.devices import DeviceNode as Device
from isolator.errors import BadRequest

SOCKET_NAME = "agent.sock"
DEFAULT_WORK_DIR = "/var/lib/mesos-gpu"
DEFAULT_SOCKET = f"{DEFAULT_WORK_DIR}/{SOCKET_NAME}"
SOCKET_ENV = "MESOS_GPU_AGENT_SOCKET"          # how the executor learns the socket

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
class PrepareRequest:
    """Give `gpus` whole GPUs to a container about to be created. Asked again by the
    same caller with the same count, it answers the same grant (a client may retry)."""
    container_id: str
    gpus: int
    container_type: str = MESOS

    @classmethod
    def from_json(cls, doc: object) -> "PrepareRequest":
        d = _object(doc)
        return cls(check_container_id(_field(d, "container_id")),
                   check_gpu_count(_field(d, "gpus")),
                   check_container_type(d.get("container_type", MESOS)))


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
class Cleanup:
    container_id: str
    released: Tuple[int, ...] = ()   # GPU minors back in the pool
    killed: Tuple[int, ...] = ()     # leftover processes of the container it killed

    def to_json(self) -> Dict[str, Any]:
        return {"container_id": self.container_id, "released": list(self.released),
                "killed": list(self.killed)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Cleanup":
        return cls(doc["container_id"], tuple(doc.get("released") or ()),
                   tuple(doc.get("killed") or ()))
