"""What the API lets in: who may call it, how big a body may be, and which
Docker settings an app may not use because they hand it the host.

An app runs with exactly the GPUs it was granted. Docker options such as
`--privileged`, `--device`, `-v`, `--cap-add`, `--pid=host` or `--gpus` would
let it walk around that (or around the whole machine), so they are refused
with a 422 that names the field, unless the operator lists them in
`--allow_docker_parameters`.
"""
import base64
import hmac
from dataclasses import dataclass, field
from pathlib import Path
from typing import FrozenSet, Iterable, Optional

from common.errors import UserError

DEFAULT_MAX_BODY_BYTES = 1024 * 1024

# Parameters that grant host access whatever their value.
ALWAYS_HOST_ACCESS = frozenset({
    "privileged", "device", "device-cgroup-rule", "device-read-bps", "device-read-iops",
    "device-write-bps", "device-write-iops", "gpus", "runtime",
    "volume", "v", "mount", "volumes-from", "volume-driver",
    "cap-add", "security-opt", "cgroup-parent", "sysctl",
})
# Parameters that share a host namespace (or another container's) by value.
NAMESPACE_PARAMETERS = frozenset({"pid", "ipc", "network", "net", "uts", "userns", "cgroupns"})
HOST_VOLUMES = "volume"          # the allow-list name that also admits container.volumes hostPath
PRIVILEGED = "privileged"        # ... and the one that admits docker.privileged: true


def parameter_name(key: str) -> str:
    """`--cap-add` and `cap-add` name the same Docker option."""
    return key.strip().lstrip("-").lower()


def grants_host_access(key: str, value: str) -> bool:
    name = parameter_name(key)
    if name in ALWAYS_HOST_ACCESS:
        return True
    if name in NAMESPACE_PARAMETERS:
        target = value.strip().lower()
        return target == "host" or (name in ("pid", "ipc") and target.startswith("container:"))
    return False


@dataclass(frozen=True)
class DockerPolicy:
    """The operator's exceptions (parameter names, as in `--allow_docker_parameters`)."""
    allowed: FrozenSet[str] = field(default_factory=frozenset)

    @classmethod
    def from_names(cls, names: Optional[Iterable[str]]) -> "DockerPolicy":
        out = set()
        for item in names or ():
            out.update(parameter_name(n) for n in item.split(",") if n.strip())
        unknown = sorted(out - ALWAYS_HOST_ACCESS - NAMESPACE_PARAMETERS)
        if unknown:       # a typo would otherwise allow nothing, silently
            raise UserError(f"--allow_docker_parameters: {', '.join(unknown)}: not a Docker "
                            f"option that is refused by default (those are: "
                            f"{', '.join(sorted(ALWAYS_HOST_ACCESS | NAMESPACE_PARAMETERS))})")
        return cls(frozenset(out))

    def refuses_parameter(self, key: str, value: str) -> bool:
        return grants_host_access(key, value) and parameter_name(key) not in self.allowed

    def refuses_privileged(self) -> bool:
        return PRIVILEGED not in self.allowed

    def refuses_host_volumes(self) -> bool:
        return HOST_VOLUMES not in self.allowed


def refusal(what: str) -> str:
    return (f"{what} grants the container access to the host; refused unless the operator "
            f"allows it (mesos-gpu framework --allow_docker_parameters)")


class Authenticator:
    """HTTP basic auth (`user:pass`) or a bearer token; none configured: open
    (the server then listens on 127.0.0.1 unless told otherwise)."""

    def __init__(self, credentials: Optional[str] = None, token: Optional[str] = None) -> None:
        if credentials is not None and ":" not in credentials:
            raise UserError("--http_credentials must be user:password")
        self._basic = (base64.b64encode(credentials.encode()).decode()
                       if credentials is not None else None)
        self._token = token

    @classmethod
    def from_args(cls, credentials: Optional[str], token_file: Optional[str]) -> "Authenticator":
        token = None
        if token_file:
            try:
                token = Path(token_file).read_text().strip()
            except OSError as e:
                raise UserError(f"--http_token_file {token_file}: {e.strerror}") from e
            if not token:
                raise UserError(f"--http_token_file {token_file}: the file is empty")
        return cls(credentials, token)

    @property
    def enabled(self) -> bool:
        return self._basic is not None or self._token is not None

    def allows(self, authorization: Optional[str]) -> bool:
        if not self.enabled:
            return True
        scheme, _, value = (authorization or "").strip().partition(" ")
        value = value.strip()
        if self._basic is not None and scheme.lower() == "basic":
            return hmac.compare_digest(value.encode(), self._basic.encode())
        if self._token is not None and scheme.lower() in ("bearer", "token"):
            return hmac.compare_digest(value.encode(), self._token.encode())
        return False
