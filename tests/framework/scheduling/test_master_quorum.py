"""Mesos masters found through ZooKeeper, on the real bed: three real Mesos 1.11
masters elect a leader on a real ZooKeeper and keep their registry in a
replicated log of quorum 2 (the launcher builds them as `mesos-master --zk
--quorum` does); the GPU agent and the scheduler find the leader through
`zk://.../mesos`. SIGKILL the leading master: another one is elected (after
the dead one's ZooKeeper session expires), recovers the registry from the two
replicas left, the agent re-registers, and the scheduler follows the new
leader by itself, re-subscribes as the same framework and reconciles: the GPU
task keeps running as the same task on the same GPU; new work launches."""
import time

import pytest
from kazoo.client import KazooClient

from framework.tasks.task_spec import TaskSpec
from localcluster import fake_nvml
from localcluster.gpu_node import GpuNode
from tests.framework.e2e import wait_for
from tests.framework.scheduling.failover_bed import started_scheduler, survivor_running, wait_until

AGENT_ENV = {"MESOS_REGISTRATION_BACKOFF_FACTOR": "100ms"}


@pytest.fixture
def node():
    with GpuNode(fake_nvml.k80(), volume=False) as n:      # two GPUs
        yield n


def framework_on(master, framework_id):
    return next((f for f in master.state()["frameworks"] if f["id"] == framework_id), None)


def test_scheduler_follows_the_leading_master_of_three(zookeeper, mesos_quorum, mesos_agent,
                                                       node, tmp_path):
    quorum = mesos_quorum(zookeeper)
    first = quorum.leader()
    assert sum(m.leading for m in quorum.masters) == 1
    # every master names the same leader, and ZooKeeper holds the three contenders
    assert {m.leader() for m in quorum.masters} == {first.address}
    zk = KazooClient(hosts=zookeeper.hosts)
    zk.start()
    try:
        children = zk.get_children("/mesos")
        assert len([c for c in children if c.startswith("json.info_")]) == 3
        assert "log_replicas" in children
    finally:
        zk.stop()
        zk.close()

    resources, attributes = node.flags(cpus=2, mem=1024)
    agent = mesos_agent(quorum.address, resources, attributes, hostname="agent-k80",
                        env=AGENT_ENV)
    agent_id = agent.id
    sched, updates = started_scheduler(quorum.address, "fw-quorum", node, tmp_path)
    try:
        framework_id, before, ledger = survivor_running(sched, node, 60)

        killed_at = time.monotonic()
        first.crash()
        second = quorum.leader(timeout=60)
        elected_at = time.monotonic()
        assert second is not first
        wait_until(lambda: (framework_on(second, framework_id) or {}).get("active"), 60,
                   f"framework {framework_id} re-subscribed to the new leader {second.address}")
        resubscribed_at = time.monotonic()
        wait_until(lambda: any(a["id"] == agent_id and a["active"] for a in second.agents()),
                   60, "the agent re-registered with the new leader")
        reconciled = wait_until(
            lambda: next((r for t, r in updates if t > killed_at and r.id == "survivor"
                          and r.reason == "REASON_RECONCILIATION"), None),
            60, "a reconciliation answer for the running task from the new leader")
        print(f"\nSIGKILL of the leading master: new leader {elected_at - killed_at:.1f} s, "
              f"framework re-subscribed {resubscribed_at - killed_at:.1f} s, task reconciled "
              f"{time.monotonic() - killed_at:.1f} s")
        assert reconciled.state == "TASK_RUNNING"
        after = sched.task("survivor")
        assert (after.state, after.mesos_task_id, after.attempts) == ("TASK_RUNNING", "survivor", 1)
        assert after.gpus == before.gpus and after.agent_id == agent_id
        assert node.containers() == ledger
        assert sched.framework_id == framework_id
        tasks = framework_on(second, framework_id)["tasks"]
        assert [(t["id"], t["state"]) for t in tasks] == [("survivor", "TASK_RUNNING")]

        sched.submit(TaskSpec(id="after-failover", gpus=1, cpus=0.1, mem=32, cmd="true"))
        done = wait_for(sched, "after-failover", {"TASK_FINISHED", "TASK_FAILED"}, 60)
        assert done.state == "TASK_FINISHED", done
        assert done.gpus and done.gpus != before.gpus

        # The killed master restarts as a replica that does not lead; the second
        # leader dies too: the two left are a quorum, and the framework follows again.
        first.restart()
        assert first.leader() == second.address and not first.leading
        second.crash()
        third = quorum.leader(timeout=60)
        assert third is not second
        wait_until(lambda: (framework_on(third, framework_id) or {}).get("active"), 60,
                   f"framework {framework_id} re-subscribed to the third leader")
        wait_until(lambda: [(t["id"], t["state"]) for t in
                            (framework_on(third, framework_id) or {}).get("tasks", [])]
                   == [("survivor", "TASK_RUNNING")], 60, "the task on the third leader")
        assert sched.task("survivor").gpus == before.gpus
    finally:
        sched.stop(teardown=True)
