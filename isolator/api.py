"""The agent daemon's local API, the one contract between the daemon and its clients
(the executor, tools, tests): typed requests and answers, each request checked
when read from JSON, naming the field that is wrong (400). The routes and the two
container types: ARCHITECTURE.md, "The node side in detail"."""
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
# MIG devices in the agent's flags (isolator/daemon/mig_resources.py), read by the
# framework's matching: `mixed`, one scalar resource per profile, mig-1g.18gb:3; `single`
# (every GPU in MIG mode, one profile), gpus:N counting MIG devices and this attribute
MIG_RESOURCE_PREFIX = "mig-"
MIG_PROFILE_ATTRIBUTE = "gpu_mig_profile"

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
            raise BadRequest(f"'{name}' must be a non-negative integer: {value} is "
                             "fractional (a share of a shared GPU is asked with 'share')")
        value = int(value)
    if value < 0:
        raise BadRequest(f"'{name}' must be a non-negative integer, got {value}")
    return value


SHARING_MODES = ("mps", "time-slicing")     # how a shared GPU is shared (--sharing)
# The Mesos resource of one shared GPU is this + its NVML index, in slots
# (isolator/sharing/plan.py); the framework asks for it in a share's TaskInfo.
SHARE_RESOURCE_PREFIX = "gpu_shares_"
# What each sharing isolates between the tenants of a GPU: said in the grant, the
# daemon's /v1/info, the framework's /v2/info and the README alike
SHARING_ISOLATION = {
    "mps": "SM share and pinned device memory capped by the GPU's MPS control daemon; "
           "a fault in one client can end the GPU's MPS server and every tenant with it",
    "time-slicing": "nothing: tenants share SMs by time and memory without limits; "
                    "one tenant can take all memory, and a fault of one is seen by all",
}
# The Mesos agent attributes saying how a node's shared GPUs are shared
SHARING_ATTRIBUTE = "gpu_sharing"
GRANULARITY_ATTRIBUTE = "gpu_share_granularity"
MAX_SHARE_ATTRIBUTE = "gpu_share_max"


