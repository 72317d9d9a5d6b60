"""TaskSpec: one task the scheduler is asked to run, validated up front.

The Marathon-style layer builds these from app definitions; the scheduler
matches them to offers and turns them into TaskInfos. Everything a user can get
wrong is checked here, so a bad task is refused before it reaches Mesos, with
an error that names the field and the reason.
"""
import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from framework.tasks import constraints as constraint_rules
from framework.tasks import container_options, fetch_uri, ports as port_rules
from framework.tasks.constraints import Constraint
from framework.tasks.container_options import BRIDGE, HOST, PullCredential, Volume  # noqa: F401
from framework.tasks.fetch_uri import FetchUri
from framework.tasks.health_check import HealthCheck
from framework.tasks.ports import PortRequest
from common.errors import UserError
from isolator.api import CONTAINER_TYPES, DOCKER, MESOS  # noqa: F401  (one name, API to kernel)
from isolator.api import check_mig_profile
from isolator.errors import BadRequest


# Mesos refuses ids with '/' or control characters, and "." / ".." (they name
# sandbox directories); whitespace is refused too because ids end up in paths,
# cgroup names and container names.
_BAD_ID_CHARACTERS = re.compile(r"[/\\\s\x00-\x1f\x7f]")


class TaskSpecError(UserError):
    """A task description that cannot run; the message names the field."""


