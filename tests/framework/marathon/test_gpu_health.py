"""GPU health end to end on the real bed: a Mesos 1.11 master and agent (with the
`gpu_metrics_port` attribute `mesos-gpu agent flags` prints), the agent daemon over
eight simulated V100s whose NVML takes faults at run time, the Docker engine, our
executor and the `mesos-gpu framework` service.

XID 79 on GPU 2 while tasks run: GPU 2 is unhealthy within 5 s, the task on it
fails naming XID 79, its replacement lands on a healthy GPU, no new task gets
GPU 2 (one beyond the healthy GPUs waits instead of failing at prepare), and
after the quiet period GPU 2 takes work again - nothing restarted. XID 13 changes
only a counter. The executors' GPU usage reaches the task JSON, the node's health
/v2/nodes, and the Prometheus project's parser reads both /metrics endpoints and
finds every series the issue names.
"""
import json
import time
import urllib.request

import pytest

from framework.http.events import OVERFLOW
from framework.process.framework_process import FrameworkProcess
from localcluster import fake_nvml
from localcluster.gpu_node import GpuNode, layout_for_driver_files
from localcluster.mesos import Agent, Master
from localcluster.processes import free_port
from tests.bed.prometheus import families, values
from tests.bed.framework_process import client_of, framework_args
from tests.bed.waiting import wait_until

HOSTNAME = "health-v100"
QUIET = 12                    # the daemon's --health_quiet_period, seconds
APP = "/health/train"


@pytest.fixture(scope="module")
def node(docker_engine):
    layout = layout_for_driver_files(fake_nvml.v100x8(), "health-v100")
    with GpuNode(layout, docker_engine.host, metrics_address=f"127.0.0.1:{free_port()}",
                 daemon_args=["--health_quiet_period", str(QUIET),
                              "--health_poll_interval", "0.5"]) as n:
        yield n


@pytest.fixture(scope="module")
def cluster(mesos_prefix, node):
    resources, attributes = node.flags()
    assert "gpu_metrics_port:" in attributes
    with Master() as master, Agent(master, resources, attributes, hostname=HOSTNAME) as agent:
        yield master, agent


@pytest.fixture(scope="module")
def service(cluster, node, docker_engine, tmp_path_factory):
    master, _ = cluster
    args = framework_args(master.address, tmp_path_factory.mktemp("health-state"),
                          "--agent_socket", str(node.socket), "--docker_host",
                          docker_engine.host, "--refuse_seconds", "1",
                          "--gpu_health_interval", "0.5", "--gpu_usage_interval", "1")
    running = FrameworkProcess(args).start()
    assert running.scheduler.wait_subscribed(30)
    yield running
    running.stop()


@pytest.fixture(autouse=True)
def no_app_left(service, node):
    """Each test leaves the node as it found it, pass or fail."""
    yield
    api = client_of(service)
    for app in api.get("/v2/apps").json["apps"]:
        api.delete(f"/v2/apps{app['id']}?force=true")
    wait_until(lambda: node.allocated() == [], timeout=60)


def tasks(api):
    return api.get(f"/v2/apps{APP}/tasks?gpus=true").json["tasks"]


def running(api, count):
    found = tasks(api)
    ok = len(found) == count and all(t["state"] == "TASK_RUNNING" for t in found)
    return found if ok else None


