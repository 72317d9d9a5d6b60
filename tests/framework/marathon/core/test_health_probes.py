"""What one health check's probe makes of a real server, for the protocols and
options the bed tests do not reach: HTTPS (the framework's and the executor's,
certificates not verified), TCP, `ignoreHttp1xx`, and which port `portIndex` /
`port` pick."""
import os
import socket
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from framework.process import scheduler_metrics
from framework.executor.health import HealthChecker
from framework.tasks.health_check import HealthCheck
from framework.http.events import EventBus
from framework.marathon.core.task_health import TaskHealthMonitor
from framework.marathon.state.health_checks import HealthCheckDefinition
from framework.http.metrics import Metrics
from framework.marathon.core.group_manager import GroupManager
from framework.tasks.ports import PortRequest
from framework.process.scheduler_metrics import LaunchClock
from framework.state.state_store import StateStore
from framework.scheduling.task_record import RUNNING, TaskRecord
from framework.tasks.task_spec import TaskSpec
from tests.bed.waiting import wait_until

CHECK = {"gracePeriodSeconds": 0, "intervalSeconds": 1, "timeoutSeconds": 2,
         "maxConsecutiveFailures": 3, "delaySeconds": 0, "path": "/health"}


def typed(check: dict) -> HealthCheckDefinition:
    """A check as the monitor holds it: its app's JSON, read once."""
    return HealthCheckDefinition.from_json(check)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture(scope="module")
def https_port(tmp_path_factory):
    """A self-signed HTTPS server on 127.0.0.1."""
    where = tmp_path_factory.mktemp("tls")
    key, certificate = where / "key.pem", where / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=some-other-name", "-keyout", str(key),
                    "-out", str(certificate)], check=True, capture_output=True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def answering():
    """A server that answers every request with the status line it is given."""
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    state = {"status": b"200 OK"}

    def serve():
        while True:
            try:
                connection, _ = listening.accept()
            except OSError:
                return
            with connection:
                connection.recv(4096)
                connection.sendall(b"HTTP/1.1 " + state["status"] + b"\r\nContent-Length: 0\r\n"
                                   b"Connection: close\r\n\r\n")
    threading.Thread(target=serve, daemon=True).start()
    yield listening.getsockname()[1], state
    listening.close()


@pytest.fixture
def monitor(tmp_path):
    store = StateStore(tmp_path)
    yield TaskHealthMonitor(GroupManager(store, EventBus()))
    store.close()


def task_on(*host_ports: int) -> TaskRecord:
    spec = TaskSpec(id="a.1", app_id="/a", cmd="true", cpus=0.1, mem=8,
                    ports=tuple(PortRequest() for _ in host_ports))
    return TaskRecord(spec, state=RUNNING, hostname="127.0.0.1", ports=list(host_ports))


def test_framework_https_checks_do_not_verify_the_certificate(monitor, https_port):
    task = task_on(https_port)
    assert monitor._probe(task, typed(dict(CHECK, protocol="HTTPS"))) == (True, "")
    alive, cause = monitor._probe(task, typed(dict(CHECK, protocol="HTTPS", path="/missing")))
    assert alive is False and cause == "503 Service Unavailable"
    # plain HTTP against the TLS port is no answer
    alive, cause = monitor._probe(task, typed(dict(CHECK, protocol="HTTP")))
    assert alive is False and f"127.0.0.1:{https_port}/health" in cause


def test_port_index_and_port_pick_the_probed_port(monitor, https_port):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nothing = closed.getsockname()[1]          # no one listens here
    task = task_on(nothing, https_port)
    assert monitor._probe(task, typed(dict(CHECK, protocol="TCP", portIndex=1))) == (True, "")
    alive, cause = monitor._probe(task, typed(dict(CHECK, protocol="TCP", portIndex=0)))
    assert alive is False and f"TCP connect to 127.0.0.1:{nothing}" in cause
    assert monitor._probe(task, typed(dict(CHECK, protocol="HTTPS", port=https_port))) == (True, "")
    # a port index the task has no host port for
    alive, cause = monitor._probe(task_on(), typed(dict(CHECK, protocol="TCP", portIndex=0)))
    assert alive is False and "effectivePort" in cause


def test_ignore_http_1xx(monitor, answering):
    port, state = answering
    task = task_on(port)
    state["status"] = b"102 Processing"
    assert monitor._probe(task, typed(dict(CHECK, protocol="HTTP", ignoreHttp1xx=True))) == (None, "")
    assert monitor._probe(task, typed(dict(CHECK, protocol="HTTP", ignoreHttp1xx=False))) == \
        (False, "102 Processing")
    state["status"] = b"302 Found"
    assert monitor._probe(task, typed(dict(CHECK, protocol="HTTP")))[0] is True
    state["status"] = b"500 Internal Server Error"
    assert monitor._probe(task, typed(dict(CHECK, protocol="HTTP", ignoreHttp1xx=True))) == \
        (False, "500 Internal Server Error")


