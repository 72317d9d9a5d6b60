"""GPU health in the real agent daemon, with faults injected into the fake NVML at run
time (localcluster/fake_nvml/control.py): XIDs and ECC errors as NVML events, what
has no event (off the bus, retired pages, row remapping, heat) by polling; the
state machine heals each GPU without a restart; the daemon SIGKILLed while a GPU
is unhealthy, NVML failing, events injected while the event set is restarting."""
import functools
import signal
import time
import urllib.request

import pytest

from isolator.api import TaskLabels
from isolator.client import AgentError
from localcluster.fake_nvml.control import ERROR_UNKNOWN, Control
from tests.bed import waiting
from tests.bed.prometheus import families as parse, values
from tests.bed.agent_daemon import minors_of
from tests.bed.cgroups import new_prober

FAST = ["--health_poll_interval", "0.2", "--health_quiet_period", "2",
        "--reconcile_interval", "0.5"]
# the daemon polls every 0.2 s: ask four times as often
wait_until = functools.partial(waiting.wait_until, interval=0.05)


@pytest.fixture
def sick_node(daemon_factory, tmp_path):
    """A daemon on eight V100s whose NVML takes faults from `node.nvml`."""
    def start(extra=(), layout="v100x8", work_dir=None, env=None):
        control = tmp_path / "nvml.control"
        agent = daemon_factory(layout, extra=[*FAST, *extra], control=control,
                               work_dir=work_dir, env=env)
        agent.nvml = Control(control)
        return agent
    return start


def state(agent, minor):
    return next(g for g in agent.client.health().gpus if g.minor == minor)


def test_critical_xid_stops_the_task_on_it_and_the_gpu_heals(sick_node, probers):
    agent = sick_node()
    c = agent.client
    task = new_prober(probers)
    victim = None
    for i in range(8):                        # containers until one holds GPU 2
        grant = c.prepare(f"job{i}", 1, task=TaskLabels(f"task-{i}", "fw-1", f"exec-{i}",
                                                         "/app"))
        if minors_of(grant) == [2]:
            victim = f"job{i}"
            break
    c.isolate(victim, pid=task.pid)

    started = time.monotonic()
    agent.nvml.xid(2, 79)
    wait_until(lambda: state(agent, 2).state == "unhealthy", 5, "GPU 2 unhealthy")
    assert time.monotonic() - started < 5
    s = state(agent, 2)
    assert (s.reason, s.cause, s.xid) == ("XID 79 (GPU has fallen off the bus)", "xid", 79)
    wait_until(lambda: not task.alive(), 5, "the task on GPU 2 killed")
    done = c.cleanup(victim)                  # what its executor asks when its task ended
    assert done.stopped is not None and "XID 79 (GPU has fallen off the bus)" in \
        done.stopped.message and done.stopped.xid == 79 and done.released == ()
    assert victim not in c.info()["containers"]
    for cid in c.info()["containers"]:        # the others keep their GPUs
        c.cleanup(cid)
    with pytest.raises(AgentError) as e:      # all eight: GPU 2 is not given
        c.prepare("eight", 8)
    assert e.value.status == 409 and "GPU 2: XID 79" in str(e.value)
    seven = minors_of(c.prepare("seven", 7))
    assert 2 not in seven
    c.cleanup("seven")

    wait_until(lambda: state(agent, 2).state == "healthy", 10, "GPU 2 healthy again")
    assert minors_of(c.prepare("all", 8)) == list(range(8))   # allocatable again, no restart
    families = parse(c.metrics())
    assert families["mesos_gpu_containers_stopped_for_gpu_fault_total"].samples[0].value == 1
    log = agent.log()
    assert "GPU 2 (GPU-00000100-0002-4a7e-9c1d-000001000002): healthy -> unhealthy: XID 79" in log
    assert "unhealthy -> probing" in log and "probing -> healthy: self-check passed" in log
    assert "released GPUs [2]: GPU 2 (GPU-00000100-0002-4a7e-9c1d-000001000002) became " \
           "unhealthy: XID 79" in log


def test_application_xid_only_counts(sick_node, probers):
    agent = sick_node()
    c = agent.client
    task = new_prober(probers)
    grant = c.prepare("app", 1)
    c.isolate("app", pid=task.pid)
    minor = grant.gpus[0].minor
    agent.nvml.xid(grant.gpus[0].index, 13)
    families = wait_until(lambda: _xid_counted(agent, minor, 13), 5, "XID 13 counted")
    assert all(g.state == "healthy" for g in agent.client.health().gpus)
    assert task.alive() and "app" in c.info()["containers"]
    assert values(families["DCGM_FI_DEV_XID_ERRORS"], "minor")[str(minor)] == 13


