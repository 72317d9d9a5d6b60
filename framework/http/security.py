"""What the API lets in: who may call it, how big a body may be, and which
Docker settings an app may not use because they hand it the host.

Who may call it: by default only a caller with the credentials the framework
made at its first start (HTTP basic auth, user `marathon`, a random password)
in `<state_dir>/http_credentials`, mode 0600, in the `user:password` form
Marathon clients take (`MARATHON_AUTH=$(cat ...)`). The API listens on
127.0.0.1, but every task with host networking (Marathon's default) shares
that address; without credentials a task could create apps, GPUs and host
access included. `--http_credentials`/`--http_token_file` choose others;
`--http_open` serves without any (the operator's explicit choice).

An app runs with exactly the GPUs it was granted. Docker options such as
`--privileged`, `--device`, `-v`, `--cap-add`, `--pid=host` or `--gpus` would
let it walk around that (or around the whole machine), so they are refused
with a 422 that names the field, unless the operator lists them in
`--allow_docker_parameters`.
"""
import base64
import hmac
import logging
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import FrozenSet, Iterable, Optional

from common.errors import UserError

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
CREDENTIALS_FILE = "http_credentials"
DEFAULT_USER = "marathon"

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
    # --pull_config_dir: where the files of apps' pullConfig secrets are (None: refused)
    pull_config_dir: Optional[str] = None

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
    """HTTP basic auth (`user:pass`) or a bearer token (`Bearer <t>`, or
    `token=<t>` as DC/OS clients send it); none configured: open."""

    def __init__(self, credentials: Optional[str] = None, token: Optional[str] = None,
                 source: str = "") -> None:
        if credentials is not None and ":" not in credentials:
            raise UserError("--http_credentials must be user:password")
        self._basic = (base64.b64encode(credentials.encode()).decode()
                       if credentials is not None else None)
        self._token = token
        self.credentials = credentials
        self.source = source

    @classmethod
    def from_state_dir(cls, state_dir: str) -> "Authenticator":
        """Basic auth with `<state_dir>/http_credentials`, made at the first start."""
        path = os.path.join(state_dir, CREDENTIALS_FILE)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return cls(_read_credentials(path), source=path)
        except OSError as e:
            raise UserError(f"{path}: cannot create the API credentials: {e.strerror}") from e
        credentials = f"{DEFAULT_USER}:{secrets.token_urlsafe(24)}"
        try:
            os.write(fd, (credentials + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        log.info("made API credentials (user %s) in %s, mode 0600", DEFAULT_USER, path)
        return cls(credentials, source=path)

    def describe(self) -> str:
        if self._basic is not None:
            where = f" from {self.source}" if self.source else ""
            return f"HTTP basic auth{where}"
        if self._token is not None:
            return "bearer token"
        return "NO authentication (--http_open): any local process can change apps"

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

    def authorization(self) -> Optional[str]:
        """The Authorization header this authenticator lets in (None: open): what
        an instance sends to another one (framework.process.event_relay)."""
        if self._basic is not None:
            return f"Basic {self._basic}"
        return f"Bearer {self._token}" if self._token is not None else None

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
        if self._token is not None:
            if scheme.lower().startswith("token=") and not value:
                scheme, value = "token", scheme[len("token="):]
            if scheme.lower() in ("bearer", "token"):
                return hmac.compare_digest(value.encode(), self._token.encode())
        return False


def _read_credentials(path: str) -> str:
    """The `user:password` in a credentials file the framework made; refused
    when others could read it or it is not in that form."""
    try:
        info = os.stat(path)
        with open(path) as f:
            text = f.read().strip()
    except OSError as e:
        raise UserError(f"{path}: cannot read the API credentials: {e.strerror}") from e
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO) or info.st_uid != os.getuid():
        raise UserError(f"{path}: the API credentials must be readable by this user only "
                        f"(chmod 600 {path}; owner uid {os.getuid()})")
    if ":" not in text or not text.split(":", 1)[0] or not text.split(":", 1)[1]:
        raise UserError(f"{path}: expected one line user:password")
    return text
