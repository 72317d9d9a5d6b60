"""Our v1 drivers against the real Mesos 1.11 of the bed, with nothing of the framework
above them: a recording scheduler on the scheduler driver, and the bed's command
executor (localcluster/mesos_local/scripts/command_executor.py, on our executor driver)
running the tasks.

What the master's own state proves: an acknowledged terminal update moves a task to
`completed_tasks` (an unacknowledged one stays in `tasks`), TEARDOWN completes the
framework, a re-subscription keeps the framework id. The rest of the framework on these
drivers: tests/framework/scheduling/ (failover, quorum, silent master, lifecycle)."""
import json
import threading
import time

import pytest

from framework.mesos_api.callbacks import Scheduler
from framework.mesos_api.scheduler_driver import SchedulerDriver
from framework.scheduling import mesos_driver
from framework.scheduling.mesos_credential import Credential
from tests.framework.scheduling.test_master_failover import MASTER_ENV, wait_until

TIMEOUT = 60


class Recorder(Scheduler):
    """Every callback as (name, args), waited on by the test; updates acknowledged."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []
        self.changed = threading.Condition()

    def _record(self, name: str, *args) -> None:
        with self.changed:
            self.calls.append((name, args))
            self.changed.notify_all()

    def registered(self, driver, framework_id, master_info):
        self._record("registered", framework_id, master_info)

    def reregistered(self, driver, master_info):
        self._record("reregistered", master_info)

    def disconnected(self, driver):
        self._record("disconnected")

    def resourceOffers(self, driver, offers):
        self._record("offers", offers)

    def statusUpdate(self, driver, status):
        self._record("update", status)
        driver.acknowledgeStatusUpdate(status)

    def error(self, driver, message):
        self._record("error", message)

    def wait(self, name: str, match=lambda *args: True, since: int = 0, timeout=TIMEOUT):
        """The args of the first `name` call from index `since` on that `match`es."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                for kind, args in self.calls[since:]:
                    if kind == name and match(*args):
                        return args
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {name} within {timeout} s: "
                                         f"{[c[0] for c in self.calls]}")
                self.changed.wait(left)

    def update(self, task_id: str, state: str, since: int = 0, **fields) -> dict:
        return self.wait("update", lambda s: s["task_id"]["value"] == task_id and
                         s["state"] == state and all(s.get(k) == v for k, v in fields.items()),
                         since)[0]


def framework_info(name: str, **more) -> dict:
    return {"user": "root", "name": name, "hostname": "127.0.0.1", "checkpoint": True,
            "failover_timeout": 300.0, **more}


def command_task(offer: dict, task_id: str, cmd: str) -> dict:
    return {"task_id": {"value": task_id}, "agent_id": offer["agent_id"], "name": task_id,
            "command": {"shell": True, "value": cmd},
            "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 0.1}},
                          {"name": "mem", "type": "SCALAR", "scalar": {"value": 32}}]}


def on_master(master, framework_id: str) -> dict:
    state = master.state()
    for key in ("frameworks", "completed_frameworks"):
        for framework in state[key]:
            if framework["id"] == framework_id:
                return {**framework, "where": key}
    return {}


def launched(recorder: Recorder, driver, task_id: str, cmd: str, since: int = 0) -> dict:
    """Launch `task_id` on the next offer; its TASK_RUNNING update."""
    (offers,) = recorder.wait("offers", since=since)
    driver.launchTasks([offers[0]["id"]], [command_task(offers[0], task_id, cmd)],
                       {"refuse_seconds": 1})
    if offers[1:]:
        driver.declineOffer([o["id"] for o in offers[1:]])
    return recorder.update(task_id, "TASK_RUNNING", since)


