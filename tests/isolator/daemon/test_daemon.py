"""The daemon as an operator and an executor see it: start-up log, the API's
answers and refusals, usage and metrics, clean stop on SIGTERM."""
import os
import signal
import socket
import stat
import time

import pytest

from isolator.api import DOCKER, Grant
from isolator.client import AgentClient, AgentError
from localcluster import fake_nvml
from tests.bed.agent_daemon import NO_SUCH_PID, minors_of
from tests.bed.cgroups import new_prober


def _raw(sock_path: str, request: bytes) -> bytes:
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock_path)
    s.sendall(request)
    out = b""
    while b"\r\n\r\n" not in out or len(out.split(b"\r\n\r\n", 1)[1]) < int(
            out.split(b"Content-Length: ", 1)[1].split(b"\r\n", 1)[0] if b"Content-Length: " in out
            else 0):
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    s.close()
    return out


def test_start_log_socket_mode_and_sigterm(daemon_factory):
    agent = daemon_factory("v100x8")
    log = agent.log()
    assert "8 GPUs found (Tesla V100-SXM2-16GB), managing 8: minors [0, 1, 2, 3, 4, 5, 6, 7]" in log
    assert "control devices:" in log and "nvidia-uvm 240:0" in log
    assert "ledger recovered: 0 containers, 0 GPUs" in log
    sock = agent.work_dir / "agent.sock"
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(agent.work_dir).st_mode) == 0o700
    agent.client.prepare("kept", 2)
    assert agent.stop(signal.SIGTERM) == 0
    assert "SIGTERM received: stopping" in agent.log()
    assert "stopped: 1 containers hold 2 GPUs" in agent.log()
    assert not sock.exists()
    again = daemon_factory("v100x8", work_dir=agent.work_dir)
    assert "ledger recovered: 1 containers, 2 GPUs" in again.log()


def test_second_daemon_on_the_same_work_dir_is_refused(daemon_factory):
    first = daemon_factory("k80")
    second = daemon_factory("k80", work_dir=first.work_dir, start=False)
    assert second.run_to_exit() == 2
    assert f"another agent daemon (pid {first.proc.pid})" in second.log()
    assert first.client.info()["managed"] == [0, 1]          # the first one still serves


def test_selected_gpus_only(daemon_factory):
    agent = daemon_factory("v100x8", extra=["--nvidia_gpu_devices=6,7", "--resources=gpus:2"])
    assert agent.client.info()["managed"] == [6, 7]
    assert minors_of(agent.client.prepare("x", 2)) == [6, 7]
    with pytest.raises(AgentError, match="requested 1 GPUs but only 0 of 2 are free"):
        agent.client.prepare("y", 1)


def test_bad_flags_stop_the_daemon_with_one_line(daemon_factory):
    agent = daemon_factory("k80", extra=["--nvidia_gpu_devices=0,1", "--resources=gpus:3"],
                           start=False)
    assert agent.run_to_exit() == 2
    assert agent.log().strip().splitlines()[-1] == (
        "mesos-gpu agent: error: '--resources' and '--nvidia_gpu_devices' specify different "
        "numbers of GPU devices: gpus:3 but 2 indices (0,1)")


def test_prepare_answer_matches_the_contract(daemon_factory, dev_dir):
    agent = daemon_factory("k80")
    a = agent.client.prepare("c1", 1, container_type=DOCKER)
    raw = a.to_json()
    assert set(raw) >= {"container_id", "container_type", "gpus", "devices", "env",
                        "driver_version", "cuda_driver_version", "volume"}
    assert Grant.from_json(raw) == a                    # the typed contract round-trips
    g = a.gpus[0]
    assert set(raw["gpus"][0]) >= {"index", "minor", "uuid", "name", "memory_total",
                                   "pci_bus_id", "compute_capability", "board_id", "major",
                                   "device_path"}
    assert a.container_type == DOCKER
    assert {d.path: (d.major, d.minor, d.access) for d in a.devices} == {
        str(dev_dir / "nvidiactl"): (195, 255, "rwm"),
        str(dev_dir / "nvidia-uvm"): (240, 0, "rwm"),
        str(dev_dir / "nvidia-uvm-tools"): (240, 1, "rwm"),
        str(dev_dir / f"nvidia{g.minor}"): (195, g.minor, "rwm")}
    assert a.env == {"NVIDIA_VISIBLE_DEVICES": g.uuid, "CUDA_VISIBLE_DEVICES": "0"}
    assert (a.driver_version, a.cuda_driver_version, a.volume) == ("535.54.03", "12.2", None)
    none = agent.client.prepare("c0", 0)
    assert none.gpus == () and none.env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert len(none.devices) == 3                       # control devices even with 0 GPUs


