"""GPU apps through the Marathon API, end to end on the real parts: a real Mesos
1.11 master and agent (advertising what `mesos-gpu agent flags` prints), the
real agent daemon over a fake K80 (2 GPUs), our executor, the real Docker
engine, and the `mesos-gpu framework` service with its GPU scheduler.

Create an app with 2 instances of 1 GPU through HTTP, see both tasks running on
distinct GPUs, restart the framework and find the app and its tasks again,
replace them (config change, kill, restart) while every GPU is taken, scale to
0 and see the GPUs free again.

Run twice: on an open cluster, and on one secured as production clusters are
(`secure`: framework authentication on the master, executor authentication on the
agent, localcluster/mesos_auth.py), where the framework subscribes with its principal
and our executors call the agent with its token."""

import pytest

from framework.process.framework_process import FrameworkProcess
from tests.bed.gpu_bed import k80_node, master_and_agent
from tests.bed.framework_process import client_of, framework_args
from localcluster.mesos_auth import MesosAuthentication
from tests.bed.waiting import wait_until

HOSTNAME = "marathon-k80"


@pytest.fixture(scope="module")
def node(docker_engine):
    with k80_node(docker_engine, "marathon-k80") as n:
        yield n


@pytest.fixture(scope="module", params=["open", "secure"])
def auth(request):
    if request.param == "open":
        yield None
        return
    with MesosAuthentication() as secured:
        yield secured


@pytest.fixture(scope="module")
def agent(mesos_prefix, node, auth):
    with master_and_agent(node, HOSTNAME, auth.master_env() if auth else None,
                          auth.agent_env() if auth else None) as running:
        yield running


def running_tasks(api, app_id):
    reply = api.get(f"/v2/apps{app_id}/tasks?gpus=true")
    assert reply.status == 200
    tasks = reply.json["tasks"]
    return tasks if tasks and all(t["state"] == "TASK_RUNNING" for t in tasks) else []


def replaced_all(api, old_ids):
    """Two running tasks, none of them one of `old_ids`, on two distinct GPUs."""
    tasks = running_tasks(api, "/gpu/pair")
    if len(tasks) != 2 or {t["id"] for t in tasks} & set(old_ids):
        return []
    assert len({g for t in tasks for g in t["gpuUuids"]}) == 2, tasks
    return tasks


def test_two_gpu_instances_restart_and_scale_to_zero(agent, auth, node, docker_engine,
                                                     busybox_image, tmp_path):
    image = busybox_image()
    state = tmp_path / "state"
    args = framework_args(agent.master, state, "--agent_socket", str(node.socket),
                          "--docker_host", docker_engine.host, "--refuse_seconds", "1",
                          *(auth.framework_args() if auth else ()))
    service = FrameworkProcess(args).start()
    try:
        api = client_of(service)
        created = api.post("/v2/apps", {
            "id": "/gpu/pair", "cmd": "sleep 600", "cpus": 0.1, "mem": 32, "gpus": 1,
            "instances": 2, "constraints": [["gpu_type", "LIKE", "(?i).*k80.*"]],
            "container": {"type": "DOCKER", "docker": {"image": image}}})
        assert created.status == 201, created.json

        tasks = wait_until(lambda: len(running_tasks(api, "/gpu/pair")) == 2
                           and running_tasks(api, "/gpu/pair"), timeout=90)
        gpus = [t["gpuUuids"] for t in tasks]
        assert all(len(g) == 1 for g in gpus) and gpus[0] != gpus[1], gpus
        assert {g[0] for g in gpus} == {gpu.uuid for gpu in node.layout.gpus}
        assert {t["host"] for t in tasks} == {HOSTNAME}
        assert {t["slaveId"] for t in tasks} == {agent.id}
        assert sorted(node.allocated()) == sorted(node.minors)
        wait_until(lambda: api.get("/v2/deployments").json == [])
        app = api.get("/v2/apps/gpu/pair").json["app"]
        assert app["tasksRunning"] == 2 and app["tasksStaged"] == 0
        assert "gpuUuids" not in app["tasks"][0]          # only on request (?gpus=true)
        framework_id = service.scheduler.framework_id
        task_ids = sorted(t["id"] for t in tasks)
    finally:
        service.stop()

    # A restarted framework serves the same app and finds the same tasks running.
    service = FrameworkProcess(args).start()
    try:
        api = client_of(service)
        assert service.scheduler.wait_subscribed(30)
        assert service.scheduler.framework_id == framework_id
        again = wait_until(lambda: running_tasks(api, "/gpu/pair"), timeout=60)
        assert sorted(t["id"] for t in again) == task_ids
        assert sorted(g for t in again for g in t["gpuUuids"]) == sorted(g[0] for g in gpus)
        assert api.get("/v2/apps/gpu/pair").json["app"]["instances"] == 2

        # Every GPU is taken: a rolling replacement needs room to stop one old
        # task before starting its successor (minimumHealthCapacity 0.5).
        changed = api.patch("/v2/apps/gpu/pair", {"upgradeStrategy": {
            "minimumHealthCapacity": 0.5, "maximumOverCapacity": 0}})
        assert changed.status == 200
        replaced = wait_until(lambda: replaced_all(api, task_ids), timeout=120)
        killed = replaced[0]["id"]
        gone = api.delete(f"/v2/apps/gpu/pair/tasks/{killed}")
        assert gone.status == 200 and gone.json["task"]["id"] == killed
        after_kill = wait_until(lambda: replaced_all(api, [killed]), timeout=90)
        restarted = api.post("/v2/apps/gpu/pair/restart")
        assert restarted.status == 200 and restarted.json["deploymentId"]
        wait_until(lambda: replaced_all(api, [t["id"] for t in after_kill]), timeout=120)
        wait_until(lambda: api.get("/v2/deployments").json == [], timeout=30)

        scaled = api.put("/v2/apps/gpu/pair", {"instances": 0})
        assert scaled.status == 200, scaled.json
        wait_until(lambda: api.get("/v2/apps/gpu/pair/tasks").json["tasks"] == [], timeout=60)
        wait_until(lambda: node.allocated() == [], timeout=30)
        wait_until(lambda: api.get("/v2/deployments").json == [])
        assert node.containers() == {}
        assert api.delete("/v2/apps/gpu/pair").status == 200
    finally:
        service.stop()
