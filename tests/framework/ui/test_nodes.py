"""`/v1/nodes` from what the framework knows: agents seen in offers (v1 JSON,
as the master sends them), the live task records with their granted GPU
UUIDs, and per-GPU details when the agents publish them. One tile per GPU;
a UUID only where a task reported it; nothing invented."""
import json

import pytest

from framework.scheduling.agent_inventory import AgentInventory
from framework.http.events import EventBus
from framework.marathon.core.group_manager import GroupManager
from framework.state.state_store import StateStore
from framework.scheduling.task_record import TaskRecord
from framework.tasks.task_spec import TaskSpec
from framework.ui.nodes import NodesView
from tests.bed.agent_offers import UUIDS, offer, task

@pytest.fixture
def group_manager(tmp_path):
    store = StateStore(tmp_path)
    yield GroupManager(store, EventBus())
    store.close()


def nodes_of(group_manager, inventory, tasks=(), details=None):
    with group_manager.lock:
        group_manager.tasks = {t.id: t for t in tasks}
        group_manager.touched()
    view = NodesView(group_manager, inventory, (lambda: details) if details is not None else None)
    return json.loads(view.body())["nodes"]


def test_an_agent_as_offered(group_manager):
    inventory = AgentInventory()
    inventory.saw_offers([offer(domain=True)], {})
    [node] = nodes_of(group_manager, inventory)
    assert node["hostname"] == "gpu-a" and node["id"] == "agent-1" and node["state"] == "active"
    assert (node["gpuType"], node["gpuModel"], node["gpuTypes"]) == (
        "tesla_v100", "tesla_v100_sxm2_16gb", ["tesla_v100"])
    assert (node["nvidiaDriver"], node["cudaDriver"], node["computeCapability"]) == (
        "535.54.03", "12.2", "7.0")
    assert node["gpuMemoryMb"] == 16160
    assert node["platformFeatures"] == ["nvidia-535-54", "cuda-12-2", "nv-compute-7-0"]
    assert (node["region"], node["zone"]) == ("eu", "eu-1a")
    assert node["offered"] == {"cpus": 8.0, "mem": 4096.0, "gpus": 4.0}
    assert node["gpus"] == [{"uuid": None, "state": "free"}] * 4     # no task: no UUID known
    assert (node["gpuCount"], node["gpusFree"], node["gpusHeld"]) == (4, 4, 0)
    assert node["lastOfferAt"] and node["lostAt"] is None


def test_tiles_follow_the_tasks_and_keep_the_uuids_they_reported(group_manager):
    inventory = AgentInventory()
    running = task("train.1", uuids=[UUIDS[3]])
    staging = task("train.2", gpus=2, state="TASK_STAGING")       # UUIDs not reported yet
    inventory.saw_gpus("agent-1", running.gpus)
    # the offer after both launched: 8 GPUs, 5 offered + 3 held by our tasks
    inventory.saw_offers([offer(gpus=5)], {"agent-1": 3})
    tiles = nodes_of(group_manager, inventory, [running, staging])[0]["gpus"]
    assert tiles[0] == {"uuid": UUIDS[3], "state": "held", "taskId": "train.1", "appId": "/train",
                        "taskState": "TASK_RUNNING"}
    assert tiles[1:3] == [{"uuid": None, "state": "held", "taskId": "train.2", "appId": "/train",
                           "taskState": "TASK_STAGING"}] * 2
    assert tiles[3:] == [{"uuid": None, "state": "free"}] * 5

    # train.1 ended: its GPU is known by its UUID from now on, free
    inventory.saw_offers([offer(gpus=6, n=1)], {"agent-1": 2})
    inventory.saw_gpus("agent-1", [UUIDS[0], UUIDS[1]])           # train.2's, reported
    staging.gpus, staging.state = [UUIDS[0], UUIDS[1]], "TASK_RUNNING"
    tiles = nodes_of(group_manager, inventory, [staging])[0]["gpus"]
    assert [(t["uuid"], t["state"]) for t in tiles] == [
        (UUIDS[3], "free"), (UUIDS[0], "held"), (UUIDS[1], "held")] + [(None, "free")] * 5


