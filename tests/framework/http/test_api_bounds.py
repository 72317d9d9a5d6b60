"""The Marathon API holds what a client can make it hold: `mesos-gpu framework` as its
own process (its RSS and threads read from /proc), flooded with more connections than
--http_max_connections (503 beyond, a thread each at most), slow drips (a request
must be whole within --http_request_timeout, however slowly it comes, where the
socket's timeout was per read: a byte a minute held a thread for ever), and pipelined
requests never read (the kernel's buffers push back). Other clients are served once
the flood ends, and during it where a connection is free."""
import json
import select
import signal
import socket
import subprocess
import sys
import threading

import pytest

from localcluster import processes
from tests.bed.waiting import wait_until
from tests.bed.http_client import Client

CAP = 8
REQUEST_TIMEOUT = 2.0
MIB = 1 << 20


def proc_status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


@pytest.fixture
def framework(cluster, tmp_path):
    port = processes.free_port()
    log = open(tmp_path / "framework.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mesos_gpu", "framework", "--master", cluster.address,
         "--state_dir", str(tmp_path / "state"), "--http_port", str(port), "--http_open",
         "--http_max_connections", str(CAP), "--http_request_timeout", str(REQUEST_TIMEOUT)],
        stdout=log, stderr=subprocess.STDOUT)
    client = Client(f"http://127.0.0.1:{port}")
    try:
        wait_until(lambda: _answers(client), 60, "the framework's API", ignore=(OSError,))
        proc.port, proc.client = port, client
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        log.close()


def _answers(client: Client) -> bool:
    return client.get("/ping", timeout=5).status == 200


def _connect(framework) -> socket.socket:
    return socket.create_connection(("127.0.0.1", framework.port), timeout=30)


def test_connections_beyond_the_cap_get_503_and_threads_stay_bounded(framework):
    pid = framework.pid
    threads = proc_status(pid, "Threads")
    held = [_connect(framework) for _ in range(CAP)]
    try:
        for s in held:                       # each holds a thread: a request answered on it
            s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
        flood = [_connect(framework) for _ in range(100)]
        try:
            answers = []
            for s in flood:
                try:
                    answers.append(s.recv(4096))
                except ConnectionResetError:
                    answers.append(b"")
            refused = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
            assert refused and all(a == b"" or a.startswith(b"HTTP/1.1 503") for a in answers)
            assert b"too many connections" in refused[0]
            head, _, body = refused[0].partition(b"\r\n\r\n")
            assert json.loads(body)["message"].startswith("too many connections")
            assert f"Content-Length: {len(body)}\r\n".encode() in head + b"\r\n"
            assert proc_status(pid, "Threads") <= threads + CAP + 16
        finally:
            for s in flood:
                s.close()
    finally:
        for s in held:
            s.close()
    wait_until(lambda: _answers(framework.client), 30, ignore=(OSError,))


def test_a_slow_drip_is_cut_at_the_request_timeout(framework):
    """A byte every 0.2 s never trips a per-read timeout; the whole-request one closes it."""
    s = _connect(framework)
    closed = threading.Event()

    def drip() -> None:
        request = b"GET /ping HTTP/1.1\r\nX-Slow: " + b"a" * 10000 + b"\r\n\r\n"
        try:
            for i in range(len(request)):
                s.send(request[i:i + 1])
                if closed.wait(0.2):
                    return
        except OSError:
            return
    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    try:
        s.settimeout(REQUEST_TIMEOUT + 60)
        try:
            answer = s.recv(4096)
        except ConnectionResetError:
            answer = b""
        assert not answer.startswith(b"HTTP/1.1 200"), answer   # closed, never answered
        assert _answers(framework.client)
    finally:
        closed.set()
        s.close()


def test_pipelined_requests_never_read_are_pushed_back(framework):
    pid = framework.pid
    assert _answers(framework.client)
    before, threads = proc_status(pid, "VmRSS") * 1024, proc_status(pid, "Threads")
    request = b"GET /v2/info HTTP/1.1\r\nHost: x\r\n\r\n"
    floods = []
    try:
        for _ in range(4):     # each connected when it floods: an idle one is closed soon
            s = _connect(framework)
            floods.append(s)
            s.setblocking(False)
            sent = 0
            while sent < 200000:                 # 7 MB; far more than the buffers take
                try:
                    sent += s.send(request * 64) // len(request)
                except BlockingIOError:
                    if not select.select([], [s], [], 3.0)[1]:
                        break                    # pushed back: the server stopped reading
            assert sent < 200000
        grown = proc_status(pid, "VmRSS") * 1024 - before
        print(f"API RSS {before / MIB:.1f} -> {(before + grown) / MIB:.1f} MiB, threads "
              f"{threads} -> {proc_status(pid, 'Threads')}")
        assert grown < 32 * MIB, f"grew by {grown / MIB:.1f} MiB"
        assert proc_status(pid, "Threads") <= threads + len(floods)
        assert _answers(framework.client)        # a fifth connection is served meanwhile
    finally:
        for s in floods:
            s.close()
    assert _answers(framework.client)
