"""The client of the agent daemon's local API, for executors and tools.

    client = AgentClient("/var/lib/mesos-gpu/agent.sock")
    answer = client.prepare(container_id, gpus=2, kind="cgroup")
    client.isolate(container_id, pid=child.pid)
    ...
    client.cleanup(container_id)

Isolate before the task runs: start the child held (e.g. waiting on a pipe),
isolate its pid, then let it exec the task; for Docker, isolate the created
container (label mesos-gpu.container-id=<id>) before starting it.

Every refusal raises AgentError (a UserError) carrying the daemon's message and
HTTP status; a daemon that cannot be reached is AgentError with status 503.
"""
import http.client
import json
import socket
from typing import Dict, Optional
from urllib.parse import quote

from isolator.errors import AgentError

__all__ = ["AgentClient", "AgentError"]


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, socket_path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self.socket_path)
        except OSError:
            s.close()
            raise
        self.sock = s


class AgentClient:
    def __init__(self, socket_path: str, timeout: float = 60.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def _request(self, method: str, path: str, body: Optional[Dict] = None):
        conn = _UnixConnection(self.socket_path, self.timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = {"Content-Type": "application/json"} if data is not None else {}
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        except OSError as e:
            raise AgentError(f"agent-side module not reachable at {self.socket_path}: {e}",
                             status=503) from None
        finally:
            conn.close()
        if resp.getheader("Content-Type", "").startswith("text/plain"):
            if resp.status != 200:
                raise AgentError(raw.decode(errors="replace"), status=resp.status)
            return raw.decode()
        try:
            doc = json.loads(raw)
        except ValueError:
            raise AgentError(f"agent-side module answered {resp.status} with non-JSON: "
                             f"{raw[:200]!r}", status=resp.status) from None
        if resp.status != 200:
            raise AgentError(doc.get("error", f"HTTP {resp.status}"), status=resp.status)
        return doc

    def prepare(self, container_id: str, gpus: int, kind: str = "cgroup") -> Dict:
        return self._request("POST", "/v1/prepare",
                             {"container_id": container_id, "gpus": gpus, "kind": kind})

    def isolate(self, container_id: str, pid: Optional[int] = None,
                docker_id: Optional[str] = None) -> Dict:
        body: Dict = {"container_id": container_id}
        if pid is not None:
            body["pid"] = pid
        if docker_id is not None:
            body["docker_id"] = docker_id
        return self._request("POST", "/v1/isolate", body)

    def update(self, container_id: str, gpus: int) -> Dict:
        return self._request("POST", "/v1/update", {"container_id": container_id, "gpus": gpus})

    def usage(self, container_id: str) -> Dict:
        return self._request("GET", f"/v1/usage?container_id={quote(container_id)}")

    def cleanup(self, container_id: str) -> Dict:
        return self._request("POST", "/v1/cleanup", {"container_id": container_id})

    def info(self) -> Dict:
        return self._request("GET", "/v1/info")

    def metrics(self) -> str:
        return self._request("GET", "/metrics")
