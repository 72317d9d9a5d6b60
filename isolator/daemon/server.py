"""The daemon's local API server: HTTP/1.1 + JSON on the unix socket <work_dir>/agent.sock.

The socket is mode 0600 (root's executors only) and nothing listens on the
network. Requests and answers are the typed ones of isolator/api.py.

Built to hold load and to survive misbehaving clients:
- one I/O thread reads and writes every connection without blocking (a selector),
  so a client that sends half a request, or nothing, costs a buffer, never a
  thread; each request must arrive whole within READ_TIMEOUT, an idle kept-alive
  connection is closed after IDLE_TIMEOUT;
- the common operations (prepare, isolate by pid, update, cleanup, info) are
  answered on the I/O thread itself: they only take the service lock for short
  kernel and journal work (no Docker or NVML call is made under it). The others (a
  Docker isolate asks the engine, usage asks NVML, metrics) go to a bounded pool of
  workers; when its queue is full the answer is 503 with Retry-After, which clients
  retry;
- a connection is read only while no answer is owed on it: a client that pipelines
  requests and never reads its answers holds one answer and one read's worth of
  bytes, never a queue of rendered answers (and the kernel's buffers push back on
  it); what a connection may buffer is capped (a request head, a body, one read);
- the listen backlog is the system's maximum, and the daemon's open-file limit is
  raised to its hard limit, so a burst of connections is queued, not refused;
- malformed requests (no Content-Length for a body, a negative or non-numeric one,
  a body over MAX_BODY, bad JSON, a missing or wrong field) get 400 naming what is
  wrong; an unknown path 404, a known path with the wrong method 405;
- the caller is who the kernel says it is (SO_PEERCRED): its pid becomes the owner
  of what it prepares (isolator/allocation/owner.py).
"""
import json
import logging
import os
import queue
import resource
import selectors
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

from common import json_depth
from common.errors import UserError
from isolator import api
from isolator.metrics import metrics
from isolator.errors import AgentError, BadRequest, NotFound, Unavailable
from isolator.allocation.owner import Owner
from isolator.containers.isolator import GpuIsolator

log = logging.getLogger("mesos-gpu.agent")
MAX_BODY = 1 << 20
MAX_HEADER = 16 << 10
RECV_BYTES = 65536
READ_TIMEOUT = 5.0          # a request must arrive whole within this
IDLE_TIMEOUT = 60.0         # a kept-alive connection with nothing to say is closed after this
WORKERS = 8
QUEUE_LIMIT = 1024
REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 409: "Conflict", 410: "Gone", 413: "Payload Too Large",
           500: "Internal Server Error", 503: "Service Unavailable"}


class Method(BadRequest):
    status = 405


def somaxconn() -> int:
    try:
        with open("/proc/sys/net/core/somaxconn") as f:
            return int(f.read())
    except (OSError, ValueError):
        return socket.SOMAXCONN


