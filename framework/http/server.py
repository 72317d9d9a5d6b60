"""The HTTP server in front of the API families (`Api`): the standard library's
ThreadingHTTPServer (one thread per connection, HTTP/1.1 keep-alive), with
authentication, bounded request bodies, JSON error bodies for every failure
(including the ones http.server answers itself), and the SSE stream.

Bounded: at most `max_connections` connections (threads) at once, a 503 beyond
(answered by a few short-lived threads of their own, or the connection is closed
when those are busy too); a request must arrive whole, head and body, within
`request_timeout` of the server waiting for it, however slowly it drips (the
socket's own timeout is per read). With a TLS context the same server speaks
HTTPS, its handshake in the connection's thread under the same deadline.
"""
import io
import json
import logging
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional, Protocol

from framework.http.events import OVERFLOW, EventBus
from framework.http.routing import Request, Response
from framework.http.security import (DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONNECTIONS,
                                     DEFAULT_REQUEST_TIMEOUT, Authenticator)
from framework.http.public_paths import is_public

log = logging.getLogger(__name__)


class Api(Protocol):
    """What the server serves: the API families' routes (framework/process/api_families.py)."""
    def handle(self, request: Request) -> Response: ...

KEEPALIVE_SECONDS = 15.0
SOCKET_TIMEOUT_SECONDS = 60.0      # one write to a client that does not read
REFUSERS = 16                      # threads that may answer 503 at once beyond the cap
_REFUSAL_BODY = b'{"message":"too many connections to this server: try again soon"}'
REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
           b"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
           % (len(_REFUSAL_BODY), _REFUSAL_BODY))


class MarathonHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's listen backlog is 5: a burst of clients (a deployment tool creating
    # 200 apps at once) overflowed it while the one accepting thread was busy starting
    # handler threads, and some connections were reset
    request_queue_size = 1024

    def __init__(self, address, api: Api, events: EventBus, auth: Authenticator,
                 max_body: int = DEFAULT_MAX_BODY_BYTES, tls: Optional[ssl.SSLContext] = None,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 request_timeout: float = DEFAULT_REQUEST_TIMEOUT) -> None:
        super().__init__(address, MarathonHandler)
        self.api, self.events, self.auth, self.max_body = api, events, auth, max_body
        self.tls, self.max_connections, self.request_timeout = tls, max_connections, request_timeout
        self.connections = 0                 # held now (one thread each)
        self.refused = 0                     # 503s for too many connections, since the start
        self._count = threading.Lock()
        self._refusers = threading.BoundedSemaphore(REFUSERS)
        self.closing = threading.Event()
        self._thread: Optional[threading.Thread] = None
        # Set on an instance of several (--zk): forwards to the leader what this
        # instance does not answer itself (framework.http.leader_proxy).
        self.leader_proxy = None

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"{self.scheme}://{host}:{port}"

    def get_request(self):
        sock, address = super().get_request()
        if self.tls is not None:           # the handshake runs in the connection's thread
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def process_request(self, request, client_address) -> None:
        with self._count:
            full = self.connections >= self.max_connections
            if not full:
                self.connections += 1
        if not full:
            try:
                super().process_request(request, client_address)
            except BaseException:
                with self._count:
                    self.connections -= 1
                raise
            return
        self.refused += 1
        if not self._refusers.acquire(blocking=False):
            self.shutdown_request(request)   # the refusers are busy too: just close
            return
        threading.Thread(target=self._refuse, args=(request,), daemon=True).start()

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._count:
                self.connections -= 1

    def _refuse(self, request) -> None:
        """503 to a connection beyond the cap, within a short time, then close."""
        try:
            request.settimeout(2.0)
            if isinstance(request, ssl.SSLSocket):
                request.do_handshake()
            request.sendall(REFUSAL)
        except (OSError, ValueError):
            pass
        finally:
            self.shutdown_request(request)
            self._refusers.release()

    def handle_error(self, request, client_address) -> None:
        """A connection that failed (a TLS handshake a client gave up, a reset): one
        debug line, not socketserver's traceback on stderr."""
        log.debug("connection from %s failed", client_address[0], exc_info=True)

    def start(self) -> "MarathonHttpServer":
        self._thread = threading.Thread(target=self.serve_forever, name="marathon-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.closing.set()
        self.shutdown()
        self.server_close()
        if self._thread:
            self._thread.join(timeout=10)


class MarathonHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "mesos-gpu-marathon"
    timeout = SOCKET_TIMEOUT_SECONDS
    # Headers and body go out in separate writes: without TCP_NODELAY a small
    # answer waits ~40 ms for the client's delayed ACK.
    disable_nagle_algorithm = True
    server: MarathonHttpServer

    deadline = 0.0                   # the request being read must be whole by then

    def setup(self) -> None:
        self.deadline = time.monotonic() + self.server.request_timeout
        super().setup()
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.settimeout(self.server.request_timeout)
            self.connection.do_handshake()       # a failure ends the connection (handle_error)
        self.rfile = io.BufferedReader(_DeadlineReader(self), 65536)

    def handle_one_request(self) -> None:
        self.deadline = time.monotonic() + self.server.request_timeout
        super().handle_one_request()

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def log_message(self, fmt: str, *args) -> None:
        log.debug("%s " + fmt, self.client_address[0], *args)

    def send_error(self, code: int, message: Optional[str] = None, explain: Optional[str] = None) -> None:
        """http.server's own refusals (bad request line, unknown method, ...) as JSON."""
        self.close_connection = True
        self._send(Response(code, {"message": message or self.responses.get(code, ("error",))[0]}))

    def _serve(self, method: str) -> None:
        if self.server.closing.is_set():
            # stopped: a connection kept alive from before gets no answer from
            # a framework that is no longer running (a browser tries anew)
            self.close_connection = True
            return
        try:
            body = self._read_body()
            self.connection.settimeout(SOCKET_TIMEOUT_SECONDS)   # the request is in: answer
            if body is None:
                return
            request = Request.parse(method, self.path, body, self.headers.get("Accept", ""),
                                    self.client_address[0])
            if request.path.rstrip("/") != "/ping" and not is_public(method, request.path) \
                    and not self.server.auth.allows(self.headers.get("Authorization")):
                self._send(Response(401, {"message": "Invalid username or password."},
                                    {"WWW-Authenticate": 'Basic realm="Mesosphere Marathon"'}))
                return
            proxy = self.server.leader_proxy
            if proxy is not None and proxy.forwards(request):
                self._send(proxy.forward(method, self.path, self.headers, body))
                return
            if request.path.rstrip("/") == "/v2/events":
                self._stream_events(request)
                return
            self._send(self.server.api.handle(request))
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        except Exception as e:  # a bug: answer, log, keep serving
            log.exception("%s %s failed", method, self.path)
            self.close_connection = True
            self._send(Response(500, {"message": f"internal error: {type(e).__name__}"}))

    def _read_body(self) -> Optional[bytes]:
        """The body within the size limit; None when an error was already sent."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            self._send(Response(411, {"message": "Length Required: send Content-Length"}))
            return None
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b""
        try:
            length = int(raw)
            if length < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            self._send(Response(400, {"message": f"Invalid Content-Length: {raw!r}"}))
            return None
        if length > self.server.max_body:
            self.close_connection = True     # the body stays unread
            self._send(Response(413, {"message": f"Request body too large: {length} bytes, "
                                                 f"the limit is {self.server.max_body}"}))
            return None
        return self.rfile.read(length)

    def _send(self, response: Response) -> None:
        headers = dict(response.headers)
        if response.body is None:
            data = b""
        elif isinstance(response.body, bytes):
            data = response.body
        elif isinstance(response.body, str) and "Content-Type" not in headers:
            data = response.body.encode()
            headers["Content-Type"] = "text/plain; charset=utf-8"
        else:
            data = json.dumps(response.body, separators=(",", ":")).encode()
            headers.setdefault("Content-Type", "application/json")
        self.send_response(response.status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)

    def _stream_events(self, request: Request) -> None:
        if request.method != "GET":
            self._send(Response(405, {"message": "HTTP 405 Method Not Allowed"}, {"Allow": "GET"}))
            return
        if "text/event-stream" not in request.accept:
            self._send(Response(406, {"message": "Not Acceptable: send Accept: text/event-stream"}))
            return
        events = self.server.events
        subscription = events.subscribe(request.query.get("event_type") or None)
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.flush()
            events.publish("event_stream_attached", remoteAddress=request.client)
            while not self.server.closing.is_set():
                frame = subscription.next(timeout=min(KEEPALIVE_SECONDS, 1.0))
                if frame is OVERFLOW:
                    break
                if frame is None:
                    self._keepalive_tick()
                    continue
                self.wfile.write(frame)
                self.wfile.flush()
        except (ConnectionError, TimeoutError, OSError):
            pass
        finally:
            events.unsubscribe(subscription)
            events.publish("event_stream_detached", remoteAddress=request.client)

    _idle = 0.0

    def _keepalive_tick(self) -> None:
        """An SSE comment now and then, so a gone client is noticed (write fails)."""
        self._idle += 1.0
        if self._idle >= KEEPALIVE_SECONDS:
            self._idle = 0.0
            self.wfile.write(b":\n\n")
            self.wfile.flush()


class _DeadlineReader(io.RawIOBase):
    """The connection's reads, each with the time left until the handler's deadline: a
    client that sends a byte now and then cannot stretch a request past it."""

    def __init__(self, handler: MarathonHandler) -> None:
        self.handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self.handler.deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("the request did not arrive whole in time")
        self.handler.connection.settimeout(left)
        return self.handler.connection.recv_into(buffer)


def serve(api: Api, events: EventBus, auth: Authenticator, host: str = "127.0.0.1",
          port: int = 0, max_body: int = DEFAULT_MAX_BODY_BYTES) -> MarathonHttpServer:
    """A started server (port 0: a free one; see `.url`)."""
    return MarathonHttpServer((host, port), api, events, auth, max_body).start()
