"""The daemon's local API: HTTP/1.1 + JSON on the unix socket <work_dir>/agent.sock.

The socket is mode 0600 (root's executors only) and nothing listens on the
network. Routes (the executor's client is isolator/client.py):
  POST /v1/prepare  {"container_id", "gpus", "kind"}
  POST /v1/isolate  {"container_id", "pid"} | {"container_id", "docker_id"}
  POST /v1/update   {"container_id", "gpus"}
  POST /v1/cleanup  {"container_id"}
  GET  /v1/usage?container_id=ID
  GET  /v1/info
  GET  /metrics     (Prometheus text)
Errors answer {"error": message} with the status of the AgentError raised.
"""
import json
import logging
import os
import socketserver
from http.server import BaseHTTPRequestHandler
from typing import Callable, Dict, Tuple
from urllib.parse import parse_qs, urlsplit

from isolator import metrics
from isolator.errors import AgentError, BadRequest, NotFound
from isolator.service import AgentService
from common.errors import UserError

log = logging.getLogger("mesos-gpu.agent")
MAX_BODY = 1 << 20


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "mesos-gpu-agent"
    service: AgentService          # set on the subclass the server makes

    def address_string(self) -> str:
        return "local"

    def log_message(self, fmt: str, *args) -> None:
        log.debug("api: " + fmt, *args)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, status: int, doc: Dict) -> None:
        self._send(status, json.dumps(doc).encode(), "application/json")

    def _body(self) -> Dict:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise BadRequest(f"request body of {length} bytes is over {MAX_BODY}")
        raw = self.rfile.read(length) if length else b"{}"
        try:
            doc = json.loads(raw or b"{}")
        except ValueError as e:
            raise BadRequest(f"request body is not JSON: {e}") from None
        if not isinstance(doc, dict):
            raise BadRequest("request body must be a JSON object")
        return doc

    def _dispatch(self, routes: Dict[str, Callable]) -> None:
        url = urlsplit(self.path)
        try:
            route = routes.get(url.path)
            if route is None:
                raise NotFound(f"no such endpoint: {self.command} {url.path}")
            status, payload = route(self, url)
            if isinstance(payload, str):
                self._send(status, payload.encode(), "text/plain; version=0.0.4")
            else:
                self._json(status, payload)
        except AgentError as e:
            self._json(e.status, {"error": str(e)})
        except UserError as e:
            self._json(400, {"error": str(e)})
        except Exception as e:           # a bug or an unexpected kernel answer
            log.exception("%s %s failed", self.command, url.path)
            self._json(500, {"error": f"internal error: {type(e).__name__}: {e}"})

    def do_GET(self) -> None:
        self._dispatch(GET_ROUTES)

    def do_POST(self) -> None:
        self._dispatch(POST_ROUTES)


def _field(doc: Dict, name: str):
    if name not in doc:
        raise BadRequest(f"'{name}' is missing from the request")
    return doc[name]


def _prepare(h: _Handler, url) -> Tuple[int, Dict]:
    d = h._body()
    return 200, h.service.prepare(_field(d, "container_id"), _field(d, "gpus"),
                                  d.get("kind", "cgroup"))


def _isolate(h: _Handler, url) -> Tuple[int, Dict]:
    d = h._body()
    return 200, h.service.isolate(_field(d, "container_id"), d.get("pid"), d.get("docker_id"))


def _update(h: _Handler, url) -> Tuple[int, Dict]:
    d = h._body()
    return 200, h.service.update(_field(d, "container_id"), _field(d, "gpus"))


def _cleanup(h: _Handler, url) -> Tuple[int, Dict]:
    d = h._body()
    return 200, h.service.cleanup(_field(d, "container_id"))


def _usage(h: _Handler, url) -> Tuple[int, Dict]:
    ids = parse_qs(url.query).get("container_id")
    if not ids:
        raise BadRequest("'container_id' is missing from the query (?container_id=ID)")
    return 200, h.service.usage(ids[0])


def _info(h: _Handler, url) -> Tuple[int, Dict]:
    return 200, h.service.info()


def _metrics(h: _Handler, url) -> Tuple[int, str]:
    return 200, metrics.render(h.service.info())


POST_ROUTES = {"/v1/prepare": _prepare, "/v1/isolate": _isolate, "/v1/update": _update,
               "/v1/cleanup": _cleanup}
GET_ROUTES = {"/v1/usage": _usage, "/v1/info": _info, "/metrics": _metrics}


class AgentServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, socket_path: str, service: AgentService) -> None:
        handler = type("Handler", (_Handler,), {"service": service})
        try:
            os.unlink(socket_path)        # left by a daemon that died (the lock says none runs)
        except FileNotFoundError:
            pass
        self.socket_path = socket_path    # server_close() needs it if the bind fails
        old = os.umask(0o177)             # the socket is born 0600
        try:
            super().__init__(socket_path, handler)
        except OSError as e:              # e.g. a path longer than a unix socket allows
            raise UserError(f"cannot listen on {socket_path}: {e.strerror or e}") from None
        finally:
            os.umask(old)
        os.chmod(socket_path, 0o600)

    def server_close(self) -> None:
        super().server_close()
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