def _xid_counted(agent, minor, code):
    families = parse(agent.client.metrics())
    for s in families["mesos_gpu_xid_errors_total"].samples:
        if s.labels["minor"] == str(minor) and s.labels["xid"] == str(code):
            assert s.labels["effect"] == "application" and s.value == 1
            return families
    return None


def test_ecc_conditions_heat_and_the_bus(sick_node, probers):
    agent = sick_node()
    c = agent.client
    n = agent.nvml
    task = new_prober(probers)
    grant = c.prepare("dbe", 1)
    c.isolate("dbe", pid=task.pid)
    index = grant.gpus[0].index
    n.ecc(index, "sbe", 3)                    # corrected: counted, nothing else
    n.ecc(index, "dbe")                       # uncorrected: the work on it is lost
    wait_until(lambda: not task.alive(), 5, "the task on the DBE GPU stopped")
    assert state(agent, index).cause == "ecc_dbe"
    assert c.cleanup("dbe").stopped.message.endswith("double-bit ECC error")

    n.retired_pages(4, sbe=1, dbe=1, pending=True)
    n.remapped_rows(5, uncorrectable=1, failure=True)
    n.temperature(6, 93)
    n.lost(7)
    for minor, cause in ((4, "retired_pages_pending"), (5, "row_remap_failure"), (6, "thermal"),
                         (7, "gpu_lost")):
        wait_until(lambda: state(agent, minor).cause == cause, 5, f"GPU {minor}: {cause}")
    assert "at or above its slowdown temperature 90 C" in state(agent, 6).reason
    time.sleep(3)                             # past the quiet period: the conditions hold
    assert [state(agent, m).state for m in (4, 5, 6, 7)] == ["unhealthy"] * 4
    n.retired_pages(4)
    n.remapped_rows(5)
    n.temperature(6, 60)
    n.found(7)
    for minor in (4, 5, 6, 7):
        wait_until(lambda: state(agent, minor).state == "healthy", 10, f"GPU {minor} healthy")
    text = c.metrics()
    families = parse(text)
    sbe = [s for s in families["mesos_gpu_ecc_error_events_total"].samples
           if s.labels["type"] == "sbe"]
    assert [s.value for s in sbe] == [1]      # one event (of 3 errors)
    counts = {s.labels["minor"]: s.value
              for s in families["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"].samples}
    assert counts[str(grant.gpus[0].minor)] == 3
    assert {s.labels["minor"]: s.value
            for s in families["DCGM_FI_DEV_RETIRED_DBE"].samples}["4"] == 0


def test_keep_policy_leaves_the_work_running(sick_node, probers):
    agent = sick_node(["--on_gpu_fault", "keep"])
    c = agent.client
    task = new_prober(probers)
    grant = c.prepare("kept", 1)
    c.isolate("kept", pid=task.pid)
    agent.nvml.xid(grant.gpus[0].index, 48)
    wait_until(lambda: state(agent, grant.gpus[0].minor).state == "unhealthy", 5, "unhealthy")
    time.sleep(0.5)
    assert task.alive() and "kept" in c.info()["containers"]
    assert state(agent, grant.gpus[0].minor).container_id == "kept"


def test_override_makes_an_application_xid_critical(sick_node):
    agent = sick_node(["--xid_override", "13=unhealthy"])
    agent.nvml.xid(3, 13)
    wait_until(lambda: state(agent, 3).state == "unhealthy", 5, "XID 13 overridden")
    assert "classes the catalogue's, overridden: 13=unhealthy" in agent.log()


