"""The Marathon API with real tasks: a real Mesos 1.11 master and agent (with a
fault domain), the real agent daemon over a fake K80, our executor, the real
Docker engine and runc, and the `mesos-gpu framework` service.

- A group of three apps with dependencies deploys in order: an app's task is
  staged only after the task of the app it depends on runs.
- Task JSON carries the agent's region and zone and the task's role.
- No task drives the API unauthenticated: a Docker task (host networking, as
  Marathon's default) and a runc task both reach the API on 127.0.0.1 (its
  unauthenticated /ping answers them) and are refused (401) when they try to
  create an app."""
import glob
import time
from pathlib import Path

import pytest

from framework.process.framework_process import FrameworkProcess
from framework.tasks.timestamps import parse_timestamp
from tests.bed.gpu_bed import k80_node, master_and_agent
from tests.bed.framework_process import client_of, framework_args
from tests.bed.waiting import wait_until

HOSTNAME = "api-bed"
DOMAIN = {"MESOS_DOMAIN": '{"fault_domain": {"region": {"name": "eu-west"}, '
                          '"zone": {"name": "eu-west-1a"}}}'}


@pytest.fixture(scope="module")
def node(docker_engine):
    with k80_node(docker_engine, HOSTNAME) as n:
        yield n


@pytest.fixture(scope="module")
def agent(mesos_prefix, node):
    with master_and_agent(node, HOSTNAME, master_env=DOMAIN, agent_env=DOMAIN) as running:
        yield running


@pytest.fixture(scope="module")
def service(agent, node, docker_engine, tmp_path_factory):
    args = framework_args(agent.master, tmp_path_factory.mktemp("framework"),
                          "--agent_socket", str(node.socket), "--docker_host", docker_engine.host,
                          "--refuse_seconds", "1", "--gpu_scheduling_behavior", "unrestricted")
    running = FrameworkProcess(args).start()
    assert running.scheduler.wait_subscribed(30)
    yield running
    running.stop()


def running_task(api, app_id):
    tasks = api.get(f"/v2/apps{app_id}/tasks").json.get("tasks", [])
    return tasks[0] if tasks and tasks[0]["state"] == "TASK_RUNNING" else None


def test_a_group_with_dependencies_deploys_in_order(service, busybox_image):
    api = client_of(service)
    image = busybox_image()

    def app(name, *deps):
        return {"id": name, "cmd": "sleep 600", "cpus": 0.1, "mem": 32, "instances": 1,
                "dependencies": list(deps),
                "container": {"type": "DOCKER", "docker": {"image": image}}}

    body = {"id": "/shop", "apps": [app("web", "api"), app("api", "db"), app("db")]}
    created = api.post("/v2/groups", body)
    assert created.status == 201, created.json
    order = ["/shop/db", "/shop/api", "/shop/web"]
    tasks = {i: wait_until(lambda i=i: running_task(api, i), timeout=120) for i in order}
    wait_until(lambda: api.get("/v2/deployments").json == [], timeout=30)
    for first, then in zip(order, order[1:]):
        started = parse_timestamp(tasks[first]["startedAt"])
        staged = parse_timestamp(tasks[then]["stagedAt"])
        assert staged >= started, (first, tasks[first], then, tasks[then])
    for task in tasks.values():
        assert (task["region"], task["zone"], task["role"]) == ("eu-west", "eu-west-1a", "*")
        assert task["host"] == HOSTNAME and task["healthCheckResults"] == []
    # Abdicating (the only instance) fails the driver over and re-subscribes: the tasks live on.
    running = sorted(t["id"] for t in api.get("/v2/tasks").json["tasks"])
    assert api.delete("/v2/leader").status == 200
    time.sleep(1)
    assert service.scheduler.wait_subscribed(30)
    wait_until(lambda: sorted(t["id"] for t in api.get("/v2/tasks").json["tasks"]
                            if t["state"] == "TASK_RUNNING") == running, timeout=30)
    removed = api.delete("/v2/groups/shop")
    assert removed.status == 200
    wait_until(lambda: api.get("/v2/tasks").json["tasks"] == [], timeout=60)


PROBE = """
api=http://127.0.0.1:{port}
if wget -q -O - $api/ping | grep -q pong; then echo "PROBE ping reached"; else echo "PROBE ping failed"; fi
wget -S -O /dev/null --header 'Content-Type: application/json' \\
     --post-data '{{"id": "/sneaked-in", "cmd": "sleep 1", "instances": 0}}' $api/v2/apps 2>&1 \\
  | grep -m1 'HTTP/' | sed 's/^ */PROBE post /'
echo PROBE done
sleep 600
"""


def sandbox_stdout(agent, task_id):
    found = glob.glob(f"{agent.run_dir}/work/slaves/*/frameworks/*/executors/"
                      f"mesos-gpu.{task_id}/runs/latest/stdout")
    return Path(found[0]).read_text(errors="replace") if found else ""


@pytest.mark.parametrize("containerizer", ["DOCKER", "MESOS"])
def test_no_task_drives_the_api_unauthenticated(service, agent, busybox_image, containerizer):
    """MESOS with an image runs under runc; DOCKER with host networking."""
    api = client_of(service)
    port = service.http.server_address[1]
    app_id = f"/probe/{containerizer.lower()}"
    probe = {"id": app_id, "cmd": PROBE.format(port=port), "cpus": 0.1, "mem": 32,
             "container": {"type": containerizer, "docker": {"image": busybox_image()}}}
    assert api.post("/v2/apps", probe).status == 201
    task = wait_until(lambda: running_task(api, app_id), timeout=120)
    output = wait_until(lambda: "PROBE done" in sandbox_stdout(agent, task["id"])
                        and sandbox_stdout(agent, task["id"]), timeout=60)
    assert "PROBE ping reached" in output, output           # the API is right there ...
    assert "PROBE post HTTP/1.1 401" in output, output      # ... and refuses the task
    assert api.get("/v2/apps/sneaked-in").status == 404
    assert [a["id"] for a in api.get("/v2/apps").json["apps"]] == [app_id]
    assert api.delete(f"/v2/apps{app_id}").status == 200
    wait_until(lambda: api.get("/v2/tasks").json["tasks"] == [], timeout=60)
