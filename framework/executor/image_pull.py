"""A task's image brought onto this agent before its container is made, as Mesos's
Docker containerizer does it (DOCKER tasks and MESOS tasks with an image alike): the
CUDA check from the registry first, the engine's pull with progress, bounded by
--pull_timeout and stopped by a kill. Why the engine joins concurrent pulls and how
credentials are found: ARCHITECTURE.md, "Pulling a task's image"."""
import base64
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Mapping, Optional

import docker
import docker.auth
import docker.errors

from common.errors import UserError
from framework.executor.launch_errors import TaskFailure
from framework.images import image_config, image_ref
from framework.images.registry_client import Credentials, RegistryClient, RegistryError, \
    docker_config_path
from framework.tasks.task_spec import TaskSpec
from volumes import image_rules

log = logging.getLogger(__name__)

PROGRESS_INTERVAL = 1.0                # seconds between two progress updates at most once
COMPAT_PACKAGE_ENV = "NV_CUDA_COMPAT_PACKAGE"   # NVIDIA's images name their cuda-compat package
DONE_STATES = ("download complete", "verifying checksum", "extracting", "pull complete",
               "already exists")


@dataclass(frozen=True)
class RegistryAuth:
    """The credentials for one registry and where they came from (never the secret's text)."""
    registry: str
    source: str
    username: Optional[str] = None
    password: Optional[str] = None
    identity_token: Optional[str] = None

    def engine_header(self) -> Dict[str, str]:
        if self.identity_token:
            data = {"identitytoken": self.identity_token, "serveraddress": self.registry}
        elif self.username is not None:
            data = {"username": self.username, "password": self.password or "",
                    "serveraddress": self.registry}
        else:
            return {}
        return {"X-Registry-Auth": base64.urlsafe_b64encode(json.dumps(data).encode()).decode()}

    def registry_credentials(self) -> Optional[Credentials]:
        """For the manifest read; None when they are of a kind it cannot use."""
        if self.identity_token:
            return None
        users = {self.registry: (self.username, self.password or "")} \
            if self.username is not None else {}
        return Credentials(source=self.source, users=users)

    def __repr__(self) -> str:       # no secret in a traceback or a log line either
        return f"RegistryAuth({self.registry!r}, from {self.source})"


def resolve_auth(ref: image_ref.ImageRef, spec: TaskSpec,
                 config_path: Optional[str] = None) -> RegistryAuth:
    """The task's own credential when it has one, else the agent's Docker config's."""
    if spec.pull_credential is not None:
        return RegistryAuth(ref.registry, "the app's pullConfig secret",
                            spec.pull_credential.principal, spec.pull_credential.secret)
    path = config_path or docker_config_path()
    if not os.path.exists(path):
        return RegistryAuth(ref.registry, f"{path} (none)")
    sdk_registry = ref.registry if ref.registry != image_ref.DOCKER_HUB else None
    try:
        found = docker.auth.load_config(config_path=path).resolve_authconfig(sdk_registry)
    except docker.errors.DockerException as e:
        raise TaskFailure(f"image {spec.image}: the credentials for registry {ref.registry} "
                          f"in {path} cannot be read: {e}", retry=True) from None
    if not found:
        return RegistryAuth(ref.registry, f"{path} (none for this registry)")
    fields = {str(k).lower(): v for k, v in found.items()}
    return RegistryAuth(ref.registry, path, fields.get("username"), fields.get("password"),
                        fields.get("identitytoken"))


def present(client: docker.DockerClient, image: str) -> bool:
    try:
        client.api.inspect_image(image)
        return True
    except docker.errors.ImageNotFound:
        return False
    except docker.errors.DockerException as e:
        raise TaskFailure(f"image {image}: the Docker engine cannot say whether it has it: "
                          f"{getattr(e, 'explanation', None) or e}", retry=True) from None