def test_sigkill_while_unhealthy_keeps_the_state(sick_node, probers):
    agent = sick_node(["--health_quiet_period", "6"])
    c = agent.client
    task = new_prober(probers)
    grant = c.prepare("gone", 1)
    c.isolate("gone", pid=task.pid)
    index, minor = grant.gpus[0].index, grant.gpus[0].minor
    agent.nvml.xid(index, 79)
    wait_until(lambda: not task.alive(), 5, "stopped")
    agent.nvml.lost(5)                        # and another GPU falls off the bus
    wait_until(lambda: state(agent, 5).state == "unhealthy", 5, "GPU 5 lost")
    agent.kill9()

    again = sick_node(["--health_quiet_period", "6"], work_dir=agent.work_dir)
    s = state(again, minor)
    assert (s.state, s.xid) == ("unhealthy", 79)
    assert state(again, 5).state == "unhealthy"          # NVML cannot read it; known from before
    assert "cannot be read" in again.log() and "as recorded before" in again.log()
    stopped = again.client.cleanup("gone").stopped      # the executor asks after the restart
    assert stopped is not None and "XID 79" in stopped.message
    with pytest.raises(AgentError) as e:
        again.client.prepare("eight", 8)
    assert e.value.status == 409
    again.nvml.found(5)
    wait_until(lambda: state(again, minor).state == "healthy", 15, "healed after the restart")
    wait_until(lambda: state(again, 5).state == "healthy", 15, "GPU 5 back")
    assert minors_of(again.client.prepare("eight", 8)) == list(range(8))


def test_sigkill_between_the_decision_and_the_stop_finishes_it_after_restart(sick_node,
                                                                            probers):
    """The daemon dies after the stop is on record, before it is done: the daemon that
    comes back stops the container (the event is not delivered again: its orphan sweep
    reads the record), and the executor still learns why. A quiet period longer than
    the test, so the GPU cannot heal before it is read, however slow the machine."""
    slow_heal = ["--health_quiet_period", "60"]
    agent = sick_node(slow_heal, env={"MESOS_GPU_CRASH_AT": "gpu_fault:after_record@doomed"})
    c = agent.client
    doomed, other = new_prober(probers), new_prober(probers)
    grant = c.prepare("doomed", 1)
    c.isolate("doomed", pid=doomed.pid)
    c.prepare("other", 1)
    c.isolate("other", pid=other.pid)
    g = grant.gpus[0]
    agent.nvml.xid(g.index, 79)
    assert agent.proc.wait(15) == -signal.SIGKILL
    assert doomed.alive()                               # decided, not done

    again = sick_node(slow_heal, work_dir=agent.work_dir)
    wait_until(lambda: not doomed.alive(), 10, "the stop done by the new daemon")
    wait_until(lambda: "doomed" not in again.client.info()["containers"], 5, "GPUs back")
    assert other.alive() and "other" in again.client.info()["containers"]
    assert state(again, g.minor).state == "unhealthy"
    assert f"container doomed released GPUs [{g.minor}]: GPU {g.minor} ({g.uuid}) became " \
           "unhealthy: XID 79" in again.log()
    stopped = again.client.cleanup("doomed").stopped
    assert stopped is not None and stopped.xid == 79
    assert values(parse(again.client.metrics())["mesos_gpu_containers_released_total"],
                  "reason")["gpu_unhealthy"] == 1
    # a container prepared later under the same id is not taken for the stopped one
    c2 = new_prober(probers)
    again.client.prepare("doomed", 1)
    again.client.isolate("doomed", pid=c2.pid)
    time.sleep(1.5)                                     # three sweeps
    assert c2.alive() and "doomed" in again.client.info()["containers"]


def test_events_while_waits_fail_and_the_event_set_restarts(sick_node):
    agent = sick_node(["--health_quiet_period", "60"])
    n = agent.nvml
    # waits fail: the XID injected meanwhile waits in the event set, and arrives once
    # the waits answer again (before the set is given up)
    n.fail("nvmlEventSetWait", ERROR_UNKNOWN)
    wait_until(lambda: "nvmlEventSetWait: Unknown Error" in agent.log(), 5, "waits failing")
    n.xid(1, 79)
    time.sleep(0.3)
    assert state(agent, 1).state == "healthy"          # not delivered while waits fail
    n.heal("nvmlEventSetWait")
    wait_until(lambda: state(agent, 1).state == "unhealthy", 10, "the XID after the failures")
    # waits fail until the set is made anew; a double-bit error while it is being made
    # again is still caught (the ECC counters; an XID there is not observable in NVML)
    n.fail("nvmlEventSetWait", ERROR_UNKNOWN)
    wait_until(lambda: "making the event set anew" in agent.log(), 10, "the set made anew")
    n.ecc(2, "dbe")
    time.sleep(0.5)
    n.heal("nvmlEventSetWait")
    wait_until(lambda: state(agent, 2).cause == "ecc_dbe", 10, "the DBE caught")
    families = parse(agent.client.metrics())
    assert families["mesos_gpu_nvml_event_set_restarts_total"].samples[0].value >= 1
    errors = values(families["mesos_gpu_nvml_errors_total"], "function")
    assert errors["nvmlEventSetWait"] >= 5
    assert state(agent, 1).state == "unhealthy"        # nothing was lost on the way