def test_subscribe_offers_launch_updates_reconcile_kill_teardown(mesos_master, mesos_agent):
    master = mesos_master()
    mesos_agent(master, "cpus:2;mem:512")
    recorder = Recorder()
    driver = SchedulerDriver(recorder, framework_info("driver-basic"), master.address)
    driver.start()
    try:
        framework_id, master_info = recorder.wait("registered")
        assert driver.framework_id == framework_id["value"] and driver.connected
        assert (master_info["hostname"], master_info["port"]) == ("127.0.0.1", master.port)
        assert master_info["version"] == "1.11.0"
        assert driver.master == master.address
        assert on_master(master, framework_id["value"])["active"]

        # an offer declined for a long while does not come back; the next one is launched on
        (offers,) = recorder.wait("offers")
        driver.declineOffer([o["id"] for o in offers], {"refuse_seconds": 1})
        mark = len(recorder.calls)
        running = launched(recorder, driver, "t-sleep", "sleep 300", since=mark)
        assert running["agent_id"] == offers[0]["agent_id"]

        # explicit reconciliation answers for the task, with its agent
        mark = len(recorder.calls)
        driver.reconcileTasks([{"task_id": {"value": "t-sleep"},
                                "agent_id": running["agent_id"]}])
        recorder.update("t-sleep", "TASK_RUNNING", mark, reason="REASON_RECONCILIATION")

        # a finished task: its acknowledged terminal update completes it on the master
        mark = len(recorder.calls)
        launched(recorder, driver, "t-echo", "echo hello", since=mark)
        recorder.update("t-echo", "TASK_FINISHED", mark)
        wait_until(lambda: "t-echo" in [t["id"] for t in on_master(
            master, framework_id["value"])["completed_tasks"]], 30, "t-echo completed")

        driver.killTask({"value": "t-sleep"})
        recorder.update("t-sleep", "TASK_KILLED", mark)
        wait_until(lambda: "t-sleep" in [t["id"] for t in on_master(
            master, framework_id["value"])["completed_tasks"]], 30, "t-sleep completed")
        assert on_master(master, framework_id["value"])["tasks"] == []
    finally:
        driver.stop()                                   # TEARDOWN: the framework goes
        driver.join(30)
    assert driver.stopped.is_set() and driver.abort_reason is None
    assert on_master(master, framework_id["value"])["where"] == "completed_frameworks"
    assert "error" not in [c[0] for c in recorder.calls]


def test_after_a_master_sigkill_the_driver_resubscribes_as_the_same_framework(
        mesos_master, mesos_agent):
    master = mesos_master(MASTER_ENV)                   # a registry that survives
    agent = mesos_agent(master, "cpus:2;mem:512")
    recorder = Recorder()
    driver = SchedulerDriver(recorder, framework_info("driver-failover"), master.address)
    driver.start()
    try:
        (framework_id, _) = recorder.wait("registered")
        launched(recorder, driver, "t-survivor", "sleep 300")
        mark = len(recorder.calls)
        master.crash()
        recorder.wait("disconnected", since=mark)
        assert driver.master is None and not driver.connected
        master.restart()
        (master_info,) = recorder.wait("reregistered", since=mark)
        assert driver.framework_id == framework_id["value"]
        assert master_info["port"] == master.port
        assert on_master(master, framework_id["value"])["active"]
        agent.wait_registered(30)
        # the master answers reconciliation once the agent is back: the task never stopped
        wait_until(lambda: driver.reconcileTasks([]) or any(
            args[0]["task_id"]["value"] == "t-survivor" and
            args[0].get("reason") == "REASON_RECONCILIATION"
            for kind, args in recorder.calls[mark:] if kind == "update"), 30,
            "the task reconciled after the failover")
        assert not [args for kind, args in recorder.calls[mark:] if kind == "update" and
                    args[0]["state"] != "TASK_RUNNING"]
        assert len([c for c in recorder.calls if c[0] == "registered"]) == 1
    finally:
        driver.stop()
        driver.join(30)


def test_an_agent_restart_keeps_the_task_its_executor_subscribes_again(
        mesos_master, mesos_agent):
    """The command executor (our executor driver) outlives its agent and subscribes to
    the restarted one with what it had not had acknowledged; a kill after that reaches
    it through the new subscription."""
    master = mesos_master()
    agent = mesos_agent(master, "cpus:2;mem:512")
    recorder = Recorder()
    driver = SchedulerDriver(recorder, framework_info("driver-agent-restart"), master.address)
    driver.start()
    try:
        recorder.wait("registered")
        running = launched(recorder, driver, "t-kept", "sleep 300")
        mark = len(recorder.calls)
        agent.crash()
        agent.restart()
        assert agent.wait_registered(30) == running["agent_id"]["value"]
        time.sleep(3)                   # past the agent's --executor_reregistration_timeout
        again = [args[0] for kind, args in recorder.calls[mark:]
                 if kind == "update" and args[0]["task_id"]["value"] == "t-kept"]
        # at most the same TASK_RUNNING again (the agent re-sends what the crash left
        # unacknowledged); nothing new: no executor lost, no task failed
        assert {(s["state"], s["uuid"]) for s in again} <= {("TASK_RUNNING", running["uuid"])}
        executors = [e for f in agent.state()["frameworks"] for e in f["executors"]]
        assert [t["id"] for e in executors for t in e["tasks"]] == ["t-kept"]
        driver.killTask({"value": "t-kept"})
        killed = recorder.update("t-kept", "TASK_KILLED", mark)
        assert killed["source"] == "SOURCE_EXECUTOR"    # the executor itself said it
    finally:
        driver.stop()
        driver.join(30)