def check_fraction(value: object, name: str = "share.fraction") -> float:
    """A share of one GPU: a number strictly between 0 and 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 < value < 1:
        raise BadRequest(f"'{name}' must be a fraction of one GPU, above 0 and below 1, "
                         f"got {value!r}")
    return float(value)


_MIG_PROFILE = re.compile(r"^[1-8]g\.[0-9]+gb(\+[a-z]+)?$")


def check_mig_profile(value: object, name: str = "mig_profile") -> str:
    """A MIG profile as NVIDIA names it ("1g.18gb", "3g.71gb", "1g.18gb+me"), or ""."""
    if value == "":
        return ""
    if not isinstance(value, str) or not _MIG_PROFILE.match(value):
        raise BadRequest(f"'{name}' must be a MIG profile such as 1g.18gb or 3g.71gb, "
                         f"got {value!r}")
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
class ShareRequest:
    """A share of one shared GPU (the operator's --shared_gpus): `fraction` of it, on
    the GPU of NVML index `gpu` when the offer named one (the framework always does:
    the offer's gpu_shares_<index> resource), else on the one the daemon picks."""
    fraction: float
    gpu: Optional[int] = None

    @classmethod
    def from_json(cls, doc: object) -> "ShareRequest":
        d = _object(doc)
        gpu = d.get("gpu")
        if gpu is not None and (isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0):
            raise BadRequest(f"'share.gpu' must be a GPU's NVML index, got {gpu!r}")
        return cls(check_fraction(_field(d, "fraction")), gpu)

    def to_json(self) -> Dict[str, Any]:
        return {"fraction": self.fraction, "gpu": self.gpu}


@dataclass(frozen=True)
class PrepareRequest:
    """Give `gpus` whole GPUs, or a `share` of one shared GPU, to a container about to
    be created. Asked again by the same caller with the same request, it answers the
    same grant (a client may retry). Unhealthy GPUs are never given (409 naming them
    when only they are free)."""
    container_id: str
    gpus: int
    container_type: str = MESOS
    task: Optional[TaskLabels] = None
    share: Optional[ShareRequest] = None
    mig_profile: str = ""        # "1g.18gb": `gpus` MIG devices of that profile; "": whole GPUs

    @classmethod
    def from_json(cls, doc: object) -> "PrepareRequest":
        d = _object(doc)
        container_id = check_container_id(_field(d, "container_id"))
        share = ShareRequest.from_json(d["share"]) if d.get("share") is not None else None
        gpus = check_gpu_count(d.get("gpus", 0) if share is not None else _field(d, "gpus"))
        if share is not None and gpus:
            raise BadRequest(f"'gpus' is {gpus} and 'share' is given: a container holds "
                             "whole GPUs or one share of a shared GPU, not both")
        if share is not None and d.get("mig_profile"):
            raise BadRequest("'mig_profile' and 'share' are both given: a MIG device is "
                             "not shared")
        return cls(container_id, gpus,
                   check_container_type(d.get("container_type", MESOS)),
                   TaskLabels.from_json(d["task"]) if d.get("task") is not None else None,
                   share, check_mig_profile(d.get("mig_profile", "")))

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"container_id": self.container_id, "gpus": self.gpus,
                               "container_type": self.container_type}
        if self.mig_profile:
            out["mig_profile"] = self.mig_profile
        if self.task is not None:
            out["task"] = self.task.to_json()
        if self.share is not None:
            out["share"] = self.share.to_json()
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
    mig_mode: Optional[str] = None
    # a MIG device (uuid MIG-...): index, minor and device_path are its parent GPU's
    key: Optional[int] = None
    parent_uuid: str = ""
    mig_index: Optional[int] = None     # among its parent's MIG devices (CDI: <index>:<mig_index>)
    gpu_instance_id: Optional[int] = None
    compute_instance_id: Optional[int] = None
    profile: str = ""
    profile_id: Optional[int] = None
    caps_major: Optional[int] = None
    gi_cap_minor: Optional[int] = None
    ci_cap_minor: Optional[int] = None
    caps_error: str = ""

    @classmethod
    def of(cls, gpu: Any) -> "GrantedGpu":
        """From a discovery record (isolator.discovery.gpu.Gpu or mig.MigDevice)."""
        return cls(**gpu.to_json())

    def to_json(self) -> Dict[str, Any]:
        """The MIG fields only when set: a whole GPU's grant stays what clients from
        before MIG read (their GrantedGpu takes no other keyword)."""
        d = asdict(self)
        return {k: v for k, v in d.items()
                if k not in _MIG_FIELDS or v not in (None, "")}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "GrantedGpu":
        return cls(**{k: v for k, v in doc.items() if k in cls.__dataclass_fields__})


_MIG_FIELDS = ("mig_mode", "key", "parent_uuid", "mig_index", "gpu_instance_id", "compute_instance_id",
               "profile", "profile_id", "caps_major", "gi_cap_minor", "ci_cap_minor",
               "caps_error")


@dataclass(frozen=True)
class Volume:
    """The read-only driver volume (`nvidia_<driver version>`) on the host."""
    name: str
    path: str


@dataclass(frozen=True)
class GrantedShare:
    """A container's share of a shared GPU (the GPU itself is its one entry in
    Grant.gpus). Under MPS the GPU's control daemon caps every client at
    `client_limit` (what no client can raise), and the container's own share is
    asked in its environment (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
    CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), which can only lower that cap. Under
    time-slicing nothing is limited: `isolated` says what the tenants do not get."""
    fraction: float
    sharing: str                          # "mps" or "time-slicing"
    index: int
    minor: int
    client_limit: float = 1.0             # MPS: the cap the control daemon enforces
    thread_percentage: Optional[int] = None   # MPS: the SM share asked for this container
    memory_limit: Optional[int] = None        # MPS: pinned device memory asked, bytes
    pipe_dir: str = ""                    # MPS: the GPU's CUDA_MPS_PIPE_DIRECTORY
    isolated: str = ""                    # what the sharing isolates, in words


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
    share: Optional[GrantedShare] = None       # a share of the one GPU in `gpus`

    @property
    def uuids(self) -> Tuple[str, ...]:
        return tuple(g.uuid for g in self.gpus)

    def to_json(self) -> Dict[str, Any]:
        d = asdict(self)
        d["gpus"] = [g.to_json() for g in self.gpus]
        return d

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Grant":
        volume = doc.get("volume")
        return cls(container_id=doc["container_id"], container_type=doc["container_type"],
                   gpus=tuple(GrantedGpu.from_json(g) for g in doc.get("gpus") or ()),
                   devices=tuple(Device(**d) for d in doc.get("devices") or ()),
                   env=dict(doc.get("env") or {}),
                   driver_version=doc.get("driver_version"),
                   cuda_driver_version=doc.get("cuda_driver_version"),
                   volume=Volume(**volume) if volume else None,
                   topology=doc.get("topology", ""),
                   share=GrantedShare(**doc["share"]) if doc.get("share") else None)


NO_GRANT = None     # a task without GPUs on an agent without the daemon gets no grant


@dataclass(frozen=True)
class GpuFaultStop:
    """The daemon stopped the container itself: a GPU it held became unhealthy with a
    fault that loses the work on it (see isolator/gpu_health/book.py)."""
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
    shared: bool = False              # shared between containers (--shared_gpus)

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
        """Whole GPUs no container holds that must not be given: what an offer's free
        `gpus` count includes but no task can get."""
        return tuple(g for g in self.gpus
                     if not g.healthy and not g.container_id and not g.shared)

    @property
    def unhealthy_shared(self) -> Tuple[int, ...]:
        """NVML indices of shared GPUs that must not get a share: their gpu_shares_<index>
        in an offer promises what prepare refuses."""
        return tuple(g.index for g in self.gpus if g.shared and not g.healthy)

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
    """One GPU of a container. `memory_used`/`gpu_utilization` are the whole GPU's (a MIG
    device's: its own memory and processes, no utilisation: NVML has none per MIG device);
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
