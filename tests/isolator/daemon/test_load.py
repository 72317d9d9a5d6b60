"""The agent socket under load and abuse: many executors at once, a burst of
connections, a thousand clients that send half a request and stall, a daemon that
restarts under its clients. Nobody is refused, a fresh client is served at once,
and stalled connections are closed after the read timeout."""
import resource
import socket
import threading
import time

from isolator.daemon import server
from isolator.client import AgentClient, AgentError


def _raise_fd_limit(need: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(need, soft)), hard))


def test_64_clients_at_once_are_all_served(daemon_factory):
    agent = daemon_factory("v100x8")
    sock = str(agent.work_dir / "agent.sock")
    errors, done = [], []
    start = threading.Barrier(64)

    def client(n: int) -> None:
        c = AgentClient(sock, connect_timeout=30)
        start.wait()
        try:
            for i in range(5):
                cid = f"c{n}-{i}"
                c.prepare(cid, 0)
                c.cleanup(cid)
                done.append(cid)
        except AgentError as e:
            errors.append(f"{n}: {e}")
        finally:
            c.close()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == [] and len(done) == 64 * 5
    assert agent.client.info()["containers"] == {}


def test_a_burst_of_connections_is_queued_not_refused(daemon_factory):
    _raise_fd_limit(2048)
    agent = daemon_factory("k80")
    sock = str(agent.work_dir / "agent.sock")
    conns = []
    try:
        for _ in range(512):                          # all at once, nobody reads yet
            s = socket.socket(socket.AF_UNIX)
            s.connect(sock)                           # EAGAIN here was the old backlog of 5
            conns.append(s)
        for s in conns:
            s.sendall(b"GET /v1/info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        for s in conns:
            s.settimeout(30)
            head = s.recv(64)
            assert head.startswith(b"HTTP/1.1 200 "), head
    finally:
        for s in conns:
            s.close()
    assert f"backlog {server.somaxconn()}" in agent.log()


def test_a_thousand_stalled_connections_do_not_block_a_fresh_client(daemon_factory):
    _raise_fd_limit(4096)
    agent = daemon_factory("k80")
    sock = str(agent.work_dir / "agent.sock")
    stalled = []
    try:
        for i in range(1000):
            s = socket.socket(socket.AF_UNIX)
            s.connect(sock)
            s.sendall(b"POST /v1/prepare HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"contai")
            stalled.append(s)
        fresh = AgentClient(sock, connect_timeout=5)
        started = time.monotonic()
        grant = fresh.prepare("fresh", 1)
        served_in = time.monotonic() - started
        assert len(grant.gpus) == 1
        assert served_in < 1.0, f"a fresh client waited {served_in:.2f} s"
        # the stalled ones are closed once their request is not whole within the timeout
        for s in stalled[:20]:
            s.settimeout(server.READ_TIMEOUT + 10)
            assert s.recv(100) == b""
    finally:
        for s in stalled:
            s.close()
    assert list(agent.client.info()["containers"]) == ["fresh"]


def test_clients_wait_for_a_restarting_daemon(daemon_factory):
    agent = daemon_factory("k80")
    sock = str(agent.work_dir / "agent.sock")
    agent.stop()
    result = {}

    def late_client() -> None:
        try:
            result["grant"] = AgentClient(sock, connect_timeout=30).prepare("patient", 1)
        except AgentError as e:
            result["error"] = e
    t = threading.Thread(target=late_client)
    t.start()
    time.sleep(1.0)                                   # the daemon is down meanwhile
    daemon_factory("k80", work_dir=agent.work_dir)
    t.join(40)
    assert "error" not in result, result
    assert len(result["grant"].gpus) == 1
