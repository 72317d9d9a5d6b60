"""Apps asking for a share of a GPU, end to end on the real parts: a real Mesos 1.11
master and agent advertising what `mesos-gpu agent flags --shared_gpus 1` prints
(GPU 0 whole, GPU 1 as gpu_shares_1:4), the real agent daemon over a fake K80 with
the real MPS control daemon of the bed's 535 driver for GPU 1, our executor and the
`mesos-gpu framework` service.

Two tasks of 0.25 run on GPU 1 at once, each with GPU 1's MPS pipe and its share in
its environment, while GPU 0 stays whole and free; a 0.5 share (above the node's
largest) waits and says why in /v2/queue; scaling to 0 gives the shares back."""
import json
import os

import pytest

from framework.process.framework_process import FrameworkProcess
from tests.bed.gpu_bed import k80_node, master_and_agent
from tests.bed.framework_process import client_of, framework_args
from tests.bed.waiting import wait_until

HOSTNAME = "127.0.0.1"


@pytest.fixture(scope="module")
def node(docker_engine):
    with k80_node(docker_engine, "shared-k80", share_args=["--shared_gpus", "1"]) as n:
        yield n


@pytest.fixture(scope="module")
def agent(mesos_prefix, node):
    resources, attributes = node.flags()
    assert "gpus:1;gpu_shares_1:4" in resources and "gpu_sharing:mps" in attributes
    # executors run the code under test: a worktree's PYTHONPATH reaches them
    passed = {k: os.environ[k] for k in ("PATH", "PYTHONPATH") if k in os.environ}
    env = {"MESOS_EXECUTOR_ENVIRONMENT_VARIABLES": json.dumps(passed)}
    with master_and_agent(node, HOSTNAME, agent_env=env) as running:
        yield running


def running(api, app_id, count):
    tasks = api.get(f"/v2/apps{app_id}/tasks?gpus=true").json.get("tasks", [])
    tasks = [t for t in tasks if t["state"] == "TASK_RUNNING"]
    return tasks if len(tasks) == count else None


def test_two_quarter_shares_run_on_the_shared_gpu_and_give_it_back(agent, node, tmp_path):
    args = framework_args(agent.master, tmp_path / "state", "--agent_socket", str(node.socket),
                          "--refuse_seconds", "1")
    service = FrameworkProcess(args).start()
    try:
        api = client_of(service)
        reply = api.post("/v2/apps", {
            "id": "/infer", "cpus": 0.1, "mem": 32, "gpus": 0.25, "instances": 2,
            "cmd": "env | grep -E '^(CUDA|NVIDIA)_' | sort > share_env.txt; sleep 600"})
        assert reply.status == 201, reply.json
        assert reply.json["gpus"] == 0.25
        tasks = wait_until(lambda: running(api, "/infer", 2), timeout=120, interval=0.5,
                           what=lambda: f"2 running tasks: {api.get('/v2/apps/infer').json['app'].get('lastTaskFailure')}"
                           )
        shared_uuid = node.layout.gpus[1].uuid
        assert all(t["gpuUuids"] == [shared_uuid] for t in tasks), tasks
        info = node.client.info()
        assert sorted(info["shared"]["1"]["tenants"].values()) == [0.25, 0.25]
        assert info["free"] == [node.layout.gpus[0].minor]       # the whole GPU untouched
        minor = node.layout.gpus[1].minor
        pipe = str(node.work_dir / "mps" / f"nvidia{minor}" / "pipe")
        files = wait_until(lambda: _env_files(agent, 2), timeout=30)
        for text in files:
            env = dict(line.split("=", 1) for line in text.splitlines())
            assert env["CUDA_MPS_PIPE_DIRECTORY"] == pipe
            assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
            assert env["NVIDIA_VISIBLE_DEVICES"] == shared_uuid
            assert env["CUDA_VISIBLE_DEVICES"] == "0"
        assert api.get("/v2/apps/infer").json["app"]["gpus"] == 0.25
        # /v2/info/gpu_sharing says plainly what sharing isolates, and which agents share
        # how; /v2/info itself keeps Marathon's shape (marathon-python refuses other keys)
        assert "gpu_sharing" not in api.get("/v2/info").json
        assert "fractional_gpus" in api.get("/v2/info").json["marathon_config"]["features"]
        sharing = api.get("/v2/info/gpu_sharing").json
        assert "memory and faults" not in sharing["isolation"]["mps"]
        assert sharing["isolation"]["time-slicing"].startswith("nothing: ")
        assert [(a["sharing"], a["granularity"], a["maxShare"]) for a in sharing["agents"]] \
            == [("mps", "0.25", "0.25")]

        # a half share is above this node's largest (its granularity, 0.25): it waits
        assert api.post("/v2/apps", {"id": "/half", "cmd": "sleep 600", "cpus": 0.1,
                                     "mem": 32, "gpus": 0.5}).status == 201

        def reason():
            items = api.get("/v2/queue").json["queue"]
            item = next((i for i in items if i["app"]["id"] == "/half"), None)
            return item and item["processedOffersSummary"].get("waitingReason")
        assert "no offered agent shares GPUs in that size" in wait_until(reason, timeout=30)

        api.delete("/v2/apps/half?force=true")
        assert api.put("/v2/apps/infer?force=true", {"instances": 0}).status in (200, 201)
        wait_until(lambda: node.client.info()["shared"]["1"]["free_slots"] == 4, timeout=60,
                   what="the shares back")
        assert node.client.info()["containers"] == {}
    finally:
        service.stop()