def test_the_leading_master_is_found_on_zk_or_by_redirect_and_followed(
        zookeeper, mesos_quorum):
    """Three masters elect a leader on ZooKeeper. One driver finds it through the zk://
    URL, the other is given a master that does not lead and follows its 307; the leader
    is SIGKILLed: both re-subscribe, as the same frameworks, to the one elected next."""
    quorum = mesos_quorum(zookeeper)
    first = quorum.leader()
    follower = next(m for m in quorum.masters if m is not first)
    by_zk, by_redirect = Recorder(), Recorder()
    assert quorum.address.startswith("zk://")
    drivers = [SchedulerDriver(by_zk, framework_info("driver-zk"), quorum.address),
               SchedulerDriver(by_redirect, framework_info("driver-307"), follower.address)]
    for driver in drivers:
        driver.start()
    try:
        ids = [r.wait("registered")[0]["value"] for r in (by_zk, by_redirect)]
        assert [d.master for d in drivers] == [first.address] * 2
        marks = [len(r.calls) for r in (by_zk, by_redirect)]
        first.crash()
        second = quorum.leader(timeout=60)
        assert second is not first
        for driver, recorder, mark, framework_id in zip(drivers, (by_zk, by_redirect),
                                                        marks, ids):
            # a bound, not a timing: a new leader answers 503 until it has recovered its
            # replicated registry, which took over 90 s once on a loaded 2-core machine
            recorder.wait("reregistered", since=mark, timeout=240)
            assert driver.framework_id == framework_id
            assert driver.master == second.address
            assert on_master(second, framework_id)["active"]
    finally:
        for driver in drivers:
            driver.stop()
            driver.join(30)


@pytest.fixture
def authenticating_master(mesos_master, tmp_path):
    credentials = tmp_path / "credentials.json"
    credentials.write_text(json.dumps({"credentials": [
        {"principal": "fw-principal", "secret": "s3cret-ü"}]}))
    credentials.chmod(0o600)
    return mesos_master({"MESOS_AUTHENTICATE_HTTP_FRAMEWORKS": "true",
                         "MESOS_HTTP_FRAMEWORK_AUTHENTICATORS": "basic",
                         "MESOS_CREDENTIALS": str(credentials)})


def test_an_authenticated_framework_subscribes_and_calls(authenticating_master, mesos_agent):
    master = authenticating_master
    mesos_agent(master, "cpus:2;mem:512")
    recorder = Recorder()
    driver = mesos_driver.SchedulerDriver(recorder, framework_info("driver-auth"),
                                          master.address,
                                          credential=Credential("fw-principal", "s3cret-ü"))
    driver.start()
    try:
        (framework_id, _) = recorder.wait("registered")
        assert on_master(master, framework_id["value"])["principal"] == "fw-principal"
        launched(recorder, driver, "t-auth", "sleep 300")     # ACCEPT and ACKNOWLEDGE pass
        driver.killTask({"value": "t-auth"})
        recorder.update("t-auth", "TASK_KILLED")
    finally:
        driver.stop()
        driver.join(30)
    assert on_master(master, framework_id["value"])["where"] == "completed_frameworks"


@pytest.mark.parametrize("credential, says", [
    (Credential("fw-principal", "wrong"), "refused principal 'fw-principal' (HTTP 401"),
    (Credential("nobody", "s3cret-ü"), "refused principal 'nobody' (HTTP 401"),
    (None, "requires framework authentication (HTTP 401"),
])
def test_a_refused_subscription_stops_the_driver_with_one_line(authenticating_master,
                                                               credential, says):
    recorder = Recorder()
    driver = mesos_driver.SchedulerDriver(recorder, framework_info("driver-refused"),
                                          authenticating_master.address,
                                          credential=credential)
    driver.start()
    assert driver.stopped.wait(TIMEOUT)
    assert says in driver.abort_reason and "\n" not in driver.abort_reason
    (message,) = recorder.wait("error")
    assert message == f"driver aborted: {driver.abort_reason}"
    assert "registered" not in [c[0] for c in recorder.calls]
    assert authenticating_master.state()["frameworks"] == []