def test_nvml_query_errors_are_counted_and_fail_self_checks(sick_node):
    agent = sick_node()
    n = agent.nvml
    n.fail("nvmlDeviceGetPowerUsage", ERROR_UNKNOWN)
    wait_until(lambda: parse(agent.client.metrics())["DCGM_FI_DEV_POWER_USAGE"].samples == [],
               5, "no power figure while NVML cannot read it")
    assert values(parse(agent.client.metrics())["mesos_gpu_nvml_errors_total"],
                  "function")["nvmlDeviceGetPowerUsage"] > 0
    time.sleep(0.5)
    assert all(g.state == "healthy" for g in agent.client.health().gpus)   # not a GPU fault
    # ...but a GPU whose self-check meets the error stays unhealthy until NVML answers
    n.xid(3, 79)
    wait_until(lambda: state(agent, 3).state == "unhealthy"
               and "nvmlDeviceGetPowerUsage" in state(agent, 3).reason, 10,
               "the self-check fails on the NVML error")
    n.heal("nvmlDeviceGetPowerUsage")
    wait_until(lambda: state(agent, 3).state == "healthy", 10, "healthy once NVML answers")


def test_no_event_set_at_start_polls_then_listens(sick_node, tmp_path):
    control = tmp_path / "nvml.control"
    Control(control).fail("nvmlEventSetCreate", ERROR_UNKNOWN, times=4)
    agent = sick_node()
    wait_until(lambda: agent.client.health().monitor == "events and polling", 10,
               "the event set made at last")
    agent.nvml.xid(0, 48)
    wait_until(lambda: state(agent, 0).state == "unhealthy", 5, "events flow")


def test_metrics_over_tcp_with_task_labels(sick_node, probers, tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agent = sick_node(["--metrics_address", f"127.0.0.1:{port}"])
    c = agent.client
    task = new_prober(probers)
    grant = c.prepare("web", 1, task=TaskLabels("web.1", "fw-9", "mesos-gpu.web.1", "/web"))
    c.isolate("web", pid=task.pid)
    g = grant.gpus[0]
    agent.nvml.process(g.index, task.pid, 3 << 30, sm_percent=71)
    agent.nvml.process(g.index, 999999, 1 << 30, sm_percent=5)   # not the task's
    agent.nvml.utilization(g.index, 76, 40)

    def scrape():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert r.headers["Content-Type"].startswith("text/plain")
            return parse(r.read().decode())
    families = wait_until(lambda: (lambda f: f if any(
        s.value for s in f["mesos_gpu_task_gpu_memory_used_bytes"].samples) else None)(scrape()),
        5, "the task's memory sampled")
    (mem,) = families["mesos_gpu_task_gpu_memory_used_bytes"].samples
    assert mem.value == 3 << 30 and mem.labels == {
        "container_id": "web", "task_id": "web.1", "framework_id": "fw-9", "app_id": "/web",
        "gpu": str(g.index), "UUID": g.uuid, "minor": str(g.minor)}
    (util,) = families["mesos_gpu_task_gpu_utilization_percent"].samples
    assert util.value == 71
    used = {s.labels["UUID"]: s for s in families["DCGM_FI_DEV_FB_USED"].samples}
    assert used[g.uuid].value == 4096 and used[g.uuid].labels["task_id"] == "web.1"
    assert used[g.uuid].labels["modelName"] == "Tesla V100-SXM2-16GB"
    free = [s for s in used.values() if s.labels["UUID"] != g.uuid]
    assert len(free) == 7 and all(s.labels["task_id"] == "" for s in free)
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_TEMP",
                 "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_XID_ERRORS",
                 "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
                 "mesos_gpu_gpu_health", "mesos_gpu_gpus_allocated",
                 "mesos_gpu_ledger_writes_total", "mesos_gpu_api_request_seconds"):
        assert families[name].samples, name
    assert "mesos_gpu_device_rule_repairs_total" in families
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/health", timeout=5) as r:
        assert r.status == 200
    with pytest.raises(urllib.error.HTTPError) as e:     # nothing but reads over TCP
        urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/prepare", data=b"{}", method="POST"), timeout=5)
    assert e.value.code == 404
    # scrapers that stall mid-request cost a buffer each, not the next scrape
    stalled = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(4)]
    try:
        for s in stalled:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        assert scrape()["mesos_gpu_task_gpu_memory_used_bytes"].samples
    finally:
        for s in stalled:
            s.close()
    usage = c.usage("web")                    # what the executor reports
    assert usage.task_memory_used == 3 << 30 and usage.gpus[0].task_sm_utilization == 71


