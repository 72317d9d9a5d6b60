"""Each listener of the agent daemon (the executors' unix socket, the TCP metrics port)
flooded as a hostile or broken client would: `GET /metrics` pipelined as fast as the
socket takes it and no answer ever read, and slow drips of a request a byte at a time.

Before the fix one such client took the daemon from 38 to 110 MiB in 20 s, still
growing: it rendered /metrics again for every request and queued the answers. Now it
reads a connection only while no answer is owed on it, so the flooding client is pushed
back by the kernel's buffers: the daemon's memory and threads stay where they were, and
other clients are served meanwhile."""
import os
import select
import socket
import threading
import time
import urllib.request

import pytest

from isolator.daemon import server
from isolator.client import AgentClient
from tests.bed.waiting import wait_until

PIPELINED = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
LIMIT = 1000000             # requests a client sends at most (35 MB; the unbounded daemon took all)
STALLED = 3.0               # seconds the socket stays unwritable: the daemon stopped reading
MIB = 1 << 20


def status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def rss(pid: int) -> int:
    return status(pid, "VmRSS") * 1024


def flood(sock: socket.socket, request: bytes = PIPELINED, limit: int = LIMIT) -> int:
    """Pipeline `request` without reading until the daemon stops taking bytes (or `limit`
    requests went); returns how many requests the kernel took."""
    sock.setblocking(False)
    sent, pending = 0, b""
    while sent < limit * len(request):
        if not pending:
            pending = request * 64
        try:
            n = sock.send(pending)
        except BlockingIOError:
            if not select.select([], [sock], [], STALLED)[1]:
                break
            continue
        pending, sent = pending[n:], sent + n
    return sent // len(request)


@pytest.fixture
def metrics_daemon(daemon_factory):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agent = daemon_factory("k80", extra=["--metrics_address", f"127.0.0.1:{port}"])
    agent.metrics_port = port
    return agent


def _connect_unix(agent):
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(agent.work_dir / "agent.sock"))
    return s


def _connect_tcp(agent):
    return socket.create_connection(("127.0.0.1", agent.metrics_port))


def _served(agent, listener: str) -> bool:
    if listener == "socket":
        return bool(AgentClient(str(agent.work_dir / "agent.sock"), connect_timeout=30).info())
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.metrics_port}/metrics",
                                timeout=30) as r:
        return r.status == 200 and b"mesos_gpu" in r.read()


@pytest.mark.parametrize("listener", ["socket", "metrics"])
def test_pipelined_requests_never_read_are_pushed_back(metrics_daemon, listener):
    agent = metrics_daemon
    pid = agent.proc.pid
    connect = _connect_unix if listener == "socket" else _connect_tcp
    assert _served(agent, listener)                     # warm: /metrics rendered once
    before, threads = rss(pid), status(pid, "Threads")
    floods = [connect(agent) for _ in range(4)]
    try:
        taken = [flood(s) for s in floods]
        grown = rss(pid) - before
        print(f"{listener}: {taken} requests taken before the push-back; RSS "
              f"{before / MIB:.1f} -> {rss(pid) / MIB:.1f} MiB")
        assert all(t < LIMIT for t in taken), taken     # the daemon stopped reading
        assert grown < 16 * MIB, f"the daemon grew by {grown / MIB:.1f} MiB"
        assert status(pid, "Threads") == threads
        assert _served(agent, listener)                 # others are served meanwhile
    finally:
        for s in floods:
            s.close()
    assert _served(agent, listener)


def test_a_flooding_client_is_dropped_once_it_stops_reading(metrics_daemon):
    """A connection with an answer owed that nobody reads is closed after the read
    timeout: its buffers go with it (the daemon's descriptors come back to what they were)."""
    agent = metrics_daemon
    pid = agent.proc.pid
    descriptors = len(os.listdir(f"/proc/{pid}/fd"))
    s = _connect_tcp(agent)
    try:
        flood(s)
        assert len(os.listdir(f"/proc/{pid}/fd")) == descriptors + 1
        wait_until(lambda: len(os.listdir(f"/proc/{pid}/fd")) == descriptors,
                   server.READ_TIMEOUT + 60, "the unread connection closed")
    finally:
        s.close()


@pytest.mark.parametrize("listener", ["socket", "metrics"])
def test_slow_drips_cost_a_buffer_not_a_thread_and_are_closed(metrics_daemon, listener):
    agent = metrics_daemon
    pid = agent.proc.pid
    connect = _connect_unix if listener == "socket" else _connect_tcp
    threads = status(pid, "Threads")
    drips = [connect(agent) for _ in range(100)]
    closed_at = {}
    stop = threading.Event()

    def drip() -> None:
        request = b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 4096 + b"\r\n\r\n"
        for i in range(len(request)):
            for n, s in enumerate(drips):
                if n in closed_at:
                    continue
                try:
                    s.send(request[i:i + 1])
                except OSError:
                    closed_at[n] = time.monotonic()
            if len(closed_at) == len(drips) or stop.wait(0.2):
                return
    dripper = threading.Thread(target=drip)
    dripper.start()
    try:
        assert _served(agent, listener)
        assert status(pid, "Threads") == threads
        # a request must be whole within READ_TIMEOUT: each drip is closed then
        for s in drips:
            assert _closed(s, server.READ_TIMEOUT + 30)
    finally:
        stop.set()
        dripper.join()
        for s in drips:
            s.close()
    assert _served(agent, listener)


def _closed(s: socket.socket, timeout: float) -> bool:
    """The daemon closed it: the read sees the end (or a reset), not a timeout."""
    s.settimeout(timeout)
    try:
        return s.recv(1 << 16) == b""
    except ConnectionResetError:
        return True


def test_the_metrics_port_takes_no_large_request_body(metrics_daemon):
    s = _connect_tcp(metrics_daemon)
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n")
        s.settimeout(30)
        assert s.recv(100).startswith(b"HTTP/1.1 400 ")
    finally:
        s.close()