def test_known_uuids_are_not_guessed_free_when_the_counts_disagree(group_manager):
    """More GPUs known than free ones counted (another framework holds some):
    which known ones are free cannot be told, so none is named."""
    inventory = AgentInventory()
    inventory.saw_gpus("agent-1", UUIDS[:4])
    inventory.saw_offers([offer(gpus=2)], {})
    tiles = nodes_of(group_manager, inventory)[0]["gpus"]
    assert tiles == [{"uuid": None, "state": "free"}] * 2


def test_health_and_usage_where_the_agent_publishes_them(group_manager):
    inventory = AgentInventory()
    held = task("serve.1", uuids=[UUIDS[1]], app="/serve")
    inventory.saw_offers([offer(gpus=2)], {"agent-1": 1})
    details = {"agent-1": {"gpus": {
        UUIDS[1]: {"health": "healthy", "utilization": 87.0, "memory": {"usedMb": 9000, "totalMb": 16160}},
        UUIDS[2]: {"health": "unhealthy", "reason": "XID 79: GPU has fallen off the bus"}}}}
    node = nodes_of(group_manager, inventory, [held], details)[0]
    by_uuid = {t["uuid"]: t for t in node["gpus"]}
    assert by_uuid[UUIDS[1]] == {"uuid": UUIDS[1], "state": "held", "taskId": "serve.1",
                                 "appId": "/serve", "taskState": "TASK_RUNNING", "health": "healthy",
                                 "utilization": 87.0, "memory": {"usedMb": 9000, "totalMb": 16160}}
    assert by_uuid[UUIDS[2]] == {"uuid": UUIDS[2], "state": "unhealthy", "health": "unhealthy",
                                 "reason": "XID 79: GPU has fallen off the bus"}
    assert [t for t in node["gpus"] if t["uuid"] is None] == [{"uuid": None, "state": "free"}]
    assert (node["gpuCount"], node["gpusHeld"], node["gpusFree"], node["gpusUnhealthy"]) == (3, 1, 1, 1)


def test_agents_known_only_from_tasks_and_lost_agents(group_manager):
    """After a restart the framework may hold tasks on agents it has not been
    offered yet; an agent the master removed stays, marked lost."""
    inventory = AgentInventory()
    inventory.saw_offers([offer("agent-2", "gpu-b", gpus=1)], {})
    inventory.lost("agent-2")
    elsewhere = task("train.9", agent="agent-3", host="gpu-c", uuids=[UUIDS[7]])
    nodes = {n["hostname"]: n for n in nodes_of(group_manager, inventory, [elsewhere])}
    assert nodes["gpu-b"]["state"] == "lost" and nodes["gpu-b"]["lostAt"]
    assert nodes["gpu-c"]["state"] == "tasks-only" and nodes["gpu-c"]["lastOfferAt"] is None
    assert nodes["gpu-c"]["gpus"] == [{"uuid": UUIDS[7], "state": "held", "taskId": "train.9",
                                       "appId": "/train", "taskState": "TASK_RUNNING"}]
    inventory.saw_offers([offer("agent-2", "gpu-b", gpus=1, n=1)], {})   # back
    assert {n["hostname"]: n["state"] for n in nodes_of(group_manager, inventory)}["gpu-b"] == "active"


def test_the_answer_is_built_again_only_after_a_change(group_manager):
    inventory = AgentInventory()
    inventory.saw_offers([offer()], {})
    view = NodesView(group_manager, inventory)
    first = view.body()
    assert view.body() is first
    inventory.saw_offers([offer(gpus=3, n=1)], {})
    second = view.body()
    assert second is not first and json.loads(second)["nodes"][0]["gpuCount"] == 3
    with group_manager.lock:
        group_manager.tasks = {"t": task("t", uuids=[UUIDS[0]])}
        group_manager.touched()
    assert json.loads(view.body())["nodes"][0]["gpusHeld"] == 1