def test_the_executors_usage_reports_go_on_through_a_daemon_restart(sick_node, probers):
    """The executor's reporter (a thread in the executor) asks the daemon: the daemon
    SIGKILLed costs no update and not the reporter; the restarted one answers again."""
    from framework.executor.usage_reporter import UsageReporter
    from framework.gpus.gpu_usage import from_status
    from isolator.client import AgentClient
    agent = sick_node()
    task = new_prober(probers)
    g = agent.client.prepare("user", 1).gpus[0]
    agent.client.isolate("user", pid=task.pid)
    agent.nvml.process(g.index, task.pid, 1 << 30, sm_percent=20)
    sent = []
    reporter = UsageReporter(AgentClient(str(agent.work_dir / "agent.sock"), timeout=5),
                             "user", sent.append, every=0.2).start()
    try:
        wait_until(lambda: sent, 5, "a first report")
        assert from_status({"data": sent[-1]}).memory_used == 1 << 30
        agent.kill9()
        agent.nvml.process(g.index, task.pid, 4 << 30, sm_percent=90)
        time.sleep(1)                                   # samples fail: nothing is sent
        assert len(sent) == 1 and reporter._thread.is_alive()
        sick_node(work_dir=agent.work_dir)
        wait_until(lambda: from_status({"data": sent[-1]}).memory_used == 4 << 30, 10,
                   "reports from the restarted daemon")
        assert task.alive()
    finally:
        last = reporter.stop()
    usage = from_status({"data": last})
    assert (usage.peak_memory_used, usage.utilization) == (4 << 30, 90)


def test_metrics_address_taken_refuses_the_start(daemon_factory):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        agent = daemon_factory(extra=["--metrics_address", f"127.0.0.1:{port}"], start=False)
        assert agent.run_to_exit() != 0
    assert f"--metrics_address=127.0.0.1:{port}: cannot listen there" in agent.log()
    assert not (agent.work_dir / "agent.sock").exists()


@pytest.mark.parametrize("address,said", [
    ("no-such-host.invalid:9400", "--metrics_address=no-such-host.invalid:9400: "),
    ("192.0.2.1:9400", "--metrics_address=192.0.2.1:9400: cannot listen there: "),
    ("127.0.0.1", "--metrics_address=127.0.0.1: expected HOST:PORT")])
def test_a_bad_metrics_address_refuses_the_start_by_name(daemon_factory, address, said):
    agent = daemon_factory(extra=["--metrics_address", address], start=False)
    assert agent.run_to_exit() != 0
    assert said in agent.log()
    assert not (agent.work_dir / "agent.sock").exists()


def test_agent_flags_name_the_metrics_port_or_refuse_port_zero(mesos_gpu_cli):
    from localcluster import fake_nvml
    env = fake_nvml.layout("k80").env()
    r = mesos_gpu_cli("agent", "flags", "--metrics_address", "127.0.0.1:9400", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1].endswith(";gpu_metrics_port:9400"), r.stdout
    r = mesos_gpu_cli("agent", "flags", "--metrics_address", "127.0.0.1:0", env=env)
    assert r.returncode != 0 and "--metrics_address=127.0.0.1:0: give the port the daemon " \
        "listens on" in r.stderr


def test_info_shows_the_daemons_health(sick_node, mesos_gpu_cli):
    agent = sick_node(["--health_quiet_period", "60"])
    agent.nvml.xid(5, 79)
    wait_until(lambda: state(agent, 5).state == "unhealthy", 5, "unhealthy")
    env = {k: v for k, v in agent.env.items() if k.startswith(("FAKE_NVML", "MESOS_GPU_NVML"))}
    r = mesos_gpu_cli("info", "--work_dir", str(agent.work_dir), env=env)
    assert r.returncode == 0, r.stderr
    assert f"health from the agent daemon ({agent.work_dir}/agent.sock; events and polling)" \
        in r.stdout
    line = next(x for x in r.stdout.splitlines() if x.startswith("  [5]"))
    assert "UNHEALTHY: XID 79 (GPU has fallen off the bus) (since " in line
    assert ", self-check at " in line
    assert sum(x.endswith("  healthy") for x in r.stdout.splitlines()) == 7
