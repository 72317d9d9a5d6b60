"""The scheduler's life with a real Mesos 1.11 master and separate agents:
placement on agent attributes (an agent that appears later), the GPU_RESOURCES
capability, a framework killed and restarted, a redirecting master address.

Agents find their own agent daemon through --executor_environment_variables
(the framework passes no socket), as a cluster with per-node settings would."""
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager

import pytest

from framework.scheduling.scheduler import GpuScheduler, RetryPolicy, SchedulerConfig
from framework.state.state_store import StateStore
from framework.tasks.taskinfo import ExecutorSettings
from framework.tasks.task_spec import TaskSpec
from localcluster import fake_nvml
from localcluster.mesos import Agent, Master
from tests.framework.e2e import wait_for
from tests.bed.waiting import wait_until
from localcluster.gpu_node import GpuNode
from common.errors import UserError

P100 = fake_nvml.custom("fw-p100", [fake_nvml.FakeGpu(
    0, "GPU-00000100-0000-4a7e-9c1d-000001000000", "00000000:04:00.0", "Tesla P100-PCIE-16GB",
    16 * 2**30, "6.0", 0x15F810DE)])
WAITING = "waiting for a matching offer"


@pytest.fixture(scope="module")
def master(mesos_prefix):
    with Master() as m:
        yield m


@contextmanager
def gpu_agent(master, layout, hostname):
    """A GPU node (daemon, device nodes) and its Mesos agent with the flags
    `mesos-gpu agent flags` prints; executors get the node's socket."""
    with GpuNode(layout, volume=False) as node:
        resources, attributes = node.flags(cpus=2, mem=1024)
        env = {"MESOS_EXECUTOR_ENVIRONMENT_VARIABLES": json.dumps(
            {"MESOS_GPU_AGENT_SOCKET": str(node.socket), "PATH": os.environ["PATH"]})}
        with Agent(master, resources, attributes, hostname=hostname, env=env) as agent:
            agent.node = node
            yield agent


@pytest.fixture(scope="module")
def p100_agent(master):
    with gpu_agent(master, P100, "agent-p100") as agent:
        yield agent


def make_scheduler(master, tmp_path, name, retry=RetryPolicy(max_attempts=1),
                   docker_host=None, **kw):
    config = SchedulerConfig(master=master if isinstance(master, str) else master.address,
                             name=name, refuse_seconds=1, retry=retry,
                             executor=ExecutorSettings(agent_socket=None, docker_host=docker_host),
                             **kw)
    return GpuScheduler(config, StateStore(tmp_path / name))


@pytest.fixture
def scheduler(master, tmp_path):
    sched = make_scheduler(master, tmp_path, "fw-sched-e2e").start()
    assert sched.wait_subscribed(30)
    yield sched
    sched.stop(teardown=True)


def wait_offers(sched, hostname, timeout=20):
    wait_until(lambda: sched.offers_seen().get(hostname, 0), timeout,
               lambda: f"an offer from {hostname} (offers seen: {sched.offers_seen()})")


def framework_capabilities(master, name):
    with urllib.request.urlopen(f"{master.url}/master/frameworks", timeout=10) as r:
        frameworks = json.load(r)["frameworks"]
    return [c.lower() for f in frameworks if f["name"] == name for c in f.get("capabilities", [])]


def test_task_waits_for_a_matching_agent_and_runs_on_it_when_it_appears(
        master, p100_agent, scheduler):
    rule = [["gpu_type", "LIKE", "tesla_(k80|v100)"]]
    scheduler.submit(TaskSpec(id="needs-v100", gpus=1, cpus=0.1, mem=32, constraints=rule,
                              cmd="echo $NVIDIA_VISIBLE_DEVICES"))
    wait_offers(scheduler, "agent-p100")
    time.sleep(1.5)                       # offers came and went: still waiting
    record = scheduler.task("needs-v100")
    assert (record.state, record.message) == (
        "PENDING", "waiting: no offered agent (1 offered) qualifies for "
                   "gpu_type:LIKE:tesla_(k80|v100)")
    with gpu_agent(master, fake_nvml.v100x8(), "agent-v100") as v100:
        record = wait_for(scheduler, "needs-v100", {"TASK_FINISHED", "TASK_FAILED"})
        assert record.state == "TASK_FINISHED", record
        assert record.hostname == "agent-v100"
        assert record.agent_fields["gpu_type"] == "tesla_v100"
        assert record.gpus[0] in {g.uuid for g in fake_nvml.v100x8().gpus}
        assert v100.node.allocated() == []
    assert p100_agent.node.allocated() == []


def test_framework_without_gpu_resources_gets_no_gpu_offers(master, p100_agent, tmp_path):
    gpu_sched = make_scheduler(master, tmp_path, "fw-with-gpus").start()
    cpu_sched = make_scheduler(master, tmp_path, "fw-no-gpus", gpu_resources=False,
                               gpu_scheduling="unrestricted").start()
    try:
        with Agent(master, "cpus:2;mem:1024", "gpu_type:none", hostname="agent-cpu"):
            assert cpu_sched.wait_subscribed(30) and gpu_sched.wait_subscribed(30)
            with pytest.raises(UserError, match="without the GPU_RESOURCES capability"):
                cpu_sched.submit(TaskSpec(id="gpu-task", gpus=1, cmd="true"))
            cpu_sched.submit(TaskSpec(id="on-gpu-agent", cpus=0.1, mem=32, cmd="true",
                                      constraints=[["hostname", "IS", "agent-p100"]]))
            cpu_sched.submit(TaskSpec(id="anywhere", cpus=0.1, mem=32, cmd="true"))
            gpu_sched.submit(TaskSpec(id="hold-offers", cpus=0.1, mem=32, cmd="true",
                                      constraints=[["hostname", "IS", "nowhere"]]))
            assert wait_for(cpu_sched, "anywhere", {"TASK_FINISHED"}).hostname == "agent-cpu"
            wait_offers(gpu_sched, "agent-p100")
            time.sleep(1.5)
            assert "agent-p100" not in cpu_sched.offers_seen()
            assert cpu_sched.task("on-gpu-agent").state == "PENDING"
            assert "gpu_resources" in framework_capabilities(master, "fw-with-gpus")
            assert "gpu_resources" not in framework_capabilities(master, "fw-no-gpus")
    finally:
        cpu_sched.stop(teardown=True)
        gpu_sched.stop(teardown=True)


