"""A Docker legacy volume plugin (`nvidia-docker`) that lends the driver volume.

Docker talks HTTP/1.1 + JSON over the unix socket
/run/docker/plugins/<name>.sock (the only place dockerd looks for a legacy
plugin without a spec file). Volumes are named `nvidia_driver_<version>`, as
in nvidia-docker v1, and only the host's driver version is served: anything
else would put libraries that do not match the kernel driver in a container.

    docker run --volume-driver=nvidia-docker \
        -v nvidia_driver_535.261.03:/usr/local/nvidia:ro,nocopy IMAGE

(`nocopy`, or dockerd first copies the image's /usr/local/nvidia into the
volume; `ro` because the volume is the host's driver.)

Mount and Create build the volume (or reuse it: milliseconds) with
`volumes.builder`; Remove deletes the directory unless a container mounted
through this plugin, or one the owner reports through `in_use`, still uses it,
and leaves the directory of a version the owner `keep`s (the agent daemon's
current volume: Docker forgets the name, the daemon still hands it out).
"""
import json
import logging
import os
import re
import socket
import socketserver
import stat
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Set, Union

from volumes import builder
from common.errors import UserError
from common.paths import MAX_SOCKET_PATH

log = logging.getLogger("mesos-gpu.volume-plugin")

NAME = "nvidia-docker"
SOCKET_DIR = "/run/docker/plugins"
VOLUME_KIND = "nvidia_driver"
CONTENT_TYPE = "application/vnd.docker.plugins.v1+json"
MAX_REQUEST = 1 << 20           # dockerd's requests are a few hundred bytes
_VOLUME_NAME = re.compile(r"([a-zA-Z0-9_.-]+)_([0-9.]+)")     # nvidia-docker's rule


def parse_volume_name(name: Any) -> str:
    """The driver version in `nvidia_driver_<version>`; UserError otherwise."""
    m = _VOLUME_NAME.fullmatch(name) if isinstance(name, str) else None
    if m is None or m.group(1) != VOLUME_KIND:
        raise UserError(f"volume name {name!r}: expected {VOLUME_KIND}_<driver version>, "
                        f"e.g. {VOLUME_KIND}_535.261.03")
    try:
        return builder.check_version(m.group(2))
    except UserError:
        raise UserError(f"volume name {name!r}: {m.group(2)!r} is not a driver version "
                        f"(digits and dots, e.g. 535.261.03)") from None


def docker_volume_name(version: str) -> str:
    """The name Docker knows the driver volume by (nvidia-docker's `nvidia_driver_<v>`)."""
    return f"{VOLUME_KIND}_{version}"


