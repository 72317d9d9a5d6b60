"""The HTTP server in front of the API families (`Api`): the standard library's
ThreadingHTTPServer (one thread per connection, HTTP/1.1 keep-alive), with
authentication, bounded request bodies, JSON error bodies for every failure
(including the ones http.server answers itself), and the SSE stream.
"""
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional, Protocol

from framework.http.events import OVERFLOW, EventBus
from framework.http.routing import Request, Response
from framework.http.security import DEFAULT_MAX_BODY_BYTES, Authenticator
from framework.http.public_paths import is_public

log = logging.getLogger(__name__)


class Api(Protocol):
    """What the server serves: the API families' routes (framework/process/api_families.py)."""
    def handle(self, request: Request) -> Response: ...

KEEPALIVE_SECONDS = 15.0
SOCKET_TIMEOUT_SECONDS = 60.0


class MarathonHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's listen backlog is 5: a burst of clients (a deployment tool creating
    # 200 apps at once) overflowed it while the one accepting thread was busy starting
    # handler threads, and some connections were reset
    request_queue_size = 1024

    def __init__(self, address, api: Api, events: EventBus, auth: Authenticator,
                 max_body: int = DEFAULT_MAX_BODY_BYTES) -> None:
        super().__init__(address, MarathonHandler)
        self.api, self.events, self.auth, self.max_body = api, events, auth, max_body
        self.closing = threading.Event()
        self._thread: Optional[threading.Thread] = None
        # Set on an instance of several (--zk): forwards to the leader what this
        # instance does not answer itself (framework.http.leader_proxy).
        self.leader_proxy = None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

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


def serve(api: Api, events: EventBus, auth: Authenticator, host: str = "127.0.0.1",
          port: int = 0, max_body: int = DEFAULT_MAX_BODY_BYTES) -> MarathonHttpServer:
    """A started server (port 0: a free one; see `.url`)."""
    return MarathonHttpServer((host, port), api, events, auth, max_body).start()