def test_killed_framework_restarts_as_itself_and_keeps_its_task(master, p100_agent, tmp_path):
    state_dir = tmp_path / "state"
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.framework.scheduler_process", master.address,
         str(state_dir), "long-task", "sleep 120"],
        stdout=subprocess.PIPE, stderr=open(tmp_path / "scheduler.log", "wb"), text=True)
    try:
        line = child.stdout.readline().split()
        assert line[:1] == ["RUNNING"], (tmp_path / "scheduler.log").read_text()
        framework_id = line[1]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert p100_agent.node.allocated() == [0]            # the task kept running
    config = SchedulerConfig(master=master.address, name="fw-crash-test", refuse_seconds=1,
                             executor=ExecutorSettings(agent_socket=None))
    restarted = GpuScheduler(config, StateStore(state_dir))
    before = restarted.task("long-task")
    assert before.state == "TASK_RUNNING"                # recovered from the store
    restarted.start()
    try:
        assert restarted.wait_subscribed(30)
        assert restarted.framework_id == framework_id
        wait_until(lambda: restarted.task("long-task").updated != before.updated, 20,
                   "a reconciliation update")
        record = restarted.task("long-task")
        assert record.state == "TASK_RUNNING" and record.hostname == "agent-p100"
        assert record.attempts == 1                      # not relaunched
        restarted.kill("long-task")
        assert wait_for(restarted, "long-task", {"TASK_KILLED"}, 30).state == "TASK_KILLED"
        wait_until(lambda: not p100_agent.node.allocated(), 10, "the GPU back in the pool")
    finally:
        restarted.stop(teardown=True)


class _Redirect(http.server.BaseHTTPRequestHandler):
    """Answers everything with 307 to the leading master, as a non-leading
    Mesos master (or a load balancer in front of the masters) does."""
    target = ""

    def _redirect(self) -> None:
        self.send_response(307)
        self.send_header("Location", f"http://{self.target}{self.path}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _redirect

    def log_message(self, *args) -> None:
        pass


def test_subscribes_through_a_redirecting_master_address(master, p100_agent, tmp_path):
    handler = type("Redirect", (_Redirect,), {"target": master.address})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sched = make_scheduler(f"http://127.0.0.1:{server.server_address[1]}/", tmp_path,
                           "fw-redirected").start()
    try:
        assert sched.wait_subscribed(30)
        sched.submit(TaskSpec(id="via-redirect", gpus=1, cpus=0.1, mem=32, cmd="true"))
        assert wait_for(sched, "via-redirect", {"TASK_FINISHED"}).hostname == "agent-p100"
    finally:
        sched.stop(teardown=True)
        server.shutdown()


def test_failed_task_is_retried_with_back_off_then_fails(master, p100_agent, tmp_path):
    sched = make_scheduler(master, tmp_path, "fw-retry",
                           retry=RetryPolicy(max_attempts=3, backoff_seconds=0.5, factor=2),
                           docker_host=f"unix://{tmp_path}/no-docker.sock")
    seen = []
    sched.on_update(lambda r: seen.append((r.state, r.mesos_task_id, r.message)))
    sched.start()
    try:
        sched.submit(TaskSpec(id="flaky", gpus=1, cpus=0.1, mem=32, cmd="exit 3"))
        record = wait_for(sched, "flaky", {"TASK_FAILED"}, timeout=60)
        assert record.attempts == 3 and record.mesos_task_id == "flaky.retry2"
        assert record.message == "the command exited with code 3"
        retries = [m for state, _, m in seen if state == "PENDING" and "retrying" in m]
        assert [m.rsplit(" ", 1)[-1] for m in retries] == ["0.5s", "1s"]
        running = [mesos_id for state, mesos_id, _ in seen if state == "TASK_RUNNING"]
        assert running == ["flaky", "flaky.retry1", "flaky.retry2"]
        # a failure no retry can mend (no Docker engine on that agent) is not retried
        sched.submit(TaskSpec(id="no-engine", container="DOCKER", image="busybox", cpus=0.1,
                              mem=32, gpus=1, cmd="true"))
        record = wait_for(sched, "no-engine", {"TASK_FAILED"}, timeout=30)
        assert record.attempts == 1 and "no Docker engine" in record.message
        assert p100_agent.node.allocated() == []
    finally:
        sched.stop(teardown=True)


def test_offers_are_suppressed_while_idle_and_revived_for_new_work(master, p100_agent, scheduler):
    time.sleep(1.5)                      # settle: suppressed right after subscribing
    idle = scheduler.offers_seen().get("agent-p100", 0)
    time.sleep(3)                        # declined offers (1 s filter) would come back
    assert scheduler.offers_seen().get("agent-p100", 0) == idle
    scheduler.submit(TaskSpec(id="wake-up", gpus=1, cpus=0.1, mem=32, cmd="true"))
    assert wait_for(scheduler, "wake-up", {"TASK_FINISHED"}).hostname == "agent-p100"
    assert scheduler.offers_seen()["agent-p100"] > idle
