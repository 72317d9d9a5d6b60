"""The two kinds of HTTP connection of the v1 API, on http.client: a SUBSCRIBE whose
answer is the event stream (chunked, RecordIO framed, open as long as the subscription),
and the calls, each answered at once (202) on a connection of their own.

Blocking sockets with a timeout: a stream read that times out is a silent peer (the
scheduler's heartbeat rule, the executor's); `close()` from another thread ends a read
in progress (stop, a new leading master)."""
import http.client
import json
import socket
import threading
import urllib.parse
from typing import Any, Iterator, Optional

from framework.mesos_api.recordio import Decoder

CONNECT_TIMEOUT = 10.0
CALL_TIMEOUT = 10.0
READ_SIZE = 65536


class Redirected(Exception):
    """307 to SUBSCRIBE: another master leads (`leader` is its host:port)."""

    def __init__(self, leader: str) -> None:
        super().__init__(f"redirected to the leading master {leader}")
        self.leader = leader


class Refused(Exception):
    """An answer other than the expected one: its status and (shortened) body."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host, int(port)


def _detail(response: http.client.HTTPResponse) -> str:
    body = response.read(4096).decode("utf-8", "replace")
    return " ".join(body.split()) or response.reason


def _json_headers(headers: dict[str, str]) -> dict[str, str]:
    return {"Content-Type": "application/json", "Accept": "application/json", **headers}


class EventStream:
    """One SUBSCRIBE: `open()` sends it and reads the answer's head; `events()` yields
    the events as dicts until the stream ends (StopIteration) or stays silent for
    `timeout` seconds (TimeoutError)."""

    def __init__(self, address: str, path: str, timeout: float) -> None:
        self.address = address
        self.path = path
        self.stream_id: Optional[str] = None
        self._timeout = timeout
        self._lock = threading.Lock()
        self._closed = False
        self._sock: Optional[socket.socket] = None
        self._conn: Optional[http.client.HTTPConnection] = None
        self._response: Optional[http.client.HTTPResponse] = None

    def open(self, body: dict, headers: dict[str, str]) -> None:
        host, port = split_address(self.address)
        conn = http.client.HTTPConnection(host, port, timeout=CONNECT_TIMEOUT)
        with self._lock:
            if self._closed:
                raise ConnectionAbortedError("closed before it was opened")
            self._conn = conn
        conn.connect()
        with self._lock:
            self._sock = conn.sock
            if self._closed:
                raise ConnectionAbortedError("closed while connecting")
        conn.sock.settimeout(self._timeout)
        conn.request("POST", self.path, body=json.dumps(body).encode(),
                     headers=_json_headers(headers))
        response = conn.getresponse()
        if response.status == 307:
            location = response.getheader("Location") or ""
            leader = urllib.parse.urlsplit(location if "//" in location else f"//{location}").netloc
            if not leader:
                raise Refused(307, f"a redirect without a leader (Location {location!r})")
            raise Redirected(leader)
        if response.status != 200:
            raise Refused(response.status, _detail(response))
        if not response.chunked:
            raise Refused(200, "the answer to SUBSCRIBE is not a chunked stream")
        self.stream_id = response.getheader("Mesos-Stream-Id")
        self._response = response

    def set_timeout(self, seconds: float) -> None:
        self._timeout = seconds
        sock = self._sock
        if sock is not None:
            try:
                sock.settimeout(seconds)
            except OSError:
                pass                      # closed meanwhile: the read ends on its own

    def events(self) -> Iterator[dict]:
        assert self._response is not None, "open() first"
        decoder = Decoder()
        while True:
            try:
                data = self._response.read1(READ_SIZE)
            except http.client.IncompleteRead:
                data = b""
            except (ValueError, AttributeError):  # http.client after close() from elsewhere
                data = b""
            if not data:
                return
            for record in decoder.feed(data):
                event = json.loads(record)
                if not isinstance(event, dict):
                    raise ValueError(f"an event that is not a JSON object: {record[:80]!r}")
                yield event

    def close(self) -> None:
        """Safe from any thread, more than once: a read in progress ends."""
        with self._lock:
            self._closed = True
            sock, conn = self._sock, self._conn
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if conn is not None:
            conn.close()


class CallConnection:
    """The calls of one subscription, one at a time, on a kept-alive connection to the
    master or agent that holds the stream."""

    def __init__(self, address: str, path: str, headers: dict[str, str]) -> None:
        self.address = address
        self.path = path
        self.headers = headers
        self._lock = threading.Lock()
        self._conn: Optional[http.client.HTTPConnection] = None

    def post(self, body: dict) -> Any:
        """The answer's JSON (None when it has no body); Refused for a status not 2xx."""
        data = json.dumps(body).encode()
        with self._lock:
            for attempt in (1, 2):
                reused = self._conn is not None
                if self._conn is None:
                    host, port = split_address(self.address)
                    self._conn = http.client.HTTPConnection(host, port, timeout=CALL_TIMEOUT)
                try:
                    self._conn.request("POST", self.path, body=data,
                                       headers=_json_headers(self.headers))
                    response = self._conn.getresponse()
                    if not 200 <= response.status < 300:
                        raise Refused(response.status, _detail(response))
                    answer = response.read()
                    break
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                    self._close()
                    if not reused or attempt == 2:
                        raise              # else the peer closed the idle connection: once more
                except BaseException:
                    self._close()
                    raise
        return json.loads(answer) if answer.strip() else None

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self._close()