class ImagePull:
    """One task's pull: read the registry, check, have the engine pull; cancellable."""

    def __init__(self, client: docker.DockerClient, spec: TaskSpec, agent_name: str,
                 timeout: float, progress: Callable[[str], None],
                 driver: Callable[[], Mapping[str, Any]]) -> None:
        self.client = client
        self.spec = spec
        self.image = spec.image or ""
        self.agent_name = agent_name
        self.timeout = timeout
        self.progress = progress
        self.driver = driver             # the agent daemon's inventory, asked only if needed
        self._stop = threading.Event()
        self._why_stopped = ""
        self._timed_out = False
        self._socket: Optional[Any] = None
        self._lock = threading.Lock()

    # -- control -----------------------------------------------------------------------------
    def cancel(self, why: str = "the task was killed") -> None:
        """Stop the pull (from another thread): the engine's request is closed."""
        with self._lock:
            if not self._why_stopped:
                self._why_stopped = why
            sock = self._socket
        self._stop.set()
        if sock is not None:
            _shut(sock)

    @property
    def cancelled(self) -> bool:
        return self._stop.is_set()

    def _time_out(self) -> None:
        with self._lock:
            self._timed_out = not self._why_stopped
        self.cancel(f"it did not finish within {self.timeout:g} s (--pull_timeout)")

    # -- the pull ----------------------------------------------------------------------------
    def run(self) -> Optional[image_config.RemoteImage]:
        """Registry read, CUDA check, pull. TaskFailure when it cannot be had."""
        try:
            ref = image_ref.parse(self.image)
        except UserError as e:
            raise TaskFailure(str(e)) from None
        auth = resolve_auth(ref, self.spec)
        remote = self._unless_cancelled(lambda: self._read_registry(ref, auth))
        if remote is not None:
            self._check_cuda(remote)
        if self.cancelled:
            raise TaskFailure(f"image {self.image}: not pulled: {self._why_stopped}")
        self._pull(ref, auth, remote)
        return remote

    def _unless_cancelled(self, read: Callable[[], Any]) -> Any:
        """`read()` on a thread of its own: a kill does not wait for a slow registry."""
        answer: Dict[str, Any] = {}
        done = threading.Event()

        def call() -> None:
            try:
                answer["value"] = read()
            except BaseException as e:      # handed to the caller below
                answer["error"] = e
            done.set()
        threading.Thread(target=call, name="registry-read", daemon=True).start()
        while not done.wait(0.1):
            if self.cancelled:
                raise TaskFailure(f"image {self.image}: not pulled: {self._why_stopped}")
        if "error" in answer:
            raise answer["error"]
        return answer.get("value")

    def _read_registry(self, ref: image_ref.ImageRef,
                       auth: RegistryAuth) -> Optional[image_config.RemoteImage]:
        credentials = auth.registry_credentials()
        if credentials is None:
            log.info("image %s: credentials from %s are an identity token, which the registry "
                     "read cannot use: its CUDA label is checked after the pull", self.image,
                     auth.source)
            return None
        registry = RegistryClient(credentials, timeout=min(30.0, self.timeout))
        try:
            remote = image_config.read(registry, ref)
        except RegistryError as e:
            if e.transient and ref.registry == image_ref.DOCKER_HUB:
                # the engine may reach Docker Hub through its own registry-mirrors
                log.warning("image %s: Docker Hub cannot be read from here (%s): the engine "
                            "pulls it (through its mirrors, if it has any) and its CUDA label "
                            "is checked after the pull", self.image, e)
                return None
            raise TaskFailure(f"image {self.image} cannot be pulled on {self.agent_name}: "
                              f"{_kind(e)}: {e}", retry=e.transient) from None
        except UserError as e:
            raise TaskFailure(f"image {self.image} cannot be pulled on {self.agent_name}: {e}") \
                from None
        log.info("image %s: %s in registry %s, %d layer(s), %s", self.image, remote.digest[:19],
                 ref.registry, len(remote.layers), _size(remote.size))
        return remote

    def _check_cuda(self, remote: image_config.RemoteImage) -> None:
        """Refuse, before any layer moves, an image this driver cannot run. An image
        whose config names a CUDA compat package may still run through it: that
        is decided from its files once pulled (framework.executor.image_compat)."""
        needed = remote.cuda_version
        if needed is None:
            return
        inventory = self.driver()
        driver_cuda = inventory.get("cuda_driver_version")
        driver_version = inventory.get("driver_version")
        if driver_cuda is not None and image_rules.parse_cuda_version(
                driver_cuda, "driver CUDA version") >= \
                image_rules.parse_cuda_version(needed, "label"):
            return
        if driver_cuda is not None and remote.env.get(COMPAT_PACKAGE_ENV, "").strip():
            log.info("image %s needs CUDA %s, newer than the driver's %s; its config names the "
                     "compat package %s: pulled, then decided from its files", self.image,
                     needed, driver_cuda, remote.env[COMPAT_PACKAGE_ENV])
            return
        if driver_cuda is None:
            why = "this host has no NVIDIA driver"
        else:
            driver_name = f"driver {driver_version} (CUDA {driver_cuda})" if driver_version \
                else f"the driver's CUDA {driver_cuda}"
            why = (f"newer than {driver_name}, and its configuration names no CUDA "
                   f"forward-compatibility package ({COMPAT_PACKAGE_ENV}) that could run it")
        raise TaskFailure(f"image {self.image}: unsupported CUDA version: the image needs "
                          f"CUDA {needed}, {why}; refused from its registry manifest and "
                          f"config, not pulled")

    def _pull(self, ref: image_ref.ImageRef, auth: RegistryAuth,
              remote: Optional[image_config.RemoteImage]) -> None:
        api = self.client.api
        repository, tag = _engine_name(ref)
        params = {"fromImage": repository, "tag": tag}
        total = remote.size if remote is not None else 0
        self.progress(f"pulling {self.image}" + (f": 0 B of {_size(total)}" if total else ""))
        log.info("pulling %s on %s (credentials: %s, timeout %.0f s)", self.image,
                 self.agent_name, auth.source, self.timeout)
        timer = threading.Timer(self.timeout, self._time_out)
        timer.daemon = True
        timer.start()
        started = time.monotonic()
        try:
            try:
                response = api._post(api._url("/images/create"), params=params,
                                     headers=auth.engine_header(), stream=True, timeout=None)
                api._raise_for_status(response)
            except docker.errors.DockerException as e:
                raise self._failure(getattr(e, "explanation", None) or str(e)) from None
            with self._lock:
                self._socket = api._get_raw_response_socket(response)
                stopped = self._stop.is_set()
            if stopped:
                _shut(self._socket)
            try:
                self._follow(api, response, remote)
            finally:
                response.close()
        finally:
            timer.cancel()
        log.info("pulled %s on %s in %.1f s", self.image, self.agent_name,
                 time.monotonic() - started)

    def _follow(self, api: Any, response: Any,
                remote: Optional[image_config.RemoteImage]) -> None:
        sizes = {layer.digest[7:19]: layer.size for layer in remote.layers} if remote else {}
        done: Dict[str, int] = {}
        totals: Dict[str, int] = dict(sizes)
        last = 0.0
        error = None
        try:
            for event in api._stream_helper(response, decode=True):
                if not isinstance(event, dict):
                    continue
                if event.get("error") or event.get("errorDetail"):
                    error = (event.get("errorDetail") or {}).get("message") or event.get("error")
                    break
                layer, status = event.get("id"), str(event.get("status") or "").lower()
                detail = event.get("progressDetail") or {}
                if not layer or len(layer) != 12:
                    continue
                if status == "downloading":
                    done[layer] = int(detail.get("current") or 0)
                    totals.setdefault(layer, int(detail.get("total") or 0))
                elif status in DONE_STATES:
                    done[layer] = totals.get(layer) or done.get(layer, 0)
                now = time.monotonic()
                if now - last >= PROGRESS_INTERVAL and done:
                    last = now
                    self.progress(self._progress_text(done, totals))
        except Exception as e:            # the socket shut by cancel(), a broken engine
            if not self.cancelled:
                raise self._failure(f"the Docker engine's answer broke off: {e}") from None
        if self._timed_out:
            raise TaskFailure(f"pulling {self.image} on {self.agent_name} failed: timeout: "
                              f"{self._why_stopped}", retry=True)
        if self.cancelled:
            raise TaskFailure(f"pulling {self.image} on {self.agent_name} stopped: "
                              f"{self._why_stopped}", retry=True)
        if error:
            raise self._failure(str(error))

    def _progress_text(self, done: Mapping[str, int], totals: Mapping[str, int]) -> str:
        complete = sum(1 for layer, n in done.items() if totals.get(layer) and n >= totals[layer])
        return (f"pulling {self.image}: {_size(sum(done.values()))} of "
                f"{_size(sum(totals.values()))} ({complete} of {len(totals)} layers)")

    def _failure(self, message: str) -> TaskFailure:
        kind, retry = _classify(message)
        return TaskFailure(f"pulling {self.image} on {self.agent_name} failed: {kind}: "
                           f"{message}", retry=retry)