def test_refusals(daemon_factory, probers):
    agent = daemon_factory("k80")
    c = agent.client
    first = c.prepare("a", 1)
    assert c.prepare("a", 1) == first                   # the same request again: a retry
    cases = [
        (lambda: c.prepare("a", 2), 409, "container a is already prepared"),
        (lambda: c.prepare("b", 2), 409, "requested 2 GPUs but only 1 of 2 are free"),
        (lambda: c.prepare("b", 0.5), 400, "is fractional"),
        (lambda: c.prepare("b", -1), 400, "non-negative integer"),
        (lambda: c.prepare("b", 1, container_type="vm"), 400,
         "'container_type' must be one of MESOS, DOCKER"),
        (lambda: c.prepare("../etc", 1), 400, "'container_id' must be"),
        (lambda: c.isolate("nope", pid=1), 404, "unknown container nope"),
        (lambda: c.isolate("a", pid=99999999), 400, "no such process"),
        (lambda: c.isolate("a", pid="1"), 400, "'pid' must be a positive integer"),
        (lambda: c.isolate("a", pid=1), 403, "neither the caller"),       # init is not ours
        (lambda: c.isolate("a", docker_id="abc"), 400, "isolate it by 'pid'"),
        (lambda: c.isolate("a"), 400, "give exactly one of 'pid'"),
        (lambda: c.update("nope", 1), 404, "unknown container"),
        (lambda: c.update("a", 3), 409, "requested 2 GPUs but only 1 of 2"),
        (lambda: c.cleanup("nope"), 404, "unknown container"),
        (lambda: c.usage("nope"), 404, "unknown container"),
    ]
    for call, status, text in cases:
        with pytest.raises(AgentError) as e:
            call()
        assert (e.value.status, text in str(e.value)) == (status, True), str(e.value)
    info = c.info()
    assert list(info["containers"]) == ["a"] and len(info["free"]) == 1     # unchanged
    c.update("a", 2)       # after the failed grow, a real one still works
    assert len(c.info()["free"]) == 0


