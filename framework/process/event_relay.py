"""`/v2/events` on an instance that does not lead: the leader's event stream,
relayed into this instance's own event bus, so a client stays on the
instance it connected to across leader changes.

While another instance leads, one thread holds an SSE connection to it (with
this instance's credentials: the instances share them) and republishes each
event as the leader sent it (type, fields, timestamp). When the leader
changes or dies the thread connects to the next one; when this instance
leads, its own scheduler and API publish instead. Events of the leader's own
stream connections (`event_stream_attached`/`detached`) stay there. Events
sent while no leader is known, or while the relay reconnects, are not seen
here (Marathon's event stream has no replay either). With TLS (`tls`) the stream
is read over HTTPS, the leader's certificate checked.
"""
import json
import logging
import socket
import ssl
import threading
from typing import Callable, Optional

from framework.ha.leadership import Leadership
from framework.http.events import EventBus

log = logging.getLogger(__name__)

POLL = 0.5                          # how often a quiet stream checks for a new leader
CONNECT_TIMEOUT = 5.0
OWN_EVENTS = frozenset({"event_stream_attached", "event_stream_detached"})


class EventRelay:
    def __init__(self, events: EventBus, leadership: Leadership, address: Callable[[], str],
                 authorization: Optional[str], tls: Optional[ssl.SSLContext] = None) -> None:
        self.events = events
        self.tls = tls
        self.leadership = leadership
        self._address = address
        self._authorization = authorization
        self._stopped = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.relayed = 0
        self.source: Optional[str] = None       # the leader relayed from now

    def start(self) -> "EventRelay":
        self._thread = threading.Thread(target=self._run, name="event-relay", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _source(self) -> Optional[str]:
        """The leader to relay from now (None: this instance leads, or none is known)."""
        if self.leadership.is_leader():
            return None
        leader = self.leadership.leader()
        return None if leader in (None, self._address()) else leader

    def _run(self) -> None:
        while not self._stopped.is_set():
            leader = self._source()
            if leader is None:
                self._stopped.wait(0.2)
                continue
            try:
                self._relay(leader)
            except (OSError, ValueError) as e:
                log.info("event stream of the leader %s: %s; connecting again", leader, e)
                self._stopped.wait(POLL)
            finally:
                self.source = None

    def _relay(self, leader: str) -> None:
        host, _, port = leader.rpartition(":")
        conn = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT)
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_hostname=host)
            except BaseException:
                conn.close()
                raise
        with conn:
            auth = f"Authorization: {self._authorization}\r\n" if self._authorization else ""
            conn.sendall((f"GET /v2/events HTTP/1.1\r\nHost: {leader}\r\n"
                          f"Accept: text/event-stream\r\n{auth}\r\n").encode())
            conn.settimeout(POLL)
            buffer = self._headers(conn, leader)
            self.source = leader
            log.info("relaying the event stream of the leader %s", leader)
            while not self._stopped.is_set() and self._source() == leader:
                while b"\n\n" in buffer:
                    frame, buffer = buffer.split(b"\n\n", 1)
                    self._publish(frame)
                try:
                    data = conn.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    raise OSError("the stream ended")
                buffer += data

    def _headers(self, conn: socket.socket, leader: str) -> bytes:
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            try:
                data = conn.recv(65536)
            except socket.timeout:
                if self._stopped.is_set():
                    raise OSError("stopping") from None
                continue
            if not data:
                raise OSError("closed before answering")
            buffer += data
        head, _, rest = buffer.partition(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0].split()
        if len(status) < 2 or status[1] != b"200":
            raise OSError(f"answered {b' '.join(status[1:]).decode(errors='replace')}")
        return rest

    def _publish(self, frame: bytes) -> None:
        data = [line[len(b"data:"):].strip() for line in frame.split(b"\n")
                if line.startswith(b"data:")]
        if not data:
            return                      # a keep-alive comment
        event = json.loads(b"\n".join(data))
        if not isinstance(event, dict) or "eventType" not in event:
            raise ValueError(f"not a Marathon event: {frame[:80]!r}")
        if event["eventType"] in OWN_EVENTS:
            return
        self.events.relay(event)
        self.relayed += 1