def raise_open_file_limit() -> int:
    """The soft RLIMIT_NOFILE up to the hard one (each connection is a descriptor)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


@dataclass
class Request:
    method: str
    path: str
    query: Dict[str, List[str]]
    body: bytes
    close: bool


@dataclass
class _Connection:
    sock: socket.socket
    peer_pid: int
    owner: Optional[Owner] = None
    inbox: bytearray = field(default_factory=bytearray)
    outbox: bytearray = field(default_factory=bytearray)
    deadline: float = 0.0            # the request being read must be whole by then
    busy: bool = False               # a worker has its request
    events: int = selectors.EVENT_READ   # what the selector waits for on it (0: not in it)
    close_after: bool = False


def _peer_pid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[0]


def _response(status: int, body: bytes, content_type: str, close: bool,
              extra: str = "") -> bytes:
    head = (f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\n"
            f"Server: mesos-gpu-agent\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n{extra}"
            f"{'Connection: close' + chr(13) + chr(10) if close else ''}\r\n")
    return head.encode() + body


def _json_response(status: int, doc: object, close: bool, extra: str = "") -> bytes:
    return _response(status, json.dumps(doc).encode(), "application/json", close, extra)


def parse_head(raw: bytes) -> Tuple[str, str, Dict[str, str], bool]:
    """(method, target, headers, close) of a request head, or BadRequest."""
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError:                    # latin-1 decodes anything; kept for clarity
        raise BadRequest("request head is not text") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(f"malformed request line {lines[0][:100]!r}")
    method, target, version = parts
    headers: Dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise BadRequest(f"malformed header line {line[:100]!r}")
        headers[name.strip().lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    close = connection == "close" or (version == "HTTP/1.0" and connection != "keep-alive")
    return method, target, headers, close


def content_length(headers: Dict[str, str], max_body: int = MAX_BODY) -> int:
    if "transfer-encoding" in headers:
        raise BadRequest("Transfer-Encoding is not supported: send a Content-Length")
    value = headers.get("content-length")
    if value is None:
        return 0
    if not value.isdigit():
        raise BadRequest(f"Content-Length must be a non-negative integer, got {value!r}")
    length = int(value)
    if length > max_body:
        raise BadRequest(f"request body of {length} bytes is over {max_body}")
    return length


class AgentServer:
    """The executors' API on the unix socket; MetricsServer (metrics_server.py) is the
    same server on a TCP address with the read-only routes only."""
    worker_name = "api-worker"
    max_body = MAX_BODY
    max_connections_cap: Optional[int] = None      # beyond the open-file limit's

    def __init__(self, socket_path: str, service: GpuIsolator, workers: int = WORKERS,
                 latency: Optional[metrics.Histograms] = None) -> None:
        self.socket_path = socket_path
        self.service = service
        self.sock = self._listen()
        self.backlog = somaxconn()
        self.sock.listen(self.backlog)
        self.sock.setblocking(False)
        self.max_connections = max(64, raise_open_file_limit() - 64)
        if self.max_connections_cap is not None:
            self.max_connections = min(self.max_connections, self.max_connections_cap)
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._done: "queue.SimpleQueue[Tuple[_Connection, bytes, bool]]" = queue.SimpleQueue()
        self._work: "queue.Queue[Optional[Tuple[_Connection, Request]]]" = queue.Queue(QUEUE_LIMIT)
        self._stop = threading.Event()
        self._connections: Dict[int, _Connection] = {}
        self._workers = [threading.Thread(target=self._worker, name=f"{self.worker_name}-{i}",
                                          daemon=True) for i in range(workers)]
        self.latency = latency if latency is not None else metrics.Histograms()
        self.routes: Dict[str, Tuple[str, Callable[[Request, _Connection], object]]] = {
            "/v1/prepare": ("POST", self._prepare), "/v1/isolate": ("POST", self._isolate),
            "/v1/update": ("POST", self._update), "/v1/cleanup": ("POST", self._cleanup),
            "/v1/usage": ("GET", self._usage), "/v1/info": ("GET", self._info),
            "/v1/health": ("GET", self._health), "/metrics": ("GET", self._metrics)}

    def _listen(self) -> socket.socket:
        try:
            os.unlink(self.socket_path)   # left by a daemon that died (the lock says none runs)
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)             # the socket is born 0600
        try:
            sock.bind(self.socket_path)
        except OSError as e:              # e.g. a path longer than a unix socket allows
            sock.close()
            raise UserError(f"cannot listen on {self.socket_path}: {e.strerror or e}") from None
        finally:
            os.umask(old)
        os.chmod(self.socket_path, 0o600)
        return sock

    def _peer(self, sock: socket.socket) -> int:
        return _peer_pid(sock)

    # --- the I/O thread -----------------------------------------------------------------------

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        for w in self._workers:
            w.start()
        sel = self._selector
        sel.register(self.sock, selectors.EVENT_READ, "listen")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        try:
            while not self._stop.is_set():
                for key, events in sel.select(timeout=min(poll_interval, 1.0)):
                    if key.data == "listen":
                        self._accept()
                    elif key.data == "wake":
                        self._drain_wake()
                    else:
                        conn = key.data
                        if events & selectors.EVENT_READ:
                            self._read(conn)
                        if events & selectors.EVENT_WRITE and conn.sock.fileno() >= 0:
                            self._write(conn)
                self._expire()
        finally:
            for _ in self._workers:
                self._work.put(None)

    def _accept(self) -> None:
        for _ in range(256):                       # a burst: take what is queued now
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:                   # EMFILE: leave it queued until some close
                log.warning("accept: %s", e)
                return
            sock.setblocking(False)
            try:
                pid = self._peer(sock)
            except OSError:
                sock.close()
                continue
            if len(self._connections) >= self.max_connections:
                sock.close()
                continue
            conn = _Connection(sock, pid, deadline=time.monotonic() + IDLE_TIMEOUT)
            self._connections[sock.fileno()] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _read(self, conn: _Connection) -> None:
        if conn.busy or conn.outbox:
            self._watch(conn)                      # an answer is owed: read no further
            return
        try:
            data = conn.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn)
            return
        if not conn.inbox:
            conn.deadline = time.monotonic() + READ_TIMEOUT
        conn.inbox += data
        self._advance(conn)

    def _advance(self, conn: _Connection) -> None:
        """Take the requests already read, one at a time, while no answer is owed."""
        while conn.sock.fileno() >= 0 and not conn.busy and not conn.outbox and conn.inbox:
            size = len(conn.inbox)
            self._take_request(conn)
            if len(conn.inbox) == size and not conn.busy and not conn.outbox:
                break                              # not whole yet
        self._watch(conn)

    def _watch(self, conn: _Connection) -> None:
        """Read a connection only while no answer is owed on it (none in a worker, none
        unsent): a pipelining client that never reads gets pushed back by the kernel's
        buffers instead of filling ours with answers. Write while an answer is unsent."""
        if conn.sock.fileno() < 0:
            return
        events = 0 if conn.busy or conn.outbox else selectors.EVENT_READ
        events |= selectors.EVENT_WRITE if conn.outbox else 0
        if events == conn.events:
            return
        if conn.events == 0:
            self._selector.register(conn.sock, events, conn)
        elif events == 0:                          # a worker has it: nothing to wait for
            self._selector.unregister(conn.sock)
        else:
            self._selector.modify(conn.sock, events, conn)
        conn.events = events

    def _take_request(self, conn: _Connection) -> None:
        """Hand a whole request to the workers, or answer a malformed one."""
        end = conn.inbox.find(b"\r\n\r\n")
        if end < 0:
            if len(conn.inbox) > MAX_HEADER:
                self._reply(conn, _json_response(400, {"error": f"request head over "
                                                       f"{MAX_HEADER} bytes"}, True), True)
            return
        try:
            method, target, headers, close = parse_head(bytes(conn.inbox[:end]))
            length = content_length(headers, self.max_body)
        except BadRequest as e:
            self._reply(conn, _json_response(400, {"error": str(e)}, True), True)
            return
        if len(conn.inbox) < end + 4 + length:
            return                                  # the body is still coming
        body = bytes(conn.inbox[end + 4:end + 4 + length])
        del conn.inbox[:end + 4 + length]
        url = urlsplit(target)
        request = Request(method, url.path, parse_qs(url.query), body, close)
        conn.busy = True
        if self._inline(request):
            started = time.monotonic()
            data = self._handle(conn, request)
            self.latency.observe(request.path, time.monotonic() - started)
            self._reply(conn, data, close)
            return
        try:
            self._work.put_nowait((conn, request))
        except queue.Full:
            self._reply(conn, _json_response(
                503, {"error": "the agent daemon is busy: retry"}, close, "Retry-After: 1\r\n"),
                close)

    def _reply(self, conn: _Connection, data: bytes, close: bool) -> None:
        conn.outbox += data
        conn.busy = False
        conn.close_after = conn.close_after or close
        conn.deadline = time.monotonic() + (READ_TIMEOUT if conn.inbox else IDLE_TIMEOUT)
        self._flush(conn)

    def _flush(self, conn: _Connection) -> bool:
        """Send what the socket takes; False when the connection is closed."""
        if conn.sock.fileno() < 0:
            return False
        try:
            while conn.outbox:
                sent = conn.sock.send(conn.outbox)
                del conn.outbox[:sent]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._close(conn)
            return False
        if not conn.outbox and conn.close_after:
            self._close(conn)
            return False
        return True

    def _write(self, conn: _Connection) -> None:
        if self._flush(conn):
            self._advance(conn)                    # pipelined requests already here

    def _expire(self) -> None:
        now = time.monotonic()
        for conn in [c for c in self._connections.values() if not c.busy and c.deadline < now]:
            if conn.inbox:
                log.debug("closing a connection of pid %d: request not whole within %.0f s",
                          conn.peer_pid, READ_TIMEOUT)
            self._close(conn)

    def _close(self, conn: _Connection) -> None:
        fd = conn.sock.fileno()
        if fd < 0:
            return
        if conn.events:
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
        conn.events = 0
        self._connections.pop(fd, None)
        conn.sock.close()

    def _drain_wake(self) -> None:
        try:
            os.read(self._wake_r, 65536)
        except BlockingIOError:
            pass
        while True:
            try:
                conn, data, close = self._done.get_nowait()
            except queue.Empty:
                return
            if conn.sock.fileno() >= 0:
                self._reply(conn, data, close)
                self._advance(conn)

    @staticmethod
    def _inline(request: Request) -> bool:
        """Requests answered on the I/O thread itself: those that only take the service
        lock for short kernel and journal work (which nothing holds for long: Docker and
        NVML calls happen outside it). A Docker isolate (asks the engine), usage (NVML) and
        anything unknown go to the workers."""
        if request.path in ("/v1/prepare", "/v1/update", "/v1/cleanup", "/v1/info"):
            return True
        return request.path == "/v1/isolate" and b'"docker_id"' not in request.body

    # --- the workers --------------------------------------------------------------------------

    def _worker(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            conn, request = item
            started = time.monotonic()
            data = self._handle(conn, request)
            self.latency.observe(request.path, time.monotonic() - started)
            self._done.put((conn, data, request.close))
            try:
                os.write(self._wake_w, b"x")
            except BlockingIOError:
                pass                                 # the pipe is full: the thread wakes anyway

    def _handle(self, conn: _Connection, request: Request) -> bytes:
        try:
            route = self.routes.get(request.path)
            if route is None:
                raise NotFound(f"no such endpoint: {request.method} {request.path}")
            method, handler = route
            if request.method != method:
                raise Method(f"{request.path} takes {method}, not {request.method}")
            answer = handler(request, conn)
            if isinstance(answer, str):
                return _response(200, answer.encode(), "text/plain; version=0.0.4",
                                 request.close)
            return _json_response(200, answer, request.close)
        except AgentError as e:
            return _json_response(e.status, {"error": str(e)}, request.close)
        except UserError as e:
            return _json_response(400, {"error": str(e)}, request.close)
        except Exception as e:           # a bug or an unexpected kernel answer
            log.exception("%s %s failed", request.method, request.path)
            return _json_response(500, {"error": f"internal error: {type(e).__name__}: {e}"},
                                  request.close)

    @staticmethod
    def _json(request: Request) -> object:
        try:
            return json_depth.loads(request.body or b"{}")
        except ValueError as e:
            raise BadRequest(f"request body is not JSON: {e}") from None

    @staticmethod
    def _caller(conn: _Connection) -> Owner:
        if conn.owner is None or not conn.owner.alive():
            conn.owner = Owner.of_process(conn.peer_pid)
            if conn.owner is None:
                raise Unavailable(f"the calling process {conn.peer_pid} is already gone")
        return conn.owner

    def _prepare(self, request: Request, conn: _Connection):
        return self.service.prepare(api.PrepareRequest.from_json(self._json(request)),
                                    self._caller(conn)).to_json()

    def _isolate(self, request: Request, conn: _Connection):
        return self.service.isolate(api.IsolateRequest.from_json(self._json(request)),
                                    self._caller(conn)).to_json()

    def _update(self, request: Request, conn: _Connection):
        return self.service.update(api.UpdateRequest.from_json(self._json(request)),
                                   self._caller(conn)).to_json()

    def _cleanup(self, request: Request, conn: _Connection):
        return self.service.cleanup(api.CleanupRequest.from_json(self._json(request))).to_json()

    def _usage(self, request: Request, conn: _Connection):
        ids = request.query.get("container_id")
        if not ids:
            raise BadRequest("'container_id' is missing from the query (?container_id=ID)")
        return self.service.usage(api.check_container_id(ids[0])).to_json()

    def _info(self, request: Request, conn: _Connection):
        return self.service.info()

    def _health(self, request: Request, conn: _Connection):
        return self.service.health_report().to_json()

    def _metrics(self, request: Request, conn: _Connection) -> str:
        return metrics.render(self.service, self.latency)

    # --- stopping -----------------------------------------------------------------------------

    def shutdown(self) -> None:
        self._stop.set()
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def server_close(self) -> None:
        for conn in list(self._connections.values()):
            self._close(conn)
        try:
            self._selector.close()
        except Exception:
            pass
        self.sock.close()
        self._unlink()

    def _unlink(self) -> None:
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
