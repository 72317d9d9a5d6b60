"""Framework high availability on the real bed: three `mesos-gpu framework
--zk` processes and one real ZooKeeper; three real Mesos masters elected on
that ZooKeeper (replicated log, quorum 2) and a GPU agent (the real agent
daemon over 8 fake V100s, the real Docker engine, runc), found through
`zk://.../mesos`; GPU apps of both container types (Docker, and Mesos with an
image: runc) running.

1. SIGKILL the leading instance: another leads and serves writes; every task
   keeps running as the same task on the same GPU; any surviving instance
   shows the same apps.
2. SIGSTOP the leader past its ZooKeeper session timeout, change the apps on
   the new leader, SIGCONT the old one: it does not act as leader again (no
   launch, no kill, no write to the state).
3. SIGKILL the leading Mesos master: the framework follows the new one and
   reconciles; tasks unchanged, new work launches.
4. Delete the apps: every GPU is free again."""
import signal
import time

import pytest
from kazoo.client import KazooClient

from localcluster import fake_nvml
from localcluster.gpu_node import GpuNode, layout_for_driver_files
from tests.bed.framework_instances import Instance, first_write, leader
from tests.bed.waiting import wait_until

SESSION_MS = 3000
HOSTNAME = "ha-v100"


@pytest.fixture
def node(docker_engine):
    with GpuNode(layout_for_driver_files(fake_nvml.v100x8(), HOSTNAME), docker_engine.host) as n:
        yield n


def gpu_app(app_id, containerizer, image, instances=1):
    return {"id": app_id, "cmd": "sleep 3600", "cpus": 0.1, "mem": 32, "gpus": 1,
            "instances": instances,
            "container": {"type": containerizer, "docker": {"image": image}}}


def running_tasks(instance, app_id=None):
    """{task id: (app id, GPUs, agent id)} of the running tasks, as `instance` shows them."""
    path = f"/v2/apps{app_id}/tasks?gpus=true" if app_id else "/v2/tasks?gpus=true"
    reply = instance.api.get(path)
    if reply.status != 200:
        return {}
    return {t["id"]: (t["appId"], tuple(t.get("gpuUuids", ())), t["slaveId"])
            for t in reply.json["tasks"] if t["state"] == "TASK_RUNNING"}


def master_tasks(quorum, framework_id):
    """(task id, state) of the framework's tasks on the leading master, and
    whether the framework is subscribed (None while the master does not answer
    or does not know the framework yet)."""
    try:
        frameworks = [f for f in quorum.state()["frameworks"] if f["id"] == framework_id]
    except (OSError, ValueError):
        return None
    assert len(frameworks) <= 1, frameworks
    if not frameworks:
        return None
    return sorted((t["id"], t["state"]) for t in frameworks[0]["tasks"]), frameworks[0]["active"]


def state_nodes(zk, root="/marathon/state"):
    """path -> (mzxid, data) of every node of the framework's state."""
    out, todo = {}, [root]
    while todo:
        path = todo.pop()
        data, stat = zk.get(path)
        out[path] = (stat.mzxid, data)
        todo.extend(f"{path}/{child}" for child in zk.get_children(path))
    return out


