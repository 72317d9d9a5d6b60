"""The framework survives the loss of its Mesos master, on the real Mesos 1.11
processes of the test bed.

A single master's failover (three masters elected on ZooKeeper:
test_master_quorum.py): it keeps its registry in a replicated log (quorum 1)
in its work dir, is killed with SIGKILL and comes back on the same address.
The scheduler, pointed at that address, reconnects by itself and re-subscribes
with its framework id, well within its failover timeout.

The agent is held (SIGSTOP) over the failover, so the framework is back first,
as it often is in a real cluster: the new master drops reconciliation requests
until the agents it recovered from its registry have re-registered, and the
scheduler must ask again. Then the agent resumes and re-registers; the answer
comes; the GPU task was never touched (same task, same GPU, same ledger entry
in the agent daemon); new work launches on the other GPU."""
import os
import signal
import time

import pytest

from framework.tasks.task_spec import TaskSpec
from localcluster import fake_nvml
from localcluster.gpu_node import GpuNode
from tests.framework.e2e import wait_for
from tests.framework.scheduling.failover_bed import started_scheduler, survivor_running, wait_until

# A durable registry, and pings that make the agent notice a silent master
# within ~3 s (1 s x 3) and register again.
MASTER_ENV = {"MESOS_REGISTRY": "replicated_log", "MESOS_QUORUM": "1",
              "MESOS_AGENT_PING_TIMEOUT": "1secs", "MESOS_MAX_AGENT_PING_TIMEOUTS": "3"}


@pytest.fixture
def node():
    with GpuNode(fake_nvml.k80(), volume=False) as n:      # two GPUs
        yield n


def framework_active(master, framework_id) -> bool:
    return any(f["id"] == framework_id and f["active"] for f in master.state()["frameworks"])


def agent_active(master, agent_id) -> bool:
    return any(a["id"] == agent_id and a["active"] for a in master.agents())


def tasks_on_master(master, framework_id):
    return [(t["id"], t["state"], t["slave_id"]) for f in master.state()["frameworks"]
            if f["id"] == framework_id for t in f["tasks"]]


def test_running_gpu_task_survives_a_master_failover(mesos_master, mesos_agent, node, tmp_path):
    master = mesos_master(MASTER_ENV)
    resources, attributes = node.flags(cpus=2, mem=1024)
    agent = mesos_agent(master, resources, attributes, hostname="agent-k80")
    agent_id = agent.id
    sched, updates = started_scheduler(master.address, "fw-failover", node, tmp_path)
    agent_held = False
    try:
        framework_id, before, ledger = survivor_running(sched, node, 30)
        assert len(ledger) == 1 and len(node.allocated()) == 1

        os.kill(agent.pid, signal.SIGSTOP)
        agent_held = True
        killed_at = time.monotonic()
        master.crash()
        master.restart()
        up_at = time.monotonic()
        wait_until(lambda: framework_active(master, framework_id), 30,
                   f"framework {framework_id} re-subscribed to the restarted master")
        resubscribed_at = time.monotonic()
        assert sched.wait_subscribed(10) and sched.framework_id == framework_id
        time.sleep(2)                    # the first reconciliation and a retry go unanswered
        assert not agent_active(master, agent_id)
        assert [r for t, r in updates if t > killed_at] == []

        os.kill(agent.pid, signal.SIGCONT)
        agent_held = False
        wait_until(lambda: agent_active(master, agent_id), 30, "agent re-registered")
        agent_back_at = time.monotonic()
        reconciled = wait_until(
            lambda: next((r for t, r in updates if t > killed_at and r.id == "survivor"), None),
            30, "a reconciliation answer for the running task")
        reconciled_at = time.monotonic()
        print(f"\nafter SIGKILL: master answering {up_at - killed_at:.2f}s, framework "
              f"re-subscribed {resubscribed_at - killed_at:.2f}s; agent resumed: re-registered "
              f"{agent_back_at - killed_at:.2f}s, task reconciled {reconciled_at - killed_at:.2f}s")
        assert (reconciled.state, reconciled.reason) == ("TASK_RUNNING", "REASON_RECONCILIATION")

        # the very same task on the very same GPU
        after = sched.task("survivor")
        assert (after.state, after.mesos_task_id, after.attempts) == ("TASK_RUNNING", "survivor", 1)
        assert after.gpus == before.gpus and after.agent_id == agent_id
        assert node.containers() == ledger
        assert tasks_on_master(master, framework_id) == [("survivor", "TASK_RUNNING", agent_id)]

        # new work launches, on the other GPU; the survivor can still be killed
        sched.submit(TaskSpec(id="after-failover", gpus=1, cpus=0.1, mem=32, cmd="true"))
        done = wait_for(sched, "after-failover", {"TASK_FINISHED", "TASK_FAILED"}, 60)
        assert done.state == "TASK_FINISHED", done
        assert len(done.gpus) == 1 and done.gpus != before.gpus
        sched.kill("survivor")
        assert wait_for(sched, "survivor", {"TASK_KILLED"}, 30).state == "TASK_KILLED"
        wait_until(lambda: node.allocated() == [], 10, "GPUs returned to the agent daemon")
    finally:
        if agent_held:
            os.kill(agent.pid, signal.SIGCONT)
        sched.stop(teardown=True)
