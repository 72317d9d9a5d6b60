"""`/v1/nodes` with a real Mesos 1.11 master and agents and the framework
service: agents appear as the master offers them, even one that registers
while the framework is idle (offers suppressed: the scheduler revives them
every `agent_refresh_seconds`), and an agent that dies is shown lost once
the master gives up on it."""
from dataclasses import replace

import pytest

from framework.process.framework_process import FrameworkProcess, default_scheduler_factory
from localcluster.mesos import Agent, Master
from tests.bed.framework_process import client_of, framework_args
from tests.bed.waiting import wait_until

DEAD_AGENT = {"MESOS_AGENT_PING_TIMEOUT": "1secs", "MESOS_MAX_AGENT_PING_TIMEOUTS": "2"}
ATTRIBUTES = ("gpu_type:tesla_v100;gpu_model:tesla_v100_sxm2_16gb;nvidia_driver:535.54.03;"
              "cuda_driver:12.2;platform_features:nvidia-535-54/cuda-12-2/nv-compute-7-0")


@pytest.fixture
def master(mesos_prefix):
    with Master(env=DEAD_AGENT) as running:
        yield running


def nodes(api):
    reply = api.get("/v1/nodes")
    assert reply.status == 200
    return {n["hostname"]: n for n in reply.json["nodes"]}


def test_agents_appear_as_offered_and_are_lost_when_they_die(master, tmp_path):
    def refreshing(args, store):
        scheduler = default_scheduler_factory(args, store)
        scheduler.config = replace(scheduler.config, agent_refresh_seconds=2.0)
        return scheduler

    with Agent(master, "cpus:2;mem:1024;gpus:8", ATTRIBUTES, hostname="v100-a") as first:
        service = FrameworkProcess(framework_args(master.address, tmp_path / "state"),
                                   scheduler_factory=refreshing).start()
        try:
            assert service.scheduler.wait_subscribed(30)
            api = client_of(service)
            seen = wait_until(lambda: nodes(api).get("v100-a"))
            assert seen["id"] == first.id and seen["state"] == "active"
            assert (seen["gpuType"], seen["nvidiaDriver"], seen["cudaDriver"]) == (
                "tesla_v100", "535.54.03", "12.2")
            assert seen["platformFeatures"] == ["nvidia-535-54", "cuda-12-2", "nv-compute-7-0"]
            assert [t["state"] for t in seen["gpus"]] == ["free"] * 8
            # idle: offers are suppressed now; an agent that registers meanwhile
            # is seen at the next refresh
            wait_until(lambda: service.scheduler._suppressed, timeout=10)
            with Agent(master, "cpus:2;mem:1024;gpus:2", "gpu_type:tesla_k80",
                       hostname="k80-b") as second:
                late = wait_until(lambda: nodes(api).get("k80-b"), timeout=15)
                assert late["id"] == second.id and late["gpuCount"] == 2
            # stopped: the master stops hearing from it (2 pings of 1 s) and tells us
            lost = wait_until(lambda: nodes(api)["k80-b"]["state"] == "lost"
                              and nodes(api)["k80-b"], timeout=30)
            assert lost["lostAt"] and nodes(api)["v100-a"]["state"] == "active"
        finally:
            service.stop()