class VolumePlugin:
    """The plugin's logic, one method per endpoint; `handle` dispatches."""

    def __init__(self, driver_version: str, driver_root: Union[str, Path] = "/",
                 volume_root: Union[str, Path] = builder.DEFAULT_VOLUME_ROOT,
                 in_use: Optional[Callable[[], Set[str]]] = None,
                 keep: Optional[Callable[[], Set[str]]] = None) -> None:
        self.driver_version = builder.check_version(driver_version)
        self.driver_root = Path(driver_root)
        self.volume_root = Path(volume_root)
        self.in_use = in_use or (lambda: set())
        # Versions whose directory Remove leaves alone (Docker only forgets the
        # name): the agent daemon's current volume, which it also hands out.
        self.keep = keep or (lambda: set())
        self.mounts: Dict[str, Set[str]] = {}          # version -> mount ids
        self.created: Set[str] = set()
        self.lock = threading.Lock()     # held per request; the daemon takes it to switch drivers

    def handle(self, endpoint: str, request: Dict[str, Any]) -> Dict[str, Any]:
        method = self._endpoints().get(endpoint)
        if method is None:
            return {"Err": f"unknown endpoint {endpoint}"}
        try:
            with self.lock:
                return method(request)
        except UserError as e:
            return {"Err": str(e)}
        except Exception as e:  # noqa: BLE001 - Docker shows Err to the user
            log.exception("volume plugin %s failed", endpoint)
            return {"Err": f"internal error in {endpoint}: {e}"}

    def _endpoints(self) -> Dict[str, Callable[[Dict[str, Any]], Dict[str, Any]]]:
        return {"/Plugin.Activate": lambda r: {"Implements": ["VolumeDriver"]},
                "/VolumeDriver.Capabilities": lambda r: {"Capabilities": {"Scope": "local"}},
                "/VolumeDriver.Create": self.create,
                "/VolumeDriver.Remove": self.remove,
                "/VolumeDriver.Mount": self.mount,
                "/VolumeDriver.Unmount": self.unmount,
                "/VolumeDriver.Path": self.path,
                "/VolumeDriver.Get": self.get,
                "/VolumeDriver.List": self.list}

    def _version(self, request: Dict[str, Any]) -> str:
        name = request.get("Name")
        version = parse_volume_name(name)
        if version != self.driver_version:
            raise UserError(f"volume {name}: invalid volume version {version}: this host's "
                            f"driver is {self.driver_version} (use "
                            f"{docker_volume_name(self.driver_version)})")
        return version

    def _build(self, version: str) -> builder.Volume:
        return builder.build(version, self.driver_root, self.volume_root)

    def _on_disk(self, version: str) -> Optional[Path]:
        p = self.volume_root / (builder.PREFIX + version)
        return p if p.is_dir() else None

    def create(self, request: Dict[str, Any]) -> Dict[str, Any]:
        version = self._version(request)
        if request.get("Opts"):
            raise UserError(f"volume {request['Name']}: takes no options (got "
                            f"{sorted(request['Opts'])})")
        self._build(version)
        self.created.add(version)
        return {"Err": ""}

    def remove(self, request: Dict[str, Any]) -> Dict[str, Any]:
        version = parse_volume_name(request.get("Name"))
        users = len(self.mounts.get(version, ()))
        if users or version in self.in_use():
            raise UserError(f"volume {request['Name']} is in use "
                            f"({users or 'some'} container(s)); not removed")
        if version in self.keep():
            log.info("volume %s removed from Docker; its directory stays (the agent daemon "
                     "hands it out)", request["Name"])
            self.created.discard(version)
            return {"Err": ""}
        builder.remove(self.volume_root, version)
        self.created.discard(version)
        return {"Err": ""}

    def mount(self, request: Dict[str, Any]) -> Dict[str, Any]:
        version = self._version(request)
        volume = self._build(version)
        self.mounts.setdefault(version, set()).add(str(request.get("ID", "")))
        log.info("mount %s for %s at %s", request["Name"], request.get("ID", "?")[:12], volume.path)
        return {"Mountpoint": str(volume.path), "Err": ""}

    def unmount(self, request: Dict[str, Any]) -> Dict[str, Any]:
        version = parse_volume_name(request.get("Name"))
        self.mounts.get(version, set()).discard(str(request.get("ID", "")))
        return {"Err": ""}

    def path(self, request: Dict[str, Any]) -> Dict[str, Any]:
        version = parse_volume_name(request.get("Name"))
        where = self._on_disk(version)
        return {"Mountpoint": str(where) if where else "", "Err": ""}

    def get(self, request: Dict[str, Any]) -> Dict[str, Any]:
        version = parse_volume_name(request.get("Name"))
        where = self._on_disk(version)
        if where is None and version not in self.created:
            raise UserError(f"no such volume: {request['Name']}")
        return {"Volume": {"Name": request["Name"], "Mountpoint": str(where or ""),
                           "Status": {"mounts": len(self.mounts.get(version, ()))}},
                "Err": ""}

    def list(self, request: Dict[str, Any]) -> Dict[str, Any]:
        versions = {s.version for s in builder.list_volumes(self.volume_root)} | self.created
        return {"Volumes": [{"Name": docker_volume_name(v),
                             "Mountpoint": str(self._on_disk(v) or "")}
                            for v in sorted(versions)], "Err": ""}


