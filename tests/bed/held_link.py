"""A TCP link to a real server that can hold its answers part-way: the network
condition a test needs to catch a transfer in flight (a registry SIGKILLed
mid-pull, a task killed mid-pull, several pulls overlapping), without timing.

    with HeldLink(registry.port) as link:      # clients use 127.0.0.1:link.port
        link.hold(after=256 * 1024)            # each answer stops after 256 KiB
        ...                                    # the transfer is now in flight
        link.release()                         # the rest flows

Bytes go through unchanged both ways; only the server-to-client direction of
each connection waits, once it has passed `after` bytes, while the link holds.
A connection the server refuses (it is dead) is reset, as a dead host's port is.
"""
import socket
import struct
import threading
from typing import List

BUFFER = 64 * 1024


class HeldLink:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream = (upstream_host, upstream_port)
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port = self._server.getsockname()[1]
        self._released = threading.Event()
        self._released.set()
        self._after = 0
        self._lock = threading.Lock()
        self._open: List["_Connection"] = []
        self.connections = 0            # accepted so far
        self._closed = False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "HeldLink":
        threading.Thread(target=self._accept, daemon=True, name="held-link").start()
        return self

    def hold(self, after: int) -> None:
        self._after = after
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def held_connections(self) -> int:
        """Connections whose answer is held now while their client still has them open
        (a client that gives up on a held answer closes its end: it leaves this count)."""
        with self._lock:
            return sum(1 for c in self._open if c.held and not c.client_gone)

    def close(self) -> None:
        self._closed = True
        self._released.set()
        self._server.close()
        with self._lock:
            for conn in self._open:
                _close(conn.client)
                _close(conn.server)

    def __enter__(self) -> "HeldLink":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        # small buffers on the link's side: what the server has sent is, give or take
        # the client's own buffer, what the client has taken
        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER)
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER)
        try:
            server.settimeout(5)
            server.connect(self.upstream)
            server.settimeout(None)
        except OSError:
            server.close()
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()                  # reset: nothing listens behind the link
            return
        conn = _Connection(client, server)
        with self._lock:
            self._open.append(conn)
        down = threading.Thread(target=self._answer, args=(conn,), daemon=True)
        down.start()
        _copy(client, server)               # the client's requests, until it closes
        conn.client_gone = True
        down.join(timeout=None if self._released.is_set() else 0)
        with self._lock:
            self._open.remove(conn)
        if not down.is_alive():
            _close(client)
            _close(server)

    def _answer(self, conn: "_Connection") -> None:
        """Server to client; what would pass `after` bytes waits while the link
        holds (an idle connection, waiting for its server, is not held)."""
        sent = 0
        try:
            while True:
                data = conn.server.recv(65536)
                if not data:
                    break
                if not self._released.is_set() and sent + len(data) > self._after:
                    first = data[:max(0, self._after - sent)]
                    conn.client.sendall(first)
                    sent, data = sent + len(first), data[len(first):]
                    conn.held = True
                    self._released.wait()
                    conn.held = False
                conn.client.sendall(data)
                sent += len(data)
        except OSError:
            pass
        _shut_write(conn.client)
        if conn.client_gone:
            _close(conn.client)
            _close(conn.server)


class _Connection:
    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client, self.server = client, server
        self.held = False
        self.client_gone = False


def _copy(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    _shut_write(sink)


def _shut_write(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass
