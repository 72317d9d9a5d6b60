"""The executor's health checker (framework/executor/health.py) against real
servers and real commands: Mesos's timing (delay, grace period, interval,
timeout), what counts as a failure, when a task is killed. The task here is
this test process (the checker enters its namespaces: its own ones); the bed
tests run it against Docker and runc tasks (tests/framework/marathon/test_app_features.py)."""
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from framework.executor.health import HealthChecker
from framework.tasks.health_check import HealthCheck, HealthCheckError
from tests.bed.waiting import wait_until

FAST = dict(interval=0.1, timeout=1.0, delay=0.0, grace_period=0.0, max_failures=3)


class Switchable(ThreadingHTTPServer):
    daemon_threads = True
    status = 200
    hang = False


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.server.hang:
            time.sleep(5)
        self.send_response(self.server.status)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def server():
    s = Switchable(("127.0.0.1", 0), Handler)
    threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield s
    s.shutdown()
    s.server_close()


class Run:
    """A checker of `check` against this process, its reports collected."""

    def __init__(self, check: HealthCheck, port=None, env=None):
        self.changes, self.kills = [], []
        self.checker = HealthChecker(check, port, os.getpid, env or dict(os.environ),
                                     self.changes.append, self.kills.append, "test")
        self.checker.start()

    def wait(self, predicate, timeout=10.0):
        wait_until(predicate, timeout, lambda: f"the reports (changes, kills): "
                                               f"{(self.changes, self.kills)}", interval=0.02)

    def stop(self):
        self.checker.stop()


def test_http_health_failure_recovery_and_kill(server):
    run = Run(HealthCheck("MESOS_HTTP", path="/health", port=1, **FAST),
              port=server.server_address[1])
    try:
        run.wait(lambda: run.changes)
        assert run.changes[0].healthy and not run.kills
        server.status = 500
        run.wait(lambda: len(run.changes) >= 2)
        assert not run.changes[1].healthy and "HTTP 500" in run.changes[1].cause
        assert run.changes[1].consecutive_failures == 1
        server.status = 302                    # 200-399: healthy again, reported once
        run.wait(lambda: run.changes[-1].healthy)
        server.status = 404
        run.wait(lambda: run.kills)
        assert [c.consecutive_failures for c in run.changes if not c.healthy][-3:] == [1, 2, 3]
        assert run.kills[0].kill and "HTTP 404" in run.kills[0].cause
        time.sleep(0.3)
        assert len(run.kills) == 1              # it stops checking once it asked for the kill
    finally:
        run.stop()


def test_failures_in_the_grace_period_do_not_count_until_a_check_passed(server):
    server.status = 503
    run = Run(HealthCheck("MESOS_HTTP", port=1, **dict(FAST, grace_period=2.0)),
              port=server.server_address[1])
    try:
        time.sleep(1.0)                          # a margin of 1 s for a busy machine
        assert run.changes == []                 # failing, but within the grace period
        run.wait(lambda: run.changes)
        assert not run.changes[0].healthy
    finally:
        run.stop()
    server.status = 200
    run = Run(HealthCheck("MESOS_HTTP", port=1, **dict(FAST, grace_period=60)),
              port=server.server_address[1])
    try:
        run.wait(lambda: run.changes)
        server.status = 503                      # after a pass the grace period is over
        run.wait(lambda: len(run.changes) == 2)
        assert not run.changes[1].healthy
    finally:
        run.stop()


def test_nothing_is_checked_before_the_delay(server):
    started = time.monotonic()
    run = Run(HealthCheck("MESOS_HTTP", port=1, **dict(FAST, delay=0.5)),
              port=server.server_address[1])
    try:
        run.wait(lambda: run.changes)
        assert time.monotonic() - started >= 0.5
    finally:
        run.stop()


def test_a_hanging_endpoint_fails_at_its_timeout(server):
    server.hang = True
    run = Run(HealthCheck("MESOS_HTTP", port=1, **dict(FAST, timeout=0.3, max_failures=1)),
              port=server.server_address[1])
    try:
        run.wait(lambda: run.kills)
        assert "timed out after 0.3s" in run.kills[0].cause
    finally:
        run.stop()


def test_tcp_checks_and_max_failures_zero_kills_at_the_first_failure():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        run = Run(HealthCheck("MESOS_TCP", port=1, **FAST), port=port)
        run.wait(lambda: run.changes)
        assert run.changes[0].healthy
        run.stop()
    run = Run(HealthCheck("MESOS_TCP", port=1, **dict(FAST, max_failures=0)), port=port)
    try:
        run.wait(lambda: run.kills)
        assert "TCP connect to 127.0.0.1" in run.kills[0].cause and run.kills[0].consecutive_failures == 1
    finally:
        run.stop()


def test_a_command_runs_in_the_tasks_namespaces_with_its_environment():
    run = Run(HealthCheck("COMMAND", command='test "$MARKER" = yes', **FAST),
              env={"MARKER": "yes", "PATH": os.environ["PATH"]})
    try:
        run.wait(lambda: run.changes)
        assert run.changes[0].healthy
    finally:
        run.stop()
    run = Run(HealthCheck("COMMAND", command="echo why >&2; exit 3", **dict(FAST, max_failures=1)))
    try:
        run.wait(lambda: run.kills)
        assert run.kills[0].cause == "command exited with code 3: why"
    finally:
        run.stop()


def test_a_hanging_command_is_killed_at_its_timeout_and_leaves_nothing():
    marker = f"31.{time.monotonic_ns() % 10**9:09d}"       # a sleep of its own, to find it by
    run = Run(HealthCheck("COMMAND", command=f"sleep {marker}; true",
                          **dict(FAST, timeout=0.3, max_failures=1)))
    try:
        run.wait(lambda: run.kills)
        assert run.kills[0].cause.startswith("command timed out after 0.3s and was killed")
    finally:
        run.stop()
    time.sleep(0.2)
    left = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).find(marker) >= 0]
    assert left == []


def test_a_check_needs_what_it_probes():
    with pytest.raises(HealthCheckError, match="a COMMAND check needs a command"):
        HealthCheck("COMMAND")
    with pytest.raises(HealthCheckError, match="give port or port_index"):
        HealthCheck("MESOS_TCP")
    with pytest.raises(HealthCheckError, match="max_failures: must be 0 or more"):
        HealthCheck("MESOS_TCP", port=1, max_failures=-1)


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""