class _Handler(BaseHTTPRequestHandler):
    server: "PluginServer"

    def handle(self) -> None:
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):
            log.debug("volume plugin: a client went away mid-request")

    def do_POST(self) -> None:
        # The whole request is read before any answer, a refusal included: a
        # server that answers and closes while the client is still sending its
        # body makes the client's write fail (EPIPE) instead of reading the answer.
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_REQUEST:
            self.close_connection = True
            return self._reply(413 if length > MAX_REQUEST else 400,
                               {"Err": f"Content-Length must be 0..{MAX_REQUEST} bytes"})
        body = self.rfile.read(length) if length else b""
        accept = self.headers.get("Accept", "")
        if accept and "application/vnd.docker.plugins.v1" not in accept and "*/*" not in accept:
            return self._reply(406, {"Err": f"unsupported Accept {accept!r}"})
        try:
            request = json.loads(body) if body.strip() else {}
        except ValueError:
            return self._reply(400, {"Err": "request body is not JSON"})
        if not isinstance(request, dict):
            return self._reply(400, {"Err": "request body must be a JSON object"})
        answer = self.server.plugin.handle(self.path, request)
        if answer.get("Err"):
            log.warning("%s %s: %s", self.path, request.get("Name", ""), answer["Err"])
        else:
            log.debug("%s %s -> %s", self.path, request.get("Name", ""), answer)
        self._reply(200, answer)

    def _reply(self, status: int, answer: Dict[str, Any]) -> None:
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:     # the default wants a TCP peer address
        pass


class PluginServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The plugin on `<socket_dir>/<name>.sock`; `close()` removes the socket."""
    daemon_threads = True

    def __init__(self, plugin: VolumePlugin, socket_dir: Union[str, Path] = SOCKET_DIR,
                 name: str = NAME) -> None:
        if not re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*", name):
            raise UserError(f"plugin name {name!r}: letters, digits, '_', '.', '-' only")
        self.plugin = plugin
        self.name = name
        self.socket_path = Path(socket_dir) / f"{name}.sock"
        if len(os.fsencode(self.socket_path)) > MAX_SOCKET_PATH:
            raise UserError(f"--socket_dir {socket_dir}: too long for the socket "
                            f"{self.socket_path} (at most {MAX_SOCKET_PATH} bytes)")
        try:
            self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise UserError(f"--socket_dir {socket_dir}: exists and is not a directory") from None
        except OSError as e:
            raise UserError(f"--socket_dir {socket_dir}: cannot create it: {e.strerror}") from None
        _clear_stale_socket(self.socket_path)
        try:
            super().__init__(str(self.socket_path), _Handler)
        except OSError as e:
            raise UserError(f"cannot listen on {self.socket_path}: {e.strerror or e}") from None
        os.chmod(self.socket_path, 0o660)
        self._thread: Optional[threading.Thread] = None
        log.info("volume plugin %s serving %s (driver %s, volumes under %s)", name,
                 self.socket_path, plugin.driver_version, plugin.volume_root)

    def start(self) -> "PluginServer":
        """Serve in a background thread."""
        self._thread = threading.Thread(target=self.serve_forever, name=f"plugin-{self.name}",
                                        daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and remove the socket (dockerd would keep dialing a stale one)."""
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
            self._thread = None
        self.server_close()
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
        log.info("volume plugin %s stopped", self.name)

    def __enter__(self) -> "PluginServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _clear_stale_socket(path: Path) -> None:
    """Remove a socket left by a dead plugin; refuse to take over a live one."""
    if not path.exists() and not path.is_symlink():
        return
    if not stat.S_ISSOCK(path.lstat().st_mode):
        raise UserError(f"{path}: exists and is not a socket; not replacing it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        os.unlink(path)
        return
    finally:
        probe.close()
    raise UserError(f"{path}: another volume plugin is already serving there")