@dataclass(frozen=True)
class TaskSpec:
    """What to run, with which resources, and where it may go.

    `container` is DOCKER (image required; run by the Docker engine) or MESOS
    (the unified containerizer: a plain command, or a Docker image's root
    filesystem). `cmd` is a shell command; `args` an argv (exec'd directly, or
    appended to the image's entrypoint). `gpus` is a whole number of GPUs, or a
    share of one shared GPU (0 < gpus < 1, see isolator/sharing/plan.py); the
    scheduler sets `shared_gpu` (its NVML index) and `share_slots` on the launched
    copy of a share, from the offer's gpu_shares_<index> resource.
    `constraints` takes Marathon's `[field, OPERATOR(, value)]` lists and keeps
    them parsed.

    Ports (`ports`: what it asks for, framework.tasks.ports; `host_ports`: what the
    scheduler gave it at launch), `network` (HOST, or BRIDGE for DOCKER), the
    URIs the Mesos fetcher puts in its sandbox (`fetch`), the health check its
    executor runs (`health_check`), and the container options (`volumes`,
    `docker_parameters`, `privileged`, `user`, `force_pull`, `pull_credential`,
    `kill_grace`: seconds between SIGTERM and SIGKILL) are applied by the executor.
    """
    id: str
    app_id: str = ""
    container: str = MESOS
    image: Optional[str] = None
    cmd: Optional[str] = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cpus: float = 1.0
    mem: float = 128.0
    disk: float = 0.0
    gpus: float = 0
    constraints: tuple[Constraint, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    # Set by the scheduler on the launched copy when `image` was resolved in a
    # registry: image pinned by digest, index, digests, features
    # (framework.images.variant_selection.pinned)
    variant: Optional[Mapping[str, Any]] = None
    ports: tuple[PortRequest, ...] = ()
    host_ports: tuple[Optional[int], ...] = ()
    network: str = HOST
    fetch: tuple[FetchUri, ...] = ()
    health_check: Optional[HealthCheck] = None
    volumes: tuple[Volume, ...] = ()
    docker_parameters: tuple[tuple[str, str], ...] = ()
    privileged: bool = False
    user: Optional[str] = None
    force_pull: bool = False
    # the registry credential the app gave for its image (when the operator allows it)
    pull_credential: Optional[PullCredential] = None
    kill_grace: Optional[float] = None
    shared_gpu: Optional[int] = None
    share_slots: int = 0

    @property
    def share(self) -> float:
        """The share of one shared GPU it asks for (0: none, whole GPUs or no GPU)."""
        return self.gpus if 0 < self.gpus < 1 else 0.0

    @property
    def whole_gpus(self) -> int:
        return 0 if self.share else int(self.gpus)
    # `gpus` MIG devices of this profile ("1g.18gb"): the agent's mig-<profile> resource,
    # or `gpus` of a node whose attribute gpu_mig_profile names it; "": whole GPUs
    mig_profile: str = ""
    # A member of a gang (framework/tasks/rendezvous.py): `gang` names it, `gang_size`
    # tasks are placed and launched all together or not at all; `rank` is this one's
    # place in it (0: the one whose host and first port are the rendezvous)
    gang: str = ""
    gang_size: int = 0
    rank: int = 0

    def __post_init__(self) -> None:
        self._set("id", _check_id(self.id, "id"))
        self._set("app_id", _check_text(self.app_id, "app_id"))
        self._set("container", _check_container(self.container))
        self._set("image", _check_optional_text(self.image, "image"))
        self._set("cmd", _check_optional_text(self.cmd, "cmd"))
        self._set("args", _check_args(self.args))
        self._set("env", _check_mapping(self.env, "env"))
        self._set("labels", _check_mapping(self.labels, "labels"))
        for name in ("cpus", "mem", "disk"):
            self._set(name, _check_amount(getattr(self, name), name))
        self._set("gpus", check_gpus(self.gpus))
        self._set("constraints", constraint_rules.parse_all(self.constraints))
        self._set("variant", check_variant(self.variant, self.image))
        self._set("ports", port_rules.check_requests(self.ports))
        self._set("host_ports", port_rules.check_assigned(self.host_ports, self.ports))
        self._set("network", container_options.check_network(self.network))
        self._set("fetch", fetch_uri.check_all(self.fetch))
        self._set("health_check", HealthCheck.from_json(self.health_check))
        self._set("volumes", container_options.check_volumes(self.volumes))
        self._set("docker_parameters", container_options.check_parameters(self.docker_parameters))
        self._set("user", container_options.check_user(self.user))
        self._set("pull_credential", PullCredential.from_json(self.pull_credential))
        for name in ("privileged", "force_pull"):
            if not isinstance(getattr(self, name), bool):
                raise TaskSpecError(f"{name}: must be true or false, got {getattr(self, name)!r}")
        self._set("mig_profile", _check_mig_profile(self.mig_profile, self.gpus))
        _check_gang(self.gang, self.gang_size, self.rank, self.ports)
        if self.kill_grace is not None:
            self._set("kill_grace", _check_amount(self.kill_grace, "kill_grace"))
        if self.shared_gpu is not None and (not self.share or isinstance(self.shared_gpu, bool)
                                            or not isinstance(self.shared_gpu, int)
                                            or self.shared_gpu < 0):
            raise TaskSpecError(f"shared_gpu: {self.shared_gpu!r} is for a task asking for a "
                                "share of a GPU (gpus between 0 and 1), as an NVML index")
        self._check_command()

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def _check_command(self) -> None:
        if self.cmd is not None and self.args:
            raise TaskSpecError(f"task {self.id}: give either cmd or args, not both")
        if self.container == DOCKER and not self.image:
            raise TaskSpecError(f"task {self.id}: image: a DOCKER container needs an image")
        if self.container == MESOS and not self.image and self.cmd is None and not self.args:
            raise TaskSpecError(f"task {self.id}: cmd: a MESOS container without an image "
                                f"needs cmd or args")
        if self.container != DOCKER:
            for name in ("docker_parameters", "privileged"):
                if getattr(self, name):
                    raise TaskSpecError(f"task {self.id}: {name}: only for DOCKER containers")
            if self.network == BRIDGE:
                raise TaskSpecError(f"task {self.id}: network: BRIDGE is only for DOCKER "
                                    f"containers")
        if self.health_check is not None and self.health_check.port is None \
                and self.health_check.protocol != "COMMAND" \
                and (self.health_check.port_index or 0) >= len(self.ports):
            raise TaskSpecError(f"task {self.id}: health_check.port_index: "
                                f"{self.health_check.port_index or 0}, but the task has "
                                f"{len(self.ports)} port(s)")

    def pinned_to(self, variant: Mapping[str, Any]) -> "TaskSpec":
        """This task running `variant["image"]`, a variant checked by
        `check_variant` (once per variant: a round pins thousands of tasks, so
        the rest of the spec, already checked, is not checked again)."""
        pinned = object.__new__(TaskSpec)
        pinned.__dict__.update(self.__dict__, image=variant["image"], variant=variant)
        return pinned

    def placed(self, host_ports: tuple[Optional[int], ...], hostname: str) -> "TaskSpec":
        """This task with the host ports the scheduler took for it on `hostname`,
        and Marathon's variables for them (PORT0.., PORTS, PORT_<NAME>, HOST);
        the task's own environment wins over them, as in Marathon."""
        assigned = port_rules.check_assigned(host_ports, self.ports)
        env = {**port_rules.environment(self.ports, assigned), "HOST": hostname, **self.env}
        placed = object.__new__(TaskSpec)
        placed.__dict__.update(self.__dict__, host_ports=assigned, env=env)
        return placed

    def joined(self, env: Mapping[str, str]) -> "TaskSpec":
        """This gang member with its rendezvous (framework/tasks/rendezvous.py); the
        task's own environment wins, as with the port variables."""
        joined = object.__new__(TaskSpec)
        joined.__dict__.update(self.__dict__, env={**env, **self.env})
        return joined

    def on_shared_gpu(self, index: int, slots: int) -> "TaskSpec":
        """This task placed on the shared GPU of NVML index `index`, taking `slots` of
        the offer's gpu_shares_<index> resource."""
        placed = object.__new__(TaskSpec)
        placed.__dict__.update(self.__dict__, shared_gpu=index, share_slots=slots)
        return placed

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (constraints as Marathon lists), for the state store."""
        # field by field: asdict() deep-copies each value, and every launch pays for it
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["args"] = list(self.args)
        data["env"], data["labels"] = dict(self.env), dict(self.labels)
        data["constraints"] = [c.as_list() for c in self.constraints]
        for name in _COMPOUND:
            value = data.pop(name)
            if value:
                data[name] = [item.to_json() for item in value]
        data["host_ports"] = list(self.host_ports)
        data["docker_parameters"] = [list(p) for p in self.docker_parameters]
        data["health_check"] = self.health_check.to_json() if self.health_check else None
        data["pull_credential"] = self.pull_credential.to_json() if self.pull_credential else None
        for name, default in _PLAIN_DEFAULTS.items():
            if data[name] == default:
                del data[name]
        if self.variant is None:
            del data["variant"]
        else:
            data["variant"] = {**self.variant, "features": list(self.variant.get("features", []))}
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "TaskSpec":
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        return cls(**known)


# Fields whose items are typed (written out as lists of objects) and fields left
# out of the JSON at their defaults (a task without them stores what it did before).
_COMPOUND = ("ports", "fetch", "volumes")
_PLAIN_DEFAULTS = {"host_ports": [], "network": HOST, "health_check": None,
                   "docker_parameters": [], "privileged": False, "user": None,
                   "force_pull": False, "pull_credential": None, "kill_grace": None,
                   "shared_gpu": None, "share_slots": 0, "mig_profile": "", "gang": "",
                   "gang_size": 0, "rank": 0}


def _check_mig_profile(value: Any, gpus: int) -> str:
    try:
        profile = check_mig_profile(value, "mig_profile")
    except BadRequest as e:
        raise TaskSpecError(str(e).replace("'mig_profile'", "mig_profile:")) from None
    if profile and not gpus:
        raise TaskSpecError(f"mig_profile: {profile} asks for MIG devices, but gpus is 0 "
                            "(gpus is how many)")
    return profile


def _check_gang(gang: Any, size: Any, rank: Any, ports: tuple) -> None:
    if not isinstance(gang, str):
        raise TaskSpecError(f"gang: must be a string, got {gang!r}")
    for name, value in (("gang_size", size), ("rank", rank)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TaskSpecError(f"{name}: must be a whole number 0 or more, got {value!r}")
    if not gang:
        if size or rank:
            raise TaskSpecError("gang_size, rank: only for a member of a gang (gang names it)")
        return
    if size < 1 or rank >= size:
        raise TaskSpecError(f"rank: {rank} is not a rank of a gang of {size} (0..{size - 1})")
    if not ports or ports[0].host_port != 0:
        raise TaskSpecError("ports: a gang member asks for a host port first (rank 0's is "
                            "the rendezvous port, MASTER_PORT)")


def check_gpus(value: Any, name: str = "gpus") -> float:
    """A whole, non-negative number of GPUs (1.0 is 1), or a share of one shared GPU
    above 0 and below 1 (0.25); 1.5, -1, true and "1" are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TaskSpecError(f"{name}: must be a number of GPUs, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise TaskSpecError(f"{name}: must be a number of GPUs, got {value!r}")
    if value < 0:
        raise TaskSpecError(f"{name}: must be 0 or more, got {value!r}")
    if 0 < value < 1:
        return float(value)                 # a share of one shared GPU
    if isinstance(value, float) and not value.is_integer():
        raise TaskSpecError(f"{name}: {value!r} is neither a whole number of GPUs nor a share "
                            "of one GPU (a fraction below 1): a share never spans GPUs")
    return int(value)


def _check_id(value: Any, name: str) -> str:
    text = _check_text(value, name)
    if not text or text in (".", "..") or _BAD_ID_CHARACTERS.search(text):
        raise TaskSpecError(f"{name}: {value!r} is not a valid task id (non-empty, no '/', "
                            f"'\\', whitespace or control characters, not '.' or '..')")
    return text


def _check_text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TaskSpecError(f"{name}: must be a string, got {value!r}")
    return value


def _check_optional_text(value: Any, name: str) -> Optional[str]:
    return None if value is None else _check_text(value, name)


def _check_container(value: Any) -> str:
    kind = _check_text(value, "container").upper()
    if kind not in CONTAINER_TYPES:
        raise TaskSpecError(f"container: must be DOCKER or MESOS, got {value!r}")
    return kind


def _check_args(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not all(isinstance(a, str) for a in value):
        raise TaskSpecError(f"args: must be a list of strings, got {value!r}")
    return tuple(value)


def _check_mapping(value: Any, name: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TaskSpecError(f"{name}: must be an object of strings, got {value!r}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TaskSpecError(f"{name}: {key!r} must map a string to a string, got {item!r}")
    return dict(value)


_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def check_variant(value: Any, image: Optional[str]) -> Optional[dict]:
    """The pinned variant: image (the one to run) ending in @digest, digests, features."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TaskSpecError(f"variant: must be an object, got {value!r}")
    variant = dict(value)
    for key in ("image", "index", "indexDigest", "digest"):
        if not isinstance(variant.get(key), str):
            raise TaskSpecError(f"variant.{key}: must be a string, got {variant.get(key)!r}")
    for key in ("indexDigest", "digest"):
        if not _DIGEST.fullmatch(variant[key]):
            raise TaskSpecError(f"variant.{key}: {variant[key]!r} is not sha256:<64 hex digits>")
    if variant["image"] != image or not image.endswith("@" + variant["digest"]):
        raise TaskSpecError(f"variant.image: {variant['image']!r} must be the task's image "
                            f"{image!r}, pinned to the variant's digest")
    features = variant.get("features", [])
    if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
        raise TaskSpecError(f"variant.features: must be a list of strings, got {features!r}")
    return variant


def _check_amount(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise TaskSpecError(f"{name}: must be a number 0 or more, got {value!r}")
    return float(value)
