"""A client of the registry HTTP API v2 (Docker Distribution, OCI distribution):
manifests and blobs, read-only, with the registry's own authentication (Basic or
Bearer tokens; credentials from a Docker client config.json resolved as the Docker SDK
does: `credHelpers`, `credsStore`, then `auths`). Every answer is checked against its
digest; errors are RegistryError with `transient` saying whether asking again may help.
More: ARCHITECTURE.md, "The registry client".
"""
import base64
import hashlib
import json
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Sequence, Tuple

from common.errors import UserError
from framework.images.image_ref import DOCKER_HUB, ImageRef

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
# An index is only returned to an Accept that names its type (else Distribution
# answers with one of its entries, or 404 for an OCI index).
ALL_TYPES = INDEX_TYPES + MANIFEST_TYPES
DEFAULT_TIMEOUT = 10.0
MAX_DOCUMENT = 4 * 2**20            # manifests and configs are small; refuse more
_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com"}


class RegistryError(UserError):
    """A registry could not answer (or answered no). `status`: the HTTP status,
    if there was one; `transient`: asking again later may help."""

    def __init__(self, message: str, status: Optional[int] = None, transient: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.transient = transient


# -- credentials -----------------------------------------------------------------------------

def _host_key(key: str) -> str:
    """A config.json `auths` key ("https://index.docker.io/v1/", "host:5000") as host[:port]."""
    key = re.sub(r"^[a-z]+://", "", key.strip()).split("/", 1)[0]
    return DOCKER_HUB if key in _HUB_ALIASES else key


@dataclass(frozen=True)
class Credentials:
    """Registry credentials read from a Docker client config file."""
    source: str = ""
    users: Mapping[str, Tuple[str, str]] = field(default_factory=dict)
    unsupported: Mapping[str, str] = field(default_factory=dict)   # host -> why not
    # the config's credsStore / credHelpers, when it has any (resolved by the Docker SDK)
    helpers: Optional[Mapping[str, object]] = field(default=None, compare=False)

    def for_registry(self, registry: str) -> Optional[Tuple[str, str]]:
        host = _host_key(registry)
        if self.helpers:
            found = self._from_helper(host)
            if found is not None:
                return found
        if host in self.users:
            return self.users[host]
        if host in self.unsupported:
            raise RegistryError(f"registry {registry}: its credentials in {self.source} "
                                f"{self.unsupported[host]}; put user and password in "
                                f"'auths' instead")
        return None


    def _from_helper(self, host: str) -> Optional[Tuple[str, str]]:
        """What a credential helper gives for `host` (None: it has nothing for it)."""
        import docker.auth            # the SDK's resolution: the helper, else `auths`
        import docker.errors
        try:
            found = docker.auth.AuthConfig(dict(self.helpers)).resolve_authconfig(
                None if host == DOCKER_HUB else host)
        except docker.errors.DockerException as e:
            raise RegistryError(f"registry {host}: its credential helper in {self.source} "
                                f"failed: {e}", transient=True) from None
        fields = {str(k).lower(): v for k, v in (found or {}).items()}
        if fields.get("identitytoken"):
            raise RegistryError(f"registry {host}: its credentials in {self.source} are an "
                                f"identity token (OAuth2 refresh), which is not supported")
        if fields.get("username") is not None and fields.get("password") is not None:
            return str(fields["username"]), str(fields["password"])
        return None


def docker_config_path(env: Mapping[str, str] = os.environ) -> str:
    """Where Docker clients look: $DOCKER_CONFIG/config.json, else ~/.docker/config.json."""
    base = env.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    return os.path.join(base, "config.json")


def load_credentials(path: Optional[str], required: bool = False) -> Credentials:
    """The credentials in a Docker client config file. A missing file is no
    credentials, unless `required` (the operator named it)."""
    if not path:
        return Credentials()
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        if required:
            raise UserError(f"registry credentials {path}: no such file") from None
        return Credentials(source=path)
    except (OSError, ValueError) as e:
        raise UserError(f"registry credentials {path}: not a readable Docker config "
                        f"JSON file ({e})") from None
    if not isinstance(data, dict):
        raise UserError(f"registry credentials {path}: not a JSON object")
    users: Dict[str, Tuple[str, str]] = {}
    unsupported: Dict[str, str] = {}
    auths = data.get("auths") or {}
    if not isinstance(auths, dict):
        raise UserError(f"registry credentials {path}: 'auths' is not an object")
    for key, entry in auths.items():
        host = _host_key(key)
        if not isinstance(entry, dict):
            raise UserError(f"registry credentials {path}: auths.{key} is not an object")
        if entry.get("auth"):
            try:
                user, sep, password = base64.b64decode(entry["auth"]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                sep = ""
            if not sep:
                raise UserError(f"registry credentials {path}: auths.{key}.auth is not "
                                f"base64 of 'user:password'")
            users[host] = (user, password)
        elif entry.get("username") is not None and entry.get("password") is not None:
            users[host] = (str(entry["username"]), str(entry["password"]))
        elif entry.get("identitytoken"):
            unsupported[host] = "are an identity token (OAuth2 refresh), which is not supported"
    helpers = None
    if data.get("credHelpers") or data.get("credsStore"):
        if not isinstance(data.get("credHelpers") or {}, dict) or \
                not isinstance(data.get("credsStore") or "", str):
            raise UserError(f"registry credentials {path}: 'credHelpers' must be an object "
                            f"and 'credsStore' a name")
        helpers = {"credHelpers": dict(data.get("credHelpers") or {}),
                   "credsStore": data.get("credsStore") or None}
    return Credentials(path, users, unsupported, helpers)


# -- answers -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Document:
    """A manifest or index as the registry served it."""
    media_type: str
    digest: str
    raw: bytes


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _challenge(header: str) -> Tuple[str, Dict[str, str]]:
    scheme, _, rest = (header or "").strip().partition(" ")
    return scheme.lower(), dict(re.findall(r'(\w+)="([^"]*)"', rest))


def _registry_message(body: bytes) -> str:
    """Distribution's `{"errors": [{"code", "message", "detail"}]}` as one line."""
    try:
        errors = json.loads(body).get("errors") or []
        parts = [f"{e.get('code', '?')}: {e.get('message', '')}" for e in errors]
        return "; ".join(parts) if parts else body[:200].decode(errors="replace")
    except (ValueError, AttributeError):
        return body[:200].decode(errors="replace").strip()


class RegistryClient:
    """Thread-safe; keeps bearer tokens until they expire."""

    def __init__(self, credentials: Optional[Credentials] = None,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        self.credentials = credentials or Credentials()
        self.timeout = timeout
        self._lock = threading.Lock()
        self._tokens: Dict[Tuple[str, str, str], Tuple[str, float]] = {}
        self._schemes: Dict[Tuple[str, str], Tuple[str, Dict[str, str]]] = {}

    # -- public ----------------------------------------------------------------------------------
    def manifest(self, ref: ImageRef, reference: Optional[str] = None,
                 accept: Sequence[str] = ALL_TYPES) -> Document:
        """GET a manifest or index by tag or digest, its digest checked."""
        reference = reference or ref.reference
        status, headers, body = self._call("GET", ref, f"/manifests/{reference}",
                                           {"Accept": ", ".join(accept)})
        if status != 200:
            raise self._failure(ref, f"manifest {reference}", status, body)
        digest = sha256(body)
        announced = headers.get("Docker-Content-Digest")
        if announced and announced != digest:
            raise RegistryError(f"registry {ref.registry}: {ref.repository}:{reference} came "
                                f"back with digest {digest}, not the {announced} it announced")
        if reference.startswith("sha256:") and reference != digest:
            raise RegistryError(f"registry {ref.registry}: {ref.repository}@{reference} came "
                                f"back with digest {digest}")
        media_type = (headers.get("Content-Type") or "").split(";")[0].strip()
        return Document(media_type, digest, body)

    def manifest_digest(self, ref: ImageRef, reference: Optional[str] = None,
                        accept: Sequence[str] = ALL_TYPES) -> str:
        """HEAD a manifest: the digest the registry has under this tag now."""
        reference = reference or ref.reference
        status, headers, _ = self._call("HEAD", ref, f"/manifests/{reference}",
                                        {"Accept": ", ".join(accept)})
        digest = headers.get("Docker-Content-Digest") if status == 200 else None
        if not digest:   # no digest said, or an error without a body to say why: GET
            return self.manifest(ref, reference, accept).digest
        return digest

    def blob(self, ref: ImageRef, digest: str) -> bytes:
        status, _, body = self._call("GET", ref, f"/blobs/{digest}", {})
        if status != 200:
            raise self._failure(ref, f"blob {digest}", status, body)
        if sha256(body) != digest:
            raise RegistryError(f"registry {ref.registry}: blob {digest} of {ref.repository} "
                                f"came back with digest {sha256(body)}")
        return body

    # -- HTTP and authentication -------------------------------------------------------------
    def _call(self, method: str, ref: ImageRef, path: str, headers: Dict[str, str]):
        url = f"{ref.base_url}/v2/{ref.repository}{path}"
        scope = f"repository:{ref.repository}:pull"
        auth = self._known_authorization(ref, scope)
        status, answer, body = self._send(method, url, ref, {**headers, **auth})
        if status == 401:
            auth = self._authenticate(ref, scope, answer.get("WWW-Authenticate", ""))
            status, answer, body = self._send(method, url, ref, {**headers, **auth})
            if status == 401:
                who = self.credentials.for_registry(ref.registry)
                raise RegistryError(
                    f"registry {ref.registry} refused the credentials of user {who[0]!r} "
                    f"(from {self.credentials.source}) for {ref.repository}: "
                    f"{_registry_message(body)}" if who else
                    f"registry {ref.registry} asks for credentials for {ref.repository} and "
                    f"{self._no_credentials()}", status=401)
        return status, answer, body

    def _no_credentials(self) -> str:
        if self.credentials.source:
            return f"{self.credentials.source} has none for it"
        return "none are configured (give a Docker config.json with 'auths')"

    def _send(self, method: str, url: str, ref: ImageRef, headers: Dict[str, str]):
        request = urllib.request.Request(url, method=method, headers={
            "User-Agent": "mesos-gpu", **headers})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as r:
                body = r.read(MAX_DOCUMENT + 1)
                if len(body) > MAX_DOCUMENT:
                    raise RegistryError(f"registry {ref.registry} answered more than "
                                        f"{MAX_DOCUMENT // 2**20} MiB for {url}: not a "
                                        f"manifest or config")
                return r.status, r.headers, body
        except urllib.error.HTTPError as e:
            try:
                body = e.read(65536)
            except OSError:
                body = b""
            return e.code, e.headers, body
        except (socket.timeout, TimeoutError):
            raise RegistryError(f"registry {ref.registry} did not answer within "
                                f"{self.timeout:g} s", transient=True) from None
        except urllib.error.URLError as e:
            reason = getattr(e.reason, "strerror", None) or str(e.reason)
            raise RegistryError(f"registry {ref.registry} is unreachable: {reason}",
                                transient=True) from None
        except (ConnectionError, OSError) as e:
            raise RegistryError(f"registry {ref.registry}: connection failed: "
                                f"{getattr(e, 'strerror', None) or e}", transient=True) from None

    def _failure(self, ref: ImageRef, what: str, status: int, body: bytes) -> RegistryError:
        message = _registry_message(body) if body else "no body"
        transient = status >= 500 or status == 429
        if status == 404:
            text = f"{ref.repository}: {what} not found in registry {ref.registry} ({message})"
        elif status == 403:
            text = f"registry {ref.registry} denies {what} of {ref.repository} ({message})"
        else:
            text = f"registry {ref.registry} answered {status} for {what} of {ref.repository} " \
                   f"({message})"
        return RegistryError(text, status=status, transient=transient)

    def _known_authorization(self, ref: ImageRef, scope: str) -> Dict[str, str]:
        """The header a registry that challenged before will want, without a 401 first."""
        with self._lock:
            known = self._schemes.get((ref.registry, scope))
        if known is None:
            return {}
        scheme, params = known
        if scheme == "basic":
            return self._basic(ref)
        with self._lock:
            token = self._tokens.get((params.get("realm", ""), params.get("service", ""), scope))
        if token and token[1] > time.monotonic():
            return {"Authorization": f"Bearer {token[0]}"}
        return {}

    def _authenticate(self, ref: ImageRef, scope: str, header: str) -> Dict[str, str]:
        scheme, params = _challenge(header)
        with self._lock:
            self._schemes[(ref.registry, scope)] = (scheme, params)
        if scheme == "basic":
            auth = self._basic(ref)
            if not auth:
                raise RegistryError(f"registry {ref.registry} asks for a user and password "
                                    f"(HTTP basic) and {self._no_credentials()}", status=401)
            return auth
        if scheme == "bearer" and params.get("realm"):
            return {"Authorization": f"Bearer {self._token(ref, scope, params)}"}
        raise RegistryError(f"registry {ref.registry} asks for authentication this client "
                            f"does not support: {header or 'no WWW-Authenticate header'}",
                            status=401)

    def _basic(self, ref: ImageRef) -> Dict[str, str]:
        who = self.credentials.for_registry(ref.registry)
        if not who:
            return {}
        pair = base64.b64encode(f"{who[0]}:{who[1]}".encode()).decode()
        return {"Authorization": f"Basic {pair}"}

    def _token(self, ref: ImageRef, scope: str, params: Mapping[str, str]) -> str:
        realm, service = params["realm"], params.get("service", "")
        query = {"scope": scope}
        if service:
            query["service"] = service
        url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(query)
        status, _, body = self._send("GET", url, ref, self._basic(ref))
        if status != 200:
            who = self.credentials.for_registry(ref.registry)
            raise RegistryError(
                f"token service {realm} of registry {ref.registry} answered {status} for "
                f"{scope}" + (f" with the credentials of user {who[0]!r}" if who else
                              " without credentials") + f": {_registry_message(body)}",
                status=status, transient=status >= 500)
        try:
            answer = json.loads(body)
            token = answer.get("token") or answer.get("access_token")
            lifetime = float(answer.get("expires_in") or 60)
        except (ValueError, AttributeError, TypeError):
            token = None
        if not token:
            raise RegistryError(f"token service {realm} of registry {ref.registry} answered "
                                f"without a token", transient=True)
        with self._lock:
            # renewed a little before it runs out
            self._tokens[(realm, service, scope)] = (token, time.monotonic() + lifetime * 0.9)
        return token