def gpu_state(node, minor):
    return next(g for g in node.client.health().gpus if g.minor == minor)


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def test_xid79_heals_without_a_restart_and_xid13_only_counts(service, cluster, node,
                                                              docker_engine, busybox_image):
    master, _ = cluster
    api = client_of(service)
    uuid = {g.minor: g.uuid for g in node.layout.gpus}
    created = api.post("/v2/apps", {
        "id": APP, "cmd": "sleep 3600", "cpus": 0.1, "mem": 32, "gpus": 1, "instances": 3,
        "container": {"type": "DOCKER", "docker": {"image": busybox_image()}}})
    assert created.status == 201, created.json
    first = wait_until(lambda: running(api, 3), timeout=120)
    on_gpu2 = [t for t in first if t["gpuUuids"] == [uuid[2]]]
    assert len(on_gpu2) == 1, first          # the allocator gives 0, 3, 2 first
    victim = on_gpu2[0]
    daemon_pid, agent_pid = node.proc.pid, cluster[1].pid

    # usage: the task's own process on its GPU, reported by its executor
    holding = next(h for h in node.containers().values() if h["uuids"] == [uuid[0]])
    pid = docker_engine.client().api.inspect_container(holding["docker_id"])["State"]["Pid"]
    node.nvml.process(0, pid, 2 << 30, sm_percent=64)
    with_usage = wait_until(lambda: [t for t in tasks(api) if t.get("gpuUsage", {}).get(
        "memoryUsedBytes") == 2 << 30], timeout=30)
    usage = with_usage[0]["gpuUsage"]
    assert usage["utilizationPercent"] == 64 and usage["gpus"][0]["uuid"] == uuid[0]

    # XID 79 on GPU 2
    events = service.events.subscribe(["status_update_event"])
    injected = time.monotonic()
    node.nvml.xid(2, 79)
    wait_until(lambda: gpu_state(node, 2).state == "unhealthy", timeout=5, interval=0.05)
    unhealthy_in = time.monotonic() - injected
    assert unhealthy_in < 5 and gpu_state(node, 2).reason == "XID 79 (GPU has fallen off the bus)"

    def failed_attempt():
        for f in master.state()["frameworks"]:
            for t in f["completed_tasks"]:
                if t["name"] == victim["id"] and t["state"] == "TASK_FAILED":
                    return t
        return None
    wait_until(failed_attempt, timeout=30)             # Mesos: the attempt on GPU 2 failed

    def told_why():                                   # /v2/events: why, as the user sees it
        frame = events.next(0.5)
        if not frame or frame is OVERFLOW:
            return None
        event = json.loads(frame.decode().split("data: ", 1)[1])
        return event if event["taskId"] == victim["id"] and "XID 79" in event["message"] \
            else None
    event = wait_until(told_why, timeout=30, interval=0)
    assert "stopped by the agent daemon: GPU 2 (" + uuid[2] + ") became unhealthy: XID 79 " \
           "(GPU has fallen off the bus)" in event["message"], event
    replaced = wait_until(lambda: (lambda ts: ts if ts and all(uuid[2] not in t["gpuUuids"]
                                                             for t in ts) else None)(
        running(api, 3)), timeout=90)
    assert {tuple(t["gpuUuids"]) for t in replaced} >= {(uuid[0],), (uuid[3],)}
    assert 2 not in node.allocated()

    # every healthy GPU taken, and one more: it waits, it is not sent to fail at prepare
    assert api.put(f"/v2/apps{APP}", {"instances": 8}).status == 200
    seven = wait_until(lambda: (lambda ts: ts if ts and len([t for t in ts if t["state"] ==
                                                           "TASK_RUNNING"]) == 7 else None)(
        tasks(api)), timeout=120)
    assert all(uuid[2] not in t["gpuUuids"] for t in seven)
    nodes = api.get("/v2/nodes").json["nodes"]
    assert [(n["hostname"], n["gpusUnhealthy"], n["gpusUnusable"]) for n in nodes] == [
        (HOSTNAME, 1, 1)]
    sick = [g for g in nodes[0]["gpus"] if g["state"] != "healthy"]
    assert [(g["minor"], g["xid"]) for g in sick] == [(2, 79)]
    assert api.get(f"/v2/nodes/{nodes[0]['agentId']}").json["gpusUnusable"] == 1

    def launched_attempts():
        return sum(len([t for t in f["tasks"] + f["completed_tasks"]
                        if t["name"].startswith("health_train")])
                   for f in master.state()["frameworks"])
    attempts = launched_attempts()
    time.sleep(3)
    assert launched_attempts() == attempts    # nothing launched to fail at prepare
    assert 2 not in node.allocated() and len(node.allocated()) == 7

    # after the quiet period GPU 2 is healthy and the waiting instance gets it
    eight = wait_until(lambda: running(api, 8), timeout=QUIET + 60)
    assert any(t["gpuUuids"] == [uuid[2]] for t in eight)
    assert gpu_state(node, 2).state == "healthy"
    assert (node.proc.pid, node.proc.poll(), cluster[1].pid) == (daemon_pid, None,
                                                                      agent_pid)  # no restart

    # XID 13 on a GPU with a task: a counter moves, nothing else
    before = sorted(t["id"] for t in eight)
    node.nvml.xid(0, 13)
    text = wait_until(lambda: (lambda t: t if 'xid="13"' in t else None)(
        scrape(f"{node.metrics_url}/metrics")), timeout=10)
    assert values(families(text)["mesos_gpu_xid_errors_total"], "xid")["13"] == 1
    time.sleep(1)
    assert all(g.state == "healthy" for g in node.client.health().gpus)
    assert sorted(t["id"] for t in running(api, 8)) == before

    # both endpoints through the Prometheus parser: every series named in the issue
    agent_series = families(scrape(f"{node.metrics_url}/metrics"))
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                 "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_XID_ERRORS",
                 "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                 "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
                 "mesos_gpu_gpus_allocated", "mesos_gpu_gpu_allocated", "mesos_gpu_gpu_health",
                 "mesos_gpu_ledger_writes_total", "mesos_gpu_api_request_seconds",
                 "mesos_gpu_gpu_health_transitions_total",
                 "mesos_gpu_task_gpu_memory_used_bytes",
                 "mesos_gpu_task_gpu_utilization_percent"):
        assert agent_series[name].samples, name
    assert "mesos_gpu_device_rule_repairs_total" in agent_series
    gpu0 = next(s for s in agent_series["DCGM_FI_DEV_FB_USED"].samples
                if s.labels["UUID"] == uuid[0])
    assert gpu0.labels["minor"] == "0" and gpu0.labels["modelName"] == "Tesla V100-SXM2-16GB"
    assert gpu0.labels["task_id"] and gpu0.labels["app_id"] == APP
    assert gpu0.labels["framework_id"] == service.scheduler.framework_id
    task_mem = [s for s in agent_series["mesos_gpu_task_gpu_memory_used_bytes"].samples
                if s.labels["UUID"] == uuid[0]]
    assert [s.value for s in task_mem] == [2 << 30]
    assert agent_series["mesos_gpu_containers_stopped_for_gpu_fault_total"].samples[0].value == 1
    framework_series = families(api.get("/metrics/prometheus").raw.decode())
    for name in ("mesos_gpu_tasks_running_gauge", "mesos_gpu_tasks_pending_gauge",
                 "mesos_gpu_tasks_failed_gauge", "mesos_gpu_offers_received_gauge",
                 "mesos_gpu_tasks_launch_duration_timer_seconds",
                 "mesos_gpu_tasks_launched_counter", "mesos_gpu_tasks_health_checks_healthy_counter",
                 "mesos_gpu_tasks_health_checks_unhealthy_counter",
                 "mesos_gpu_tasks_gpu_faults_counter", "mesos_gpu_gpus_unhealthy_gauge",
                 "mesos_gpu_gpus_unusable_gauge", "mesos_gpu_agents_gpu_health_reporting_gauge"):
        assert name in framework_series, name
    assert framework_series["mesos_gpu_tasks_running_gauge"].samples[0].value == 8
    assert framework_series["mesos_gpu_tasks_gpu_faults_counter"].samples[0].value == 1
    assert framework_series["mesos_gpu_offers_received_gauge"].samples[0].value > 0
    print(f"XID 79 -> GPU 2 unhealthy in {unhealthy_in * 1000:.0f} ms")


