"""The framework notices a Mesos master that goes silent with its connection
open, on the real Mesos 1.11 processes of the test bed.

SIGSTOP freezes the master as a hung host or a network partition would: the
kernel keeps its TCP connections open (and even accepts new ones into the
listen backlog), so nothing tells the driver the master is gone. Only the
missing HEARTBEAT events do: the driver's watchdog closes the stream after
`missed_heartbeats` silent intervals and subscribes again. Once the master
runs again (SIGCONT) the framework is back as itself, reconciles, and its GPU
task was never touched.

The master's heartbeat interval is fixed at 15 s in Mesos (no flag), so the
test shortens the watchdog through SchedulerConfig.missed_heartbeats: 1.5
intervals (22.5 s) instead of production's 3 (45 s)."""
import logging
import os
import signal
import time

import pytest

from framework.scheduling.mesos_driver import SchedulerDriver
from framework.scheduling.scheduler import GpuScheduler, RetryPolicy, SchedulerConfig
from framework.state.state_store import StateStore
from framework.tasks.taskinfo import ExecutorSettings
from framework.tasks.task_spec import TaskSpec
from localcluster import fake_nvml
from localcluster.gpu_node import GpuNode
from tests.framework.e2e import wait_for
from tests.framework.scheduling.failover_bed import wait_until
from common.errors import UserError

MISSED_HEARTBEATS = 1.5
HEARTBEAT_INTERVAL = 15.0                  # Mesos 1.11's, sent in SUBSCRIBED
SILENCE_LIMIT = MISSED_HEARTBEATS * HEARTBEAT_INTERVAL


@pytest.fixture
def node():
    with GpuNode(fake_nvml.k80(), volume=False) as n:      # two GPUs
        yield n


def messages(caplog, logger, text, since=0.0):
    """Messages of `logger` containing `text`, logged after `since` (time.time())."""
    return [r.getMessage() for r in caplog.records
            if r.name == logger and text in r.getMessage() and r.created > since]


def connections_to(port):
    """Local ports of this process's established TCP connections to 127.0.0.1:port."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    with open("/proc/self/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return {int(local.rsplit(":", 1)[1], 16) for _, local, remote, state, *rest in rows
            if state == "01" and remote == f"0100007F:{port:04X}" and rest[5] in inodes}


def framework_on_master(master, framework_id):
    return next(f for f in master.state()["frameworks"] if f["id"] == framework_id)


def test_silent_master_is_dropped_and_the_framework_resubscribes_as_itself(
        mesos_master, mesos_agent, node, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="framework")
    master = mesos_master()
    resources, attributes = node.flags(cpus=2, mem=1024)
    agent = mesos_agent(master, resources, attributes, hostname="agent-silent")
    config = SchedulerConfig(master=master.address, name="fw-silent-master", refuse_seconds=1,
                             missed_heartbeats=MISSED_HEARTBEATS,
                             retry=RetryPolicy(max_attempts=1),
                             executor=ExecutorSettings(agent_socket=str(node.socket)))
    sched = GpuScheduler(config, StateStore(tmp_path / "state"))
    updates = []
    sched.on_update(lambda r: updates.append((time.monotonic(), r)))
    sched.start()
    frozen = False
    try:
        assert sched.wait_subscribed(30)
        subscribed_at = time.monotonic()
        framework_id = sched.framework_id
        assert messages(caplog, "framework.mesos_api.scheduler_driver",
                        f"master heartbeats every {HEARTBEAT_INTERVAL:g} s: reconnecting "
                        f"after {SILENCE_LIMIT:g} s without an event")
        sched.submit(TaskSpec(id="steady", gpus=1, cpus=0.1, mem=32, cmd="sleep 300"))
        before = wait_for(sched, "steady", {"TASK_RUNNING"}, 60)
        ledger = node.containers()
        assert len(before.gpus) == 1 and len(ledger) == 1

        # a live master's heartbeats keep the stream open past the limit
        time.sleep(max(0.0, subscribed_at + SILENCE_LIMIT + 3 - time.monotonic()))
        assert messages(caplog, "framework.mesos_api.scheduler_driver", "no event from the master") == []
        assert len(messages(caplog, "framework.scheduling.scheduler", "subscribed as framework")) == 1

        streams_before = connections_to(master.port)
        assert streams_before
        os.kill(master.pid, signal.SIGSTOP)
        frozen = True
        frozen_at, frozen_wall = time.monotonic(), time.time()
        dropped = wait_until(
            lambda: messages(caplog, "framework.mesos_api.scheduler_driver", "no event from the master"),
            SILENCE_LIMIT + 10, "the watchdog dropping the silent stream")
        detected_at = time.monotonic()
        assert "(1.5 heartbeats of 15 s): reconnecting" in dropped[0], dropped
        assert messages(caplog, "framework.scheduling.scheduler", "disconnected from the master",
                        since=frozen_wall)
        # it connects again at once (the kernel accepts for the frozen master)
        wait_until(lambda: connections_to(master.port) - streams_before, 5,
                   "a new connection to the master")
        assert not sched.wait_subscribed(0)     # its SUBSCRIBE gets no answer while frozen
        assert [r for t, r in updates if t > frozen_at] == []

        resumed_at, resumed_wall = time.monotonic(), time.time()   # before: it answers at once
        os.kill(master.pid, signal.SIGCONT)
        frozen = False
        assert sched.wait_subscribed(30), "no re-subscription after the master resumed"
        resubscribed_at = time.monotonic()
        assert messages(caplog, "framework.scheduling.scheduler", f"re-subscribed as framework {framework_id}",
                        since=resumed_wall)
        assert sched.framework_id == framework_id
        on_master = wait_until(lambda: framework_on_master(master, framework_id)["active"] and
                               framework_on_master(master, framework_id), 10,
                               "framework active on the master")
        assert on_master["reregistered_time"] >= resumed_wall - 1

        reconciled = wait_until(
            lambda: next((r for t, r in updates if t > resumed_at and r.id == "steady"), None),
            30, "a reconciliation answer for the running task")
        reconciled_at = time.monotonic()
        print(f"\nmaster frozen: stream dropped after {detected_at - frozen_at:.1f}s "
              f"(limit {SILENCE_LIMIT:g}s after the last event); master resumed: "
              f"re-subscribed {(resubscribed_at - resumed_at) * 1000:.0f} ms, task reconciled "
              f"{(reconciled_at - resumed_at) * 1000:.0f} ms")
        assert (reconciled.state, reconciled.reason) == ("TASK_RUNNING", "REASON_RECONCILIATION")

        after = sched.task("steady")
        assert (after.state, after.mesos_task_id, after.attempts) == ("TASK_RUNNING", "steady", 1)
        assert after.gpus == before.gpus and after.agent_id == agent.id
        assert node.containers() == ledger
        sched.kill("steady")
        assert wait_for(sched, "steady", {"TASK_KILLED"}, 30).state == "TASK_KILLED"
        wait_until(lambda: node.allocated() == [], 10, "GPU returned to the agent daemon")
    finally:
        if frozen:
            os.kill(master.pid, signal.SIGCONT)
        sched.stop(teardown=True)


@pytest.mark.parametrize("missed", [1, 0.5, -3])
def test_a_watchdog_limit_within_one_heartbeat_is_refused(missed):
    with pytest.raises(UserError, match=r"missed_heartbeats: .* must be more than 1"):
        SchedulerDriver(None, {"name": "x", "user": "u"}, "127.0.0.1:5050",
                        missed_heartbeats=missed)
