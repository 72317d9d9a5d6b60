"""How the framework learns the agents' GPU health (framework/gpus/gpu_health.py) and keeps GPU
tasks off sick GPUs: the offer's GPUs less the free unhealthy ones; on the real parts
(a Mesos master and agent with the gpu_metrics_port attribute, the agent daemon over
a fake NVML that takes faults), through a daemon SIGKILLed and restarted while a GPU is
unhealthy, a daemon gone for good, and a framework (view) restarted."""
import functools

import pytest

from framework.gpus.gpu_health import GpuHealthView, agent_address
from framework.scheduling.matching import Matcher
from framework.tasks.task_spec import TaskSpec
from localcluster import fake_nvml
from localcluster.gpu_node import GpuNode
from localcluster.mesos import LocalCluster
from localcluster.processes import free_port
from tests.bed import waiting
from tests.framework.offers import offer

# the reports come every 0.2 s: ask four times as often
wait_until = functools.partial(waiting.wait_until, interval=0.05)


def test_the_matcher_takes_unhealthy_free_gpus_off_the_offer():
    offers = [offer("o1", cpus=8, mem=8192, gpus=2, agent_id="a1"),
              offer("o2", cpus=8, mem=8192, gpus=1, agent_id="a2")]
    tasks = [TaskSpec(id=f"t{i}", gpus=1, cpus=0.1, mem=32, cmd="true") for i in range(3)]
    assert sum(len(t) for t in Matcher().match(tasks, offers).placements.values()) == 3
    result = Matcher().match(tasks, offers, unusable_gpus={"a1": 1})
    assert sorted(len(ts) for ts in result.placements.values()) == [1, 1]   # one GPU each
    assert len(result.unplaced) == 1
    result = Matcher().match(tasks, offers, unusable_gpus={"a1": 5, "a2": 1})
    assert result.placements == {} and len(result.unplaced) == 3
    cpu_only = TaskSpec(id="cpu", cpus=0.1, mem=32, cmd="true")
    # an offer whose only GPUs are sick is no GPU offer: CPU work may use it (restricted)
    placed = Matcher().match([cpu_only], [offers[1]], unusable_gpus={"a2": 1}).placements
    assert [t.id for t in placed.get("o2", [])] == ["cpu"]


def test_agent_address_from_the_masters_list():
    agent = {"id": "a1", "pid": "slave(1)@10.0.0.7:5051", "hostname": "gpu7",
             "attributes": {"gpu_metrics_port": 9400.0, "gpu_type": "tesla_v100"}}
    assert agent_address(agent) == "10.0.0.7:9400"
    assert agent_address({**agent, "attributes": {}}) is None
    assert agent_address({**agent, "attributes": {"gpu_metrics_port": "x"}}) is None
    assert agent_address({**agent, "pid": ""}) is None


@pytest.fixture
def node():
    n = GpuNode(fake_nvml.v100x8(), volume=False, metrics_address=f"127.0.0.1:{free_port()}",
                daemon_args=["--health_quiet_period", "3", "--health_poll_interval", "0.2"])
    with n:
        yield n


def test_view_through_daemon_and_framework_restarts(mesos_prefix, node):
    resources, attributes = node.flags()
    with LocalCluster(resources, attributes) as cluster:
        agent_id = cluster.agents()[0]["id"]
        view = GpuHealthView(lambda: cluster.address, interval=0.2, timeout=1.0)
        view.start()
        try:
            wait_until(lambda: view.agent(agent_id) and view.agent(agent_id).health, 10,
                       "the first report")
            assert view.unusable() == {}
            node.nvml.xid(2, 79)
            wait_until(lambda: view.unusable() == {agent_id: 1}, 5, "GPU 2 kept from tasks")
            node.crash()                                   # SIGKILL, GPU 2 unhealthy
            wait_until(lambda: view.agent(agent_id).error, 5, "the daemon gone noticed")
            assert view.unusable() == {agent_id: 1}        # the last report stands
            node.start()
            wait_until(lambda: not view.agent(agent_id).error, 10, "the daemon back")
            assert view.unusable() == {agent_id: 1}        # it kept GPU 2's state on disk
            again = GpuHealthView(lambda: cluster.address, interval=0.2, timeout=1.0)
            again.start()                                  # a restarted framework
            try:
                wait_until(lambda: again.unusable() == {agent_id: 1}, 10, "asked afresh")
                sick = [g for g in again.agent(agent_id).health.gpus if not g.healthy]
                assert [(g.minor, g.xid) for g in sick] == [(2, 79)]
            finally:
                again.stop()
            wait_until(lambda: view.unusable() == {}, 15, "GPU 2 healed")
        finally:
            view.stop()


def test_a_silent_daemon_costs_a_timeout_not_the_view(mesos_prefix):
    import socket
    with socket.socket() as silent:                  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        with LocalCluster("cpus:1;mem:256;gpus:1", f"gpu_metrics_port:{port}") as cluster:
            agent_id = cluster.agents()[0]["id"]
            view = GpuHealthView(lambda: cluster.address, interval=0.2, timeout=0.5)
            view.start()
            try:
                wait_until(lambda: view.agent(agent_id) and view.agent(agent_id).error, 10,
                           "the silent daemon noticed")
                polls = view.polls
                wait_until(lambda: view.polls >= polls + 3, 10, "the view goes on")
                assert "timed out" in view.agent(agent_id).error
                assert view.unusable() == {}             # never heard from: trusted healthy
            finally:
                view.stop()
