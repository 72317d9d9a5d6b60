"""The many-node bed (localcluster/gpu_cluster.py) at a few nodes: one call brings up a
master, agents each over its own agent daemon and fake 8-GPU NVML, and the framework;
one-GPU tasks submitted through the Marathon API run on several nodes, each granted by
its own node's daemon; leaving it leaves no process, directory, mount or cgroup."""
import pytest

from localcluster.cognitive.launch import Api
from localcluster.gpu_cluster import GPUS_PER_NODE, GpuCluster
from localcluster.paths import LocalClusterError
from tests.bed.waiting import wait_until

NODES = 3
TASKS = 6


def running(api: Api) -> list:
    return [t for t in api.call("GET", "/v2/tasks")[1]["tasks"]
            if t.get("state") == "TASK_RUNNING"]


def test_a_few_gpu_nodes_run_gpu_tasks_on_several_nodes_and_leave_nothing(mesos_prefix):
    cluster = GpuCluster(nodes=NODES, framework=True, cpus=2, mem=1024)
    with cluster:
        assert len(cluster.master.agents()) == NODES
        offered = {a["hostname"]: a["resources"].get("gpus") for a in cluster.master.agents()}
        assert offered == {f"gpu-node-{i:03d}": GPUS_PER_NODE for i in range(NODES)}
        memory = cluster.memory()
        assert len(memory) == NODES and all(m["daemon_kib"] > 0 and m["agent_kib"] > 0
                                            for m in memory)
        api = Api(cluster.api_url, auth=cluster.credentials)
        # Three apps with a hostname UNIQUE constraint: two tasks per node at most, so
        # six tasks land on all three nodes.
        for n in range(TASKS // NODES):
            api.call("POST", "/v2/apps", {
                "id": f"/scale/gpu{n}", "cmd": "sleep 600", "cpus": 0.1, "mem": 16,
                "gpus": 1, "instances": NODES, "constraints": [["hostname", "UNIQUE"]]})
        tasks = wait_until(lambda: (lambda r: r if len(r) == TASKS else None)(running(api)),
                           120, lambda: f"{TASKS} tasks running (now {len(running(api))})")
        assert {t["host"] for t in tasks} == {n.hostname for n in cluster.nodes}
        # Each node's own daemon granted its tasks' GPUs, none twice.
        for node in cluster.nodes:
            held = [m for c in node.daemon.containers().values() for m in c["gpus"]]
            on_node = [t for t in tasks if t["host"] == node.hostname]
            assert len(held) == len(on_node) == len(set(held))
        # While up, the leftover check sees every part (so its [] below means something).
        seen = " ".join(cluster.leftovers())
        assert all(w in seen for w in ("Mesos master", "framework", f"Mesos agent {NODES - 1}",
                                        f"agent daemon {NODES - 1}"))
    assert cluster.leftovers() == []


def test_a_cluster_of_no_nodes_is_refused_by_name():
    with pytest.raises(LocalClusterError, match="at least one node, not 0"):
        GpuCluster(nodes=0)