def _env_files(agent, count):
    """The share_env.txt each task wrote in its sandbox, once `count` are written."""
    texts = [p.read_text() for p in (agent.run_dir / "work").glob(
        "slaves/*/frameworks/*/executors/*/runs/latest/share_env.txt")]
    texts = [t for t in texts if t.strip()]
    return texts if len(texts) == count else None


def test_a_docker_task_on_an_mps_gpu_reaches_its_pipe_in_the_hosts_ipc(agent, node, tmp_path,
                                                                       docker_engine,
                                                                       busybox_image):
    args = framework_args(agent.master, tmp_path / "state", "--agent_socket", str(node.socket),
                          "--docker_host", docker_engine.host, "--refuse_seconds", "1")
    service = FrameworkProcess(args).start()
    try:
        api = client_of(service)
        reply = api.post("/v2/apps", {
            "id": "/docker-share", "cpus": 0.1, "mem": 32, "gpus": 0.25,
            "container": {"type": "DOCKER", "docker": {"image": busybox_image()}},
            "cmd": "ls $CUDA_MPS_PIPE_DIRECTORY > $MESOS_SANDBOX/pipe.txt; "
                   "readlink /proc/self/ns/ipc >> $MESOS_SANDBOX/pipe.txt; sleep 600"})
        assert reply.status == 201, reply.json
        wait_until(lambda: running(api, "/docker-share", 1), timeout=120, interval=0.5)
        seen = wait_until(lambda: _sandbox_file(agent, "pipe.txt", 2), timeout=30)
        assert "control" in seen[0].split()            # the control daemon's socket
        assert seen[0].split()[-1] == os.readlink("/proc/self/ns/ipc")     # the host's IPC
        api.delete("/v2/apps/docker-share?force=true")
        wait_until(lambda: node.client.info()["shared"]["1"]["free_slots"] == 4, timeout=60,
                   what="the share back")
    finally:
        service.stop()


def _sandbox_file(agent, name, lines):
    """The lines of `name` in the one sandbox that has it, once it has `lines` of them."""
    found = [p.read_text() for p in (agent.run_dir / "work").glob(
        f"slaves/*/frameworks/*/executors/*/runs/latest/{name}")]
    return found if found and len(found[0].splitlines()) >= lines else None