def _engine_name(ref: image_ref.ImageRef):
    """fromImage and tag as the engine takes them (a digest goes in `tag`)."""
    name = ref.repository if ref.registry == image_ref.DOCKER_HUB else \
        f"{ref.registry}/{ref.repository}"
    return name, ref.digest or ref.tag or "latest"


def _shut(sock: Any) -> None:
    """Wake the reader blocked on the engine's answer and close the request: the
    engine sees its client gone and stops the download nobody else watches."""
    raw = getattr(sock, "_sock", sock)
    try:
        raw.shutdown(socket.SHUT_RDWR)
    except (OSError, AttributeError):
        pass


def _kind(e: RegistryError) -> str:
    if e.status == 404:
        return "not found"
    if e.status in (401, 403):
        return "unauthorized"
    if e.transient and "did not answer within" in str(e):
        return "timeout"
    if e.transient and e.status is None:
        return "unreachable"
    return "refused"


def _classify(message: str):
    """The engine's words as the kind of failure, and whether retrying may help."""
    text = message.lower()
    if any(w in text for w in ("unauthorized", "authentication required", "no basic auth",
                               "denied", "authorization")):
        return "unauthorized", False
    if any(w in text for w in ("not found", "manifest unknown", "does not exist",
                               "name unknown")):
        return "not found", False
    if any(w in text for w in ("timeout", "timed out", "deadline exceeded")):
        return "timeout", True
    return "unreachable", True


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} GB"
