"""What the API lets in: who may call it (by default the credentials the framework made
at its first start in `<state_dir>/http_credentials`, mode 0600: every task with host
networking shares 127.0.0.1), how it is reached (HTTP and, with `--https_port`, TLS
from PEM files: `TlsSettings`), how big a body may be, and which Docker settings an app
may not use because they hand it the host (refused with a 422 naming the field unless
`--allow_docker_parameters` lists them). Why each: ARCHITECTURE.md, "Who may call the
API"."""
import argparse
import base64
import hmac
import logging
import os
import secrets
import ssl
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import FrozenSet, Iterable, Optional

from common.errors import UserError

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_MAX_CONNECTIONS = 512
DEFAULT_REQUEST_TIMEOUT = 30.0       # Jetty's idle timeout, which Marathon keeps
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
    # --allow_docker_credential: apps may write container.docker.credential
    allow_docker_credential: bool = False

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


def add_arguments(p: argparse.ArgumentParser) -> None:
    """TLS and the servers' bounds."""
    p.add_argument("--https_port", type=int, metavar="PORT",
                   help="serve the API, the dashboard and leader forwarding over TLS on this "
                        "port of --http_address too (Marathon's flag; 0 picks a free one); "
                        "needs --ssl_cert and --ssl_key")
    p.add_argument("--ssl_cert", metavar="FILE",
                   help="PEM certificate chain of the HTTPS server (Marathon's "
                        "--ssl_keystore_path is a Java keystore; PEM is what openssl makes)")
    p.add_argument("--ssl_key", metavar="FILE", help="PEM private key of --ssl_cert")
    p.add_argument("--ssl_ca_file", metavar="FILE",
                   help="CA certificates an instance checks the leader's certificate with "
                        "when it forwards to it (--zk); default: the system's CAs and "
                        "--ssl_cert itself (one self-signed certificate shared by all)")
    p.add_argument("--disable_http", action="store_true",
                   help="no plain HTTP: HTTPS only (Marathon's flag; needs --https_port)")
    p.add_argument("--http_max_connections", type=int, default=DEFAULT_MAX_CONNECTIONS,
                   metavar="N", help="connections each server holds at once (one thread "
                                     "each); beyond them: 503. Default "
                                     f"{DEFAULT_MAX_CONNECTIONS}")
    p.add_argument("--http_request_timeout", type=float, default=DEFAULT_REQUEST_TIMEOUT,
                   metavar="SECONDS", help="a request (head and body) must arrive whole within "
                                           "this, counted from when the server waits for it "
                                           "(an idle kept-alive connection is closed then); "
                                           f"default {DEFAULT_REQUEST_TIMEOUT:g}")


@dataclass(frozen=True)
class TlsSettings:
    """PEM files of the HTTPS server and of the CAs it checks other instances with."""
    cert: str
    key: str
    ca_file: Optional[str] = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Optional["TlsSettings"]:
        port = getattr(args, "https_port", None)
        cert, key = getattr(args, "ssl_cert", None), getattr(args, "ssl_key", None)
        if port is None:
            given = [f for f, v in (("--ssl_cert", cert), ("--ssl_key", key),
                                    ("--ssl_ca_file", getattr(args, "ssl_ca_file", None)),
                                    ("--disable_http", getattr(args, "disable_http", False)))
                     if v]
            if given:
                raise UserError(f"{', '.join(given)}: only with --https_port (HTTPS is off)")
            return None
        if not 0 <= port <= 65535:
            raise UserError(f"--https_port must be 0..65535, got {port}")
        if not cert or not key:
            raise UserError("--https_port needs --ssl_cert FILE and --ssl_key FILE (PEM)")
        settings = cls(cert, key, getattr(args, "ssl_ca_file", None))
        settings.server_context()            # refused now, naming the file, not at a request
        settings.client_context()
        return settings

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert, self.key)
        except FileNotFoundError as e:
            raise UserError(f"--ssl_cert {self.cert} --ssl_key {self.key}: {e.filename}: "
                            f"{e.strerror}") from None
        except (ssl.SSLError, OSError) as e:
            raise UserError(f"--ssl_cert {self.cert} --ssl_key {self.key}: not a PEM "
                            f"certificate chain and its private key ({e})") from None
        return context

    def client_context(self) -> ssl.SSLContext:
        """What an instance checks the leader it forwards to with: the name it has in
        ZooKeeper (host:port) must be in the leader's certificate."""
        try:
            if self.ca_file:
                return ssl.create_default_context(cafile=self.ca_file)
            context = ssl.create_default_context()
            context.load_verify_locations(cafile=self.cert)
            return context
        except (ssl.SSLError, OSError) as e:
            raise UserError(f"--ssl_ca_file {self.ca_file or self.cert}: no CA certificates "
                            f"in it ({e})") from None
