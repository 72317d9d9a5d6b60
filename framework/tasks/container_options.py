"""What an app may set on its container beyond the command and resources:
volumes, Docker parameters, privileged mode, the user, the network.

They are checked here for shape; whether the operator allows the ones that
grant host access (host volumes, privileged, parameters such as --cap-add) is
decided by the API before a task is ever made
(framework.http.security.DockerPolicy). The executor applies them:
Docker gets them as `docker create` options, runc as OCI mounts and the
process user, a host process as bind mounts in its mount namespace.
"""
import posixpath
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Tuple

from common.errors import UserError

HOST, BRIDGE = "HOST", "BRIDGE"
NETWORKS = (HOST, BRIDGE)
MODES = ("RO", "RW")
# Docker options the executor sets itself: a parameter may not change them
# (the container's name and labels are how the agent daemon finds it, its
# lifecycle is the executor's, its devices are the grant's).
RESERVED_PARAMETERS = frozenset({
    "name", "rm", "detach", "d", "restart", "cidfile", "label-file", "interactive", "i",
    "tty", "t", "attach", "a", "network", "net", "publish", "p", "publish-all", "P"})
RESERVED_LABEL_PREFIX = "mesos-gpu."
_USER = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*(:[A-Za-z0-9_.][A-Za-z0-9_.-]*)?")


class ContainerOptionError(UserError):
    """An option the executor cannot apply as written; the message names it."""


@dataclass(frozen=True)
class Volume:
    """A host path in the container. A relative `host_path` is in the task's
    sandbox; a relative `container_path` is under the sandbox as the task sees it."""
    container_path: str
    host_path: str
    mode: str = "RW"

    def __post_init__(self) -> None:
        for name in ("container_path", "host_path"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value or "\0" in value:
                raise ContainerOptionError(f"volumes: {name} must be a non-empty path, "
                                           f"got {value!r}")
            if not value.startswith("/") and ".." in value.split("/"):
                raise ContainerOptionError(f"volumes: {name} {value!r} leaves the sandbox")
        if self.mode not in MODES:
            raise ContainerOptionError(f"volumes: mode must be RO or RW, got {self.mode!r}")

    @property
    def read_only(self) -> bool:
        return self.mode == "RO"

    def target(self, sandbox_mount: str) -> str:
        return posixpath.normpath(posixpath.join(sandbox_mount, self.container_path))

    def to_json(self) -> dict:
        return {"container_path": self.container_path, "host_path": self.host_path,
                "mode": self.mode}

    @classmethod
    def from_json(cls, data: Any) -> "Volume":
        if isinstance(data, Volume):
            return data
        if not isinstance(data, Mapping):
            raise ContainerOptionError(f"volumes: each must be an object, got {data!r}")
        return cls(**{k: data[k] for k in ("container_path", "host_path", "mode") if k in data})


def parameter_name(key: str) -> str:
    return key.strip().lstrip("-").lower()


def check_parameters(value: Any) -> Tuple[Tuple[str, str], ...]:
    """Docker parameters as (key, value) pairs, without those the executor owns."""
    if value is None:
        return ()
    out = []
    for item in value:
        if isinstance(item, Mapping):
            item = (item.get("key"), item.get("value"))
        if len(item) != 2 or not all(isinstance(x, str) for x in item) or not item[0].strip():
            raise ContainerOptionError(f"docker parameters: each must be a key and a value, "
                                       f"got {item!r}")
        key, text = item
        if reserved_parameter(key, text):
            raise ContainerOptionError(f"docker parameter {key}={text}: set by the executor, "
                                       f"not by an app")
        out.append((key, text))
    return tuple(out)


def reserved_parameter(key: str, value: str) -> bool:
    name = parameter_name(key)
    if name in RESERVED_PARAMETERS:
        return True
    return name in ("label", "l") and value.strip().startswith(RESERVED_LABEL_PREFIX)


def check_user(value: Any) -> Optional[str]:
    if value is None:
        return None
    if not isinstance(value, str) or not _USER.fullmatch(value):
        raise ContainerOptionError(f"user: {value!r} is not a user name or uid[:gid]")
    return value


def check_network(value: Any) -> str:
    network = str(value or HOST).upper()
    if network not in NETWORKS:
        raise ContainerOptionError(f"network: must be HOST or BRIDGE, got {value!r}")
    return network


def check_volumes(value: Any) -> Tuple[Volume, ...]:
    if value is None:
        return ()
    return tuple(Volume.from_json(item) for item in value)


@dataclass(frozen=True)
class PullCredential:
    """The registry user and secret an app's image is pulled with (from its
    `container.docker.pullConfig` secret, framework.images.pull_config), for that
    image's pull only. Its secret is written out only in TaskInfo.data and the
    framework's state store, never in a log line, a repr or the API."""
    principal: str
    secret: str

    def __repr__(self) -> str:         # a log line or a traceback never shows the secret
        return f"PullCredential({self.principal!r}, secret hidden)"

    def to_json(self) -> dict:
        return {"principal": self.principal, "secret": self.secret}

    @classmethod
    def from_json(cls, value: Any) -> Optional["PullCredential"]:
        if value is None or isinstance(value, PullCredential):
            return value
        if not isinstance(value, Mapping) or not isinstance(value.get("principal"), str) \
                or not value.get("principal") or not isinstance(value.get("secret"), str):
            raise ContainerOptionError("pull_credential: must be {\"principal\": user, "
                                       "\"secret\": password}, both strings")
        return cls(value["principal"], value["secret"])