def test_three_instances_survive_sigkill_sigstop_and_a_master_failover(
        zookeeper, mesos_quorum, mesos_agent, node, docker_engine, busybox_image, tmp_path):
    quorum = mesos_quorum(zookeeper)
    resources, attributes = node.flags(cpus=8, mem=8192)
    agent = mesos_agent(quorum.address, resources, attributes, hostname=HOSTNAME,
                        env={"MESOS_REGISTRATION_BACKOFF_FACTOR": "100ms"})
    image = busybox_image()
    zk_url = zookeeper.url("/marathon")
    instances = [Instance(tmp_path, f"fw{i}", quorum.address, zk_url,
                          "--agent_socket", str(node.socket), "--docker_host", docker_engine.host,
                          "--refuse_seconds", "1", "--zk_session_timeout", str(SESSION_MS))
                 for i in range(3)]
    zk = KazooClient(hosts=zookeeper.hosts)
    zk.start()
    try:
        for instance in instances:
            instance.start()
        wait_until(lambda: all(i.info() for i in instances), timeout=60)
        first = leader(instances)
        others = [i for i in instances if i is not first]

        # GPU apps of both container types, created through an instance that does not lead
        for app_id, kind in (("/gpu/docker", "DOCKER"), ("/gpu/runc", "MESOS")):
            created = others[0].api.post("/v2/apps", gpu_app(app_id, kind, image))
            assert created.status == 201, created.json
            assert created.headers["x-marathon-leader"] == f"http://{first.address}"
        tasks = wait_until(lambda: len(running_tasks(others[1])) == 2 and running_tasks(others[1]),
                           timeout=180)
        assert all(len(gpus) == 1 for _, gpus, _ in tasks.values())
        assert len({gpus for _, gpus, _ in tasks.values()}) == 2
        ledger, held = node.containers(), sorted(node.allocated())
        framework_id = first.info()["frameworkId"]
        assert framework_id and master_tasks(quorum, framework_id) == (
            sorted((t, "TASK_RUNNING") for t in tasks), True)

        # 1. SIGKILL the leading instance
        first.signal(signal.SIGKILL)
        took = first_write(others, 1)
        print(f"\nSIGKILL of the leading instance: first write accepted after {took:.2f} s "
              f"(ZooKeeper session timeout {SESSION_MS / 1000:g} s)")
        second = leader(others, timeout=5)
        for instance in others:           # the same apps and tasks, from any instance
            assert instance.info()["frameworkId"] == framework_id
            apps = instance.api.get("/v2/apps").json["apps"]
            assert sorted(a["id"] for a in apps) == ["/gpu/docker", "/gpu/runc", "/probe/w1"]
            wait_until(lambda: running_tasks(instance) == tasks, timeout=60)
        assert node.containers() == ledger and sorted(node.allocated()) == held
        wait_until(lambda: master_tasks(quorum, framework_id) == (
            sorted((t, "TASK_RUNNING") for t in tasks), True), timeout=60)
        first.start()                     # restarted, it rejoins as a candidate
        wait_until(lambda: (first.info() or {}).get("leader") == second.address, timeout=60)
        assert first.info()["elected"] is False and running_tasks(first) == tasks

        # 2. SIGSTOP the leader past its session timeout; change things meanwhile
        third = next(i for i in others if i is not second)
        second.signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        new = leader([third], timeout=30)
        took_over = time.monotonic() - stopped_at
        assert took_over >= SESSION_MS / 1000 * 0.8
        scaled = new.api.put("/v2/apps/gpu/docker", {"instances": 2})
        assert scaled.status == 200, scaled.json
        assert new.api.delete("/v2/apps/probe/w1").status == 200
        grown = wait_until(lambda: len(running_tasks(new)) == 3 and running_tasks(new), timeout=120)
        assert {t: v for t, v in grown.items() if t in tasks} == tasks
        wait_until(lambda: new.api.get("/v2/deployments").json == [], timeout=60)
        before_resume = state_nodes(zk)
        on_master = master_tasks(quorum, framework_id)
        epoch = int(zk.get("/marathon/epoch")[0])
        log_before = len(second.log())
        second.signal(signal.SIGCONT)
        resumed_at = time.monotonic()
        # it answers again, knows it does not lead, and names the new leader
        info = wait_until(lambda: second.info(), timeout=30)
        assert info["elected"] is False
        wait_until(lambda: (second.info() or {}).get("leader") == new.address, timeout=30)
        time.sleep(SESSION_MS / 1000)        # whatever it would do, it would have done by now
        after_log = second.log()[log_before:]
        assert "launching " not in after_log and "killing task" not in after_log, after_log
        assert "stepping down" in after_log or "leadership of" in after_log, after_log
        assert master_tasks(quorum, framework_id) == on_master
        assert running_tasks(new) == grown
        changed = {p: v for p, v in state_nodes(zk).items() if before_resume.get(p) != v}
        for path, (_, data) in changed.items():
            if data.startswith(b"mesos-gpu-state/1 json") or data.startswith(b"mesos-gpu-state/1 zlib"):
                assert f"epoch={epoch}".encode() in data.split(b"\n", 1)[0], (path, data[:80])
        assert int(zk.get("/marathon/epoch")[0]) == epoch
        print(f"SIGSTOP of the leader: another led after {took_over:.2f} s; resumed "
              f"{time.monotonic() - resumed_at:.1f} s without acting")

        # 3. SIGKILL the leading Mesos master: the framework follows the new one
        old_master = quorum.leader()
        log_before = len(new.log())
        old_master.crash()
        new_master = quorum.leader(timeout=60)
        assert new_master is not old_master
        wait_until(lambda: master_tasks(quorum, framework_id) == (
            sorted((t, "TASK_RUNNING") for t in grown), True), timeout=90)
        followed = new.log()[log_before:]
        assert "re-subscribed as framework " + framework_id in followed, followed
        assert "reconciling 3 launched task(s)" in followed, followed
        assert running_tasks(new) == grown
        assert set(held) <= set(node.allocated())       # nothing given back while running
        more = new.api.put("/v2/apps/gpu/runc", {"instances": 2})
        assert more.status == 200
        final = wait_until(lambda: len(running_tasks(new)) == 4 and running_tasks(new), timeout=120)
        assert len({gpus for _, gpus, _ in final.values()}) == 4

        # 4. everything given back
        for app_id in ("/gpu/docker", "/gpu/runc"):
            assert new.api.delete(f"/v2/apps{app_id}").status == 200
        wait_until(lambda: running_tasks(new) == {}, timeout=120)
        wait_until(lambda: node.allocated() == [], timeout=60)
        assert agent.id
    finally:
        zk.stop()
        zk.close()
        for instance in instances:
            instance.stop()
