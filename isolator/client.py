"""The client of the agent daemon's local API, for executors and tools.

    client = AgentClient("/var/lib/mesos-gpu/agent.sock")
    grant = client.prepare(container_id, gpus=2, container_type=MESOS)
    client.isolate(container_id, pid=child.pid)
    ...
    client.cleanup(container_id)

Isolate before the task runs: start the child held (e.g. waiting on a pipe),
isolate its pid, then let it exec the task; for Docker, isolate the created
container (label mesos-gpu.container-id=<id>) before starting it. The process
that prepares a container owns it: it alone may isolate and resize it, and the
container ends with it.

A daemon that is restarting, or busy, is waited for: refused or failed connects
and 503 "busy" answers are retried with back-off for up to `connect_timeout`
seconds (prepare and isolate are safe to ask again: the same request answers the
same grant); each pause is drawn within +-50 % of the back-off, so the executors of a
node whose daemon restarts do not all knock again in the same instant. Every refusal raises AgentError (a UserError) carrying the daemon's
message and HTTP status; a daemon that cannot be reached within the bound is
AgentError with status 503.
"""
import http.client
import json
import random
import socket
import threading
import time
from typing import Any, Dict, Optional
from urllib.parse import quote

from isolator.api import (MESOS, Cleanup, CleanupRequest, Grant, IsolateRequest, NodeHealth,
                          PrepareRequest, ShareRequest, TaskLabels, UpdateRequest,
                          Usage)
from isolator.errors import AgentError

__all__ = ["AgentClient", "AgentError"]
CONNECT_TIMEOUT = 30.0
FIRST_RETRY = 0.05
MAX_RETRY = 1.0


def retry_pause(delay: float) -> float:
    """The back-off `delay` with jitter: many clients retrying one daemon spread out."""
    return delay * random.uniform(0.5, 1.5)


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


class _Busy(Exception):
    pass


class AgentClient:
    def __init__(self, socket_path: str, timeout: float = 60.0,
                 connect_timeout: float = CONNECT_TIMEOUT) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._local = threading.local()      # one kept-alive connection per thread

    def _connection(self) -> _UnixConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = _UnixConnection(self.socket_path, self.timeout)
            conn.connect()
            self._local.conn = conn
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def close(self) -> None:
        self._drop()

    def _exchange(self, method: str, path: str, data: Optional[bytes]):
        """One request on this thread's connection; a kept-alive connection the daemon
        closed meanwhile is replaced once (nothing was processed on it)."""
        for attempt in (1, 2):
            fresh = getattr(self._local, "conn", None) is None
            conn = self._connection()
            try:
                headers = {"Content-Type": "application/json"} if data is not None else {}
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self._drop()
                if fresh or attempt == 2:
                    raise
                continue
            except BaseException:
                self._drop()
                raise
            if resp.getheader("Connection", "").lower() == "close":
                self._drop()
            return resp, raw

    def _request(self, method: str, path: str, body: Optional[Dict] = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        deadline = time.monotonic() + self.connect_timeout
        delay = FIRST_RETRY
        while True:
            try:
                resp, raw = self._exchange(method, path, data)
                if resp.status == 503 and resp.getheader("Retry-After"):
                    raise _Busy(raw.decode(errors="replace"))
                break
            except (OSError, http.client.HTTPException, _Busy) as e:
                if time.monotonic() + delay > deadline:
                    raise AgentError(f"agent-side module not reachable at {self.socket_path} "
                                     f"within {self.connect_timeout:g} s: {e}",
                                     status=503) from None
                time.sleep(retry_pause(delay))
                delay = min(MAX_RETRY, delay * 2)
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

    def prepare(self, container_id: str, gpus: int, container_type: str = MESOS,
                task: Optional[TaskLabels] = None,
                share: Optional[ShareRequest] = None, mig_profile: str = "") -> Grant:
        """`gpus` whole GPUs (MIG devices of `mig_profile` when one is named), or
        (gpus 0) a `share` of a shared GPU."""
        request = PrepareRequest(container_id, gpus, container_type, task, share, mig_profile)
        return Grant.from_json(self._request("POST", "/v1/prepare", request.to_json()))

    def isolate(self, container_id: str, pid: Optional[int] = None,
                docker_id: Optional[str] = None) -> Grant:
        request = IsolateRequest(container_id, pid, docker_id)
        body = {k: v for k, v in request.__dict__.items() if v is not None}
        return Grant.from_json(self._request("POST", "/v1/isolate", body))

    def update(self, container_id: str, gpus: int) -> Grant:
        request = UpdateRequest(container_id, gpus)
        return Grant.from_json(self._request("POST", "/v1/update", request.__dict__))

    def cleanup(self, container_id: str) -> Cleanup:
        request = CleanupRequest(container_id)
        return Cleanup.from_json(self._request("POST", "/v1/cleanup", request.__dict__))

    def usage(self, container_id: str) -> Usage:
        return Usage.from_json(self._request("GET",
                                             f"/v1/usage?container_id={quote(container_id)}"))

    def health(self) -> NodeHealth:
        return NodeHealth.from_json(self._request("GET", "/v1/health"))

    def info(self) -> Dict:
        return self._request("GET", "/v1/info")

    def metrics(self) -> str:
        return self._request("GET", "/metrics")
