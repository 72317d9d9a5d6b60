"""A GPU job end to end on the real parts, through the same path as an app's task: a
real Mesos master and agent advertising what `mesos-gpu agent flags` prints, the real
agent daemon over a fake K80 (2 GPUs), our executor, the real Docker engine. A
2-instance gang of 1 GPU each runs on the node: each rank gets exactly one GPU, not
its peer's, the driver volume read-only (the image asks for it by label), and its
rendezvous (the agent's IP) with one process per GPU; the GPUs are free again when the
run ends. While a gang runs, the dashboard's node view shows its ranks on their GPUs."""
import pytest

from framework.process.framework_process import FrameworkProcess
from localcluster import fake_nvml
from localcluster.gpu_node import GpuNode, layout_for_driver_files
from localcluster.mesos import Agent, Master
from tests.bed.waiting import wait_until
from tests.framework.e2e import VOLUME_LABEL, container_probe, opened, sandbox_output
from tests.bed.framework_process import client_of, framework_args

HOSTNAME = "jobs-k80"


@pytest.fixture(scope="module")
def node(docker_engine):
    with GpuNode(layout_for_driver_files(fake_nvml.k80(), HOSTNAME), docker_engine.host) as n:
        yield n


@pytest.fixture(scope="module")
def agent(mesos_prefix, node):
    resources, attributes = node.flags()
    with Master() as master, Agent(master, resources, attributes, hostname=HOSTNAME) as running:
        yield running


def test_a_gpu_gang_gets_one_gpu_per_rank_the_driver_volume_and_its_rendezvous(
        agent, node, docker_engine, busybox_image, tmp_path):
    image = busybox_image(labels=VOLUME_LABEL)
    args = framework_args(agent.master, tmp_path / "state", "--agent_socket", str(node.socket),
                          "--docker_host", docker_engine.host, "--refuse_seconds", "1")
    service = FrameworkProcess(args).start()
    try:
        api = client_of(service)
        probe = container_probe(node.minors) + \
            "echo RDV $RANK/$WORLD_SIZE $MASTER_ADDR $PET_NPROC_PER_NODE\n"
        created = api.post("/v1/jobs", {"id": "gpu.pair", "run": {
            "cmd": probe, "cpus": 0.1, "mem": 32, "disk": 0, "gpus": 1, "instances": 2,
            "docker": {"image": image},
            "placement": {"constraints": [{"attribute": "gpu_type", "operator": "LIKE",
                                           "value": "(?i).*k80.*"}]}}})
        assert created.status == 201, created.json
        run = api.post("/v1/jobs/gpu.pair/runs", None).json
        done = wait_until(lambda: (r := api.get(f"/v1/jobs/gpu.pair/runs/{run['id']}").json)
                          ["status"] in ("SUCCESS", "FAILED") and r, timeout=120)
        assert done["status"] == "SUCCESS", done
        granted_all = []
        for task in done["ranks"]:
            out = sandbox_output(agent.run_dir, task["id"])
            access = opened(out)       # ENXIO: the cgroup let it through; EPERM: denied
            granted = [n for n, result in access.items() if result == "ENXIO"]
            assert len(granted) == 1, out                      # its GPU, not its peer's
            assert [r for n, r in access.items() if n not in granted] == ["EPERM"], out
            granted_all += granted
            assert "VOLUME yes" in out and "VOLUME_RW no" in out, out
            assert f"RDV {task['rank']}/2 127.0.0.1 1" in out, out     # the agent's IP
            assert task["host"] == HOSTNAME and len(task["gpus"]) == 1
        assert sorted(granted_all) == sorted(node.minors)
        wait_until(lambda: node.allocated() == [], timeout=30, what="the GPUs free again")

        # a running gang's ranks are on their GPUs' tiles in the dashboard's node view
        api.post("/v1/jobs", {"id": "gpu.hold", "run": {
            "cmd": "sleep 600", "cpus": 0.1, "mem": 32, "disk": 0, "gpus": 1, "instances": 2,
            "docker": {"image": image}}})
        hold = api.post("/v1/jobs/gpu.hold/runs", None).json

        def tiles():
            nodes = api.get("/v1/nodes").json["nodes"]
            held = [t for n in nodes for t in n["gpus"] if t.get("taskId")]
            return len(held) == 2 and all(t["taskState"] == "TASK_RUNNING" for t in held) \
                and held
        held = wait_until(tiles, timeout=120)
        assert {t["appId"] for t in held} == {"gpu.hold"} and {t["state"] for t in held} == {"held"}
        api.post(f"/v1/jobs/gpu.hold/runs/{hold['id']}/actions/stop", None)
        wait_until(lambda: node.allocated() == [], timeout=60, what="the GPUs free again")
    finally:
        service.stop()