def test_the_executor_runs_mesos_https_checks(https_port):
    changes, _ = _checked(https_port, "/health", lambda changes, kills: changes)
    assert changes[0].healthy
    _, kills = _checked(https_port, "/missing", lambda changes, kills: kills)
    assert f"GET https://127.0.0.1:{https_port}/missing: HTTP 503" in kills[0].cause


def _checked(port: int, path: str, until) -> tuple:
    """The executor's checker of a MESOS_HTTPS check of `path` run against this
    process until `until(changes, kills)`; its reports."""
    changes, kills = [], []
    check = HealthCheck("MESOS_HTTPS", path=path, port=1, interval=0.1, timeout=2.0,
                        delay=0.0, grace_period=0.0, max_failures=1)
    checker = HealthChecker(check, port, os.getpid, dict(os.environ), changes.append,
                            kills.append, "test")
    checker.start()
    try:
        wait_until(lambda: until(changes, kills), 10,
                   lambda: f"the reports (changes, kills): {(changes, kills)}", interval=0.02)
    finally:
        checker.stop()
    return changes, kills


def test_each_result_of_the_frameworks_own_checks_is_counted_in_the_metrics(tmp_path, answering):
    """mesos_gpu.tasks.health_checks.{healthy,unhealthy}.counter count the
    framework's HTTP/HTTPS/TCP results as the service wires them, once per
    result; a failure within the grace period and an ignored 1xx are no result."""
    port, state = answering
    metrics = Metrics()
    store = StateStore(tmp_path)
    group_manager = GroupManager(store, EventBus())
    monitor = TaskHealthMonitor(group_manager, on_result=lambda healthy: (
        scheduler_metrics.count_health_check(metrics, healthy)))

    def counted():
        return tuple(metrics.counters.get(f"mesos_gpu.tasks.health_checks.{result}.counter", 0)
                     for result in ("healthy", "unhealthy"))

    try:
        task = task_on(port)
        task.started_at = time.time()
        group_manager.tasks[task.id] = task
        http = dict(CHECK, protocol="HTTP", maxConsecutiveFailures=0, gracePeriodSeconds=300)
        state["status"] = b"500 Internal Server Error"
        monitor._check(task, 0, typed(http))                           # in its grace period
        assert counted() == (0, 0)
        state["status"] = b"200 OK"
        monitor._check(task, 0, typed(http))
        monitor._check(task, 0, typed(http))
        assert counted() == (2, 0)
        state["status"] = b"503 Service Unavailable"            # after a success: no grace
        monitor._check(task, 0, typed(http))
        assert counted() == (2, 1)
        state["status"] = b"101 Switching Protocols"
        monitor._check(task, 0, typed(dict(http, ignoreHttp1xx=True)))
        assert counted() == (2, 1)
        monitor._check(task, 0, typed(dict(http, protocol="TCP")))
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            nothing = closed.getsockname()[1]
        monitor._check(task, 0, typed(dict(http, protocol="TCP", port=nothing, gracePeriodSeconds=0)))
        assert counted() == (3, 2)
        # executor-reported results (status updates' `healthy`) go to the same counters
        LaunchClock(metrics).status({"task_id": {"value": task.id}, "healthy": False})
        assert counted() == (3, 3)
    finally:
        store.close()


def test_checks_failing_again_while_the_kill_takes_its_time_kill_once(tmp_path, answering):
    """After maxConsecutiveFailures the task is killed once: further failures before it
    ends (a loaded node's Docker stop) publish no second kill and ask no second kill;
    a task that ends is forgotten."""
    port, state = answering
    store = StateStore(tmp_path)
    bus = EventBus()
    group_manager = GroupManager(store, bus)
    kills = []
    group_manager.request_kill = kills.append
    monitor = TaskHealthMonitor(group_manager)
    published = []
    bus_publish = bus.publish
    bus.publish = lambda kind, **fields: (published.append(kind), bus_publish(kind, **fields))
    try:
        task = task_on(port)
        group_manager.tasks[task.id] = task
        http = dict(CHECK, protocol="HTTP", maxConsecutiveFailures=2, gracePeriodSeconds=0)
        state["status"] = b"503 Service Unavailable"
        for _ in range(5):
            monitor._check(task, 0, typed(http))
        assert kills == [task.id]
        assert published.count("unhealthy_instance_kill_event") == 1
        assert published.count("failed_health_check_event") == 5
        monitor.forget(task.id)                    # it ended; the same id again is new
        for _ in range(2):
            monitor._check(task, 0, typed(http))
        assert kills == [task.id, task.id]
    finally:
        store.close()