def test_a_double_bit_error_stops_a_runc_task_and_it_moves(service, node, busybox_image):
    api = client_of(service)
    uuid = {g.minor: g.uuid for g in node.layout.gpus}
    app = "/health/runc"
    events = service.events.subscribe(["status_update_event"])
    assert api.post("/v2/apps", {
        "id": app, "cmd": "sleep 3600", "cpus": 0.1, "mem": 32, "gpus": 1,
        "container": {"type": "MESOS", "docker": {"image": busybox_image()}}}).status == 201
    (task,) = wait_until(lambda: (lambda ts: ts if len(ts) == 1 and ts[0]["state"] ==
                                "TASK_RUNNING" else None)(
        api.get(f"/v2/apps{app}/tasks?gpus=true").json["tasks"]), timeout=120)
    (held,) = task["gpuUuids"]
    minor = next(m for m, u in uuid.items() if u == held)
    node.nvml.ecc(minor, "dbe")                      # NVML index == minor on this layout

    def told_why():
        frame = events.next(0.5)
        if not frame or frame is OVERFLOW:
            return None
        event = json.loads(frame.decode().split("data: ", 1)[1])
        return event if event["taskId"] == task["id"] and "double-bit ECC error" in \
            event["message"] else None
    event = wait_until(told_why, timeout=30, interval=0)
    assert f"GPU {minor} ({held}) became unhealthy: double-bit ECC error" in event["message"]
    (moved,) = wait_until(lambda: (lambda ts: ts if len(ts) == 1 and ts[0]["state"] ==
                                 "TASK_RUNNING" and ts[0]["gpuUuids"] != [held] else None)(
        api.get(f"/v2/apps{app}/tasks?gpus=true").json["tasks"]), timeout=90)
    assert moved["gpuUuids"][0] in uuid.values()
    agent_id = api.get("/v2/nodes").json["nodes"][0]["agentId"]
    sick = [g for g in api.get(f"/v2/nodes/{agent_id}").json["gpus"] if g["state"] != "healthy"]
    assert [(g["minor"], g["cause"]) for g in sick] == [(minor, "ecc_dbe")]
    assert api.get("/v2/nodes/no-such-agent").status == 404