def test_a_probing_gpu_is_not_free_and_usage_comes_from_the_task(group_manager):
    inventory = AgentInventory()
    held = task("serve.1", uuids=[UUIDS[0]], app="/serve")
    held.gpu_usage = {"memoryUsedBytes": 3 << 30, "memoryTotalBytes": 16 << 30,
                      "utilizationPercent": 64, "gpus": [
                          {"uuid": UUIDS[0], "memoryUsedBytes": 3 << 30,
                           "memoryTotalBytes": 16 << 30, "utilizationPercent": 64}]}
    inventory.saw_offers([offer(gpus=2)], {"agent-1": 1})
    details = {"agent-1": {"gpus": {
        UUIDS[0]: {"health": "healthy"},
        UUIDS[1]: {"health": "probing", "reason": "XID 79 (GPU has fallen off the bus)"},
        UUIDS[2]: {"health": "healthy"}},
        "error": "timed out", "reportedAt": 1700000000.0}}
    node = nodes_of(group_manager, inventory, [held], details)[0]
    assert (node["healthError"], node["healthReportedAt"]) == ("timed out", "2023-11-14T22:13:20.000Z")
    by_uuid = {t["uuid"]: t for t in node["gpus"]}
    assert by_uuid[UUIDS[0]]["utilization"] == 64
    assert by_uuid[UUIDS[0]]["memory"] == {"usedMb": 3072, "totalMb": 16384}
    assert by_uuid[UUIDS[1]]["state"] == "unhealthy" and by_uuid[UUIDS[1]]["health"] == "probing"
    assert by_uuid[UUIDS[2]]["state"] == "free"
    assert (node["gpuCount"], node["gpusHeld"], node["gpusFree"], node["gpusUnhealthy"]) == (3, 1, 1, 1)


MIG_UUIDS = [f"MIG-0000020{n}-0009-5b1e-8d2a-00000000000{n}" for n in range(4)]


def mig_offer(agent="agent-m", host="gpu-m", gpus=1, mig=(("1g.18gb", 2), ("3g.71gb", 1)),
              single=None):
    o = offer(agent, host, gpus=gpus)
    for profile, n in mig:
        o["resources"].append({"name": f"mig-{profile}", "type": "SCALAR",
                               "scalar": {"value": float(n)}, "role": "*"})
    if single:
        o["attributes"].append({"name": "gpu_mig_profile", "type": "TEXT",
                                "text": {"value": single}})
    return o


def mig_task(task_id, profile, uuid, agent="agent-m", host="gpu-m"):
    return TaskRecord(spec=TaskSpec(id=task_id, app_id="/infer", gpus=1, mig_profile=profile,
                                    cmd="true"),
                      state="TASK_RUNNING", mesos_task_id=task_id, agent_id=agent, hostname=host,
                      gpus=[uuid], app_version="v1")


def test_mig_devices_of_a_mixed_node_are_tiles_of_their_own_with_their_profile(group_manager):
    """gpus:1;mig-1g.18gb:3;mig-3g.71gb:1 with one 1g.18gb held by our task: the offer
    has 1g.18gb:2 left; the whole GPU and each MIG device is a tile, none counted twice."""
    inventory = AgentInventory()
    inventory.saw_offers([mig_offer()], {}, {"agent-m": {"1g.18gb": 1}})
    (node,) = nodes_of(group_manager, inventory, [mig_task("t1", "1g.18gb", MIG_UUIDS[0])])
    tiles = [(t["state"], t.get("profile"), t["uuid"]) for t in node["gpus"]]
    assert tiles == [("held", "1g.18gb", MIG_UUIDS[0]), ("free", None, None),
                     ("free", "1g.18gb", None), ("free", "1g.18gb", None),
                     ("free", "3g.71gb", None)]
    assert (node["gpuCount"], node["gpusHeld"], node["gpusFree"]) == (5, 1, 4)


def test_a_single_nodes_gpus_are_its_mig_devices(group_manager):
    inventory = AgentInventory()
    inventory.saw_offers([mig_offer(gpus=6, mig=(), single="1g.18gb")], {"agent-m": 1})
    (node,) = nodes_of(group_manager, inventory, [mig_task("t1", "1g.18gb", MIG_UUIDS[1])])
    assert [t.get("profile") for t in node["gpus"]] == ["1g.18gb"] * 7
    assert (node["gpusHeld"], node["gpusFree"]) == (1, 6)