def test_malformed_http_requests(daemon_factory):
    agent = daemon_factory("k80")
    sock = str(agent.work_dir / "agent.sock")
    r = _raw(sock, b"POST /v1/prepare HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                   b"Connection: close\r\n\r\n{nope")
    assert b" 400 " in r.split(b"\r\n")[0] and b"not JSON" in r
    r = _raw(sock, b"POST /v1/prepare HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                   b"Connection: close\r\n\r\n[]")
    assert b"must be a JSON object" in r
    r = _raw(sock, b"POST /v1/prepare HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                   b"Connection: close\r\n\r\n{}")
    assert b"'container_id' is missing" in r
    r = _raw(sock, b"GET /v2/nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert b" 404 " in r.split(b"\r\n")[0]
    r = _raw(sock, b"GET /v1/prepare HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert b" 405 " in r.split(b"\r\n")[0] and b"takes POST" in r
    for bad in (b"-5", b"abc", b"1.5", b"99999999999"):
        r = _raw(sock, b"POST /v1/prepare HTTP/1.1\r\nHost: x\r\nContent-Length: " + bad +
                 b"\r\n\r\n{}")
        assert b" 400 " in r.split(b"\r\n")[0], (bad, r)
        assert b"Content-Length" in r or b"over" in r, r
    r = _raw(sock, b"BREW /v1/prepare\r\n\r\n")
    assert b" 400 " in r.split(b"\r\n")[0] and b"malformed request line" in r
    r = _raw(sock, b"POST /v1/prepare HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert b" 400 " in r.split(b"\r\n")[0] and b"Transfer-Encoding" in r
    assert agent.client.info()["containers"] == {}       # nothing was prepared by any of it


def test_usage_reports_nvml_figures_and_the_containers_processes(daemon_factory, probers):
    p = new_prober(probers)
    lay = fake_nvml.layout("k80")
    lay.name = "k80-busy"
    lay.utilization = {0: (87, 45), 1: (3, 1)}
    lay.processes = {0: [(p.pid, 3 * 2**30), (NO_SUCH_PID, 2**30)]}
    agent = daemon_factory(lay)
    c = agent.client
    assert minors_of(c.prepare("busy", 1)) == [0]
    c.isolate("busy", pid=p.pid)
    u = c.usage("busy")
    assert u.memory_used == 4 * 2**30 and u.memory_total == 12 * 2**30 - 2**28
    assert u.task_memory_used == 3 * 2**30            # its own process, not the stranger
    g = u.gpus[0]
    assert (g.minor, g.gpu_utilization, g.memory_utilization) == (0, 87, 45)
    assert {(x.pid, x.memory_used, x.in_container) for x in g.processes} == {
        (p.pid, 3 * 2**30, True), (NO_SUCH_PID, 2**30, False)}


def test_metrics_in_prometheus_text(daemon_factory):
    agent = daemon_factory("v100x8")
    agent.client.prepare("m1", 2)
    agent.client.prepare("m2", 1, container_type=DOCKER)
    text = agent.client.metrics()
    lines = text.splitlines()
    assert "mesos_gpu_gpus_total 8" in lines
    assert "mesos_gpu_gpus_allocated 3" in lines
    assert "mesos_gpu_gpus_free 5" in lines
    assert ('mesos_gpu_container_gpus{container_id="m1",container_type="MESOS",'
            'state="prepared"} 2') in lines
    assert ('mesos_gpu_container_gpus{container_id="m2",container_type="DOCKER",'
            'state="prepared"} 1') in lines
    assert "mesos_gpu_ledger_writes_total 2" in lines
    assert any(x.startswith('mesos_gpu_api_request_seconds_count{route="/v1/prepare"} ')
               for x in lines)
    assert sum(1 for x in lines if x.startswith("mesos_gpu_gpu_allocated{") and x.endswith(" 1")) == 3
    assert "# TYPE mesos_gpu_gpus_total gauge" in lines


def test_node_without_nvml_serves_zero_gpus(daemon_factory):
    agent = daemon_factory("nolib")
    assert "0 GPUs managed: no GPUs: NVML library libnvidia-ml.so.1 not found" in agent.log()
    c = agent.client
    assert c.prepare("cpu-task", 0).gpus == ()
    with pytest.raises(AgentError, match="requested 1 GPUs but only 0 of 0 are free"):
        c.prepare("gpu-task", 1)
    assert "mesos_gpu_gpus_total 0" in c.metrics()


def test_unreachable_daemon_is_a_clear_client_error(tmp_path):
    started = time.monotonic()
    with pytest.raises(AgentError) as e:
        AgentClient(str(tmp_path / "agent.sock"), connect_timeout=1.0).info()
    assert e.value.status == 503 and "not reachable at" in str(e.value)
    assert "within 1 s" in str(e.value)
    assert 0.5 < time.monotonic() - started < 10          # it retried, then gave up


def test_prepared_but_never_isolated_is_reaped(daemon_factory):
    agent = daemon_factory("k80", extra=["--prepare_timeout", "0.3"])
    agent.client.prepare("abandoned", 2)
    deadline = time.monotonic() + 10
    while agent.client.info()["containers"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert agent.client.info()["free"] == [0, 1]
    assert "abandoned released GPUs [0, 1]: prepared" in agent.log()
    assert "never isolated" in agent.log()
