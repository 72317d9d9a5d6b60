"""MIG devices end to end: a node whose GPU 0 is in MIG mode (1g.18gb x3 + 3g.71gb,
as a real H200 lays them out) and GPU 1 is not; `agent flags` advertises
`gpus:1;mig-1g.18gb:3;mig-3g.71gb:1`; real Mesos 1.11 offers them; our scheduler
places a task asking for `mig_profile` on its profile's resource, our executor
prepares it with the daemon, and the task holds exactly its MIG device: the parent
GPU's node and its own GPU and compute instance's nvidia-caps nodes (ENXIO: allowed,
no driver), EPERM on the other instances' and the other GPU."""
import re

import pytest

from framework.scheduling.scheduler import GpuScheduler, RetryPolicy, SchedulerConfig
from framework.state.state_store import StateStore
from framework.tasks.task_spec import TaskSpec
from framework.tasks.taskinfo import ExecutorSettings
from localcluster import fake_nvml
from localcluster.gpu_node import GpuNode, layout_for_driver_files
from localcluster.mesos import Agent, Master
from tests.framework.e2e import line_value, sandbox_output, wait_for

# Opens each node of its arguments (`set --` before it); prints the grant's environment.
PROBE = r"""
for p in "$@"; do
  r=$( (exec 3<>$p) 2>&1 ) && echo "OPEN $p OK" || echo "OPEN $p $r"
done
echo "ENV NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"
echo "ENV CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
"""


@pytest.fixture(scope="module")
def mig_cluster(mesos_prefix, tmp_path_factory):
    layout = layout_for_driver_files(fake_nvml.h200mig(), "fw-h200mig")
    with GpuNode(layout) as node:
        resources, attributes = node.flags()
        with Master() as master, Agent(master, resources, attributes, hostname="h200mig") as agent:
            config = SchedulerConfig(master=agent.master, name="fw-mig", refuse_seconds=1,
                                     retry=RetryPolicy(max_attempts=1),
                                     executor=ExecutorSettings(agent_socket=str(node.socket)))
            scheduler = GpuScheduler(config, StateStore(tmp_path_factory.mktemp("st"))).start()
            assert scheduler.wait_subscribed(30)
            try:
                yield node, agent, scheduler, resources
            finally:
                scheduler.stop(teardown=True)


def opened(output: str) -> dict:
    out = {}
    for path, text in re.findall(r"^OPEN (\S+) (.*)$", output, re.M):
        out[path] = "ENXIO" if "No such device or address" in text else \
            "EPERM" if "Operation not permitted" in text else text
    return out


def test_the_agent_offers_each_profile_as_a_resource_of_its_own(mig_cluster):
    _, _, _, resources = mig_cluster
    assert "gpus:1" in resources.split(";")
    assert "mig-1g.18gb:3" in resources.split(";") and "mig-3g.71gb:1" in resources.split(";")


@pytest.mark.parametrize("profile", ["1g.18gb", "3g.71gb"])
def test_a_task_asking_for_a_profile_holds_exactly_its_mig_device(mig_cluster, profile):
    node, agent, scheduler, _ = mig_cluster
    caps = sorted((node.dev_dir / "nvidia-caps").iterdir())
    nodes = [node.dev_dir / "nvidia0", node.dev_dir / "nvidia1", *caps]
    task_id = f"mig-{profile.replace('.', '-')}"
    scheduler.submit(TaskSpec(id=task_id, container="MESOS", gpus=1, mig_profile=profile,
                              cpus=0.1, mem=32, cmd=f"set -- {' '.join(map(str, nodes))}\n" + PROBE))
    record = wait_for(scheduler, task_id, {"TASK_FINISHED", "TASK_FAILED"}, timeout=90)
    output = sandbox_output(agent.run_dir, record.mesos_task_id)
    assert record.state == "TASK_FINISHED", (record, output)
    visible = line_value(output, "ENV NVIDIA_VISIBLE_DEVICES")
    assert visible.startswith("MIG-") and line_value(output, "ENV CUDA_VISIBLE_DEVICES") == visible
    device = next(d for d in fake_nvml.h200mig().mig[0].devices if d.uuid == visible)
    assert {p.id: p.name for p in fake_nvml.H200_PROFILES}[device.profile_id] == f"MIG {profile}"
    own = {f"nvidia-cap{m}" for (minor, gi, ci), m in node.layout.caps_minors().items()
           if minor == 0 and gi == device.gi and ci in (None, device.ci)}
    seen = opened(output)
    assert seen[str(node.dev_dir / "nvidia0")] == "ENXIO"        # its parent GPU
    assert seen[str(node.dev_dir / "nvidia1")] == "EPERM"        # the whole GPU beside it
    assert len(own) == 2
    for path in caps:
        assert seen[str(path)] == ("ENXIO" if path.name in own else "EPERM"), path.name
    assert node.allocated() == []


def test_a_whole_gpu_task_never_gets_the_mig_gpu(mig_cluster):
    node, agent, scheduler, _ = mig_cluster
    scheduler.submit(TaskSpec(id="whole", container="MESOS", gpus=1, cpus=0.1, mem=32,
                              cmd="echo ENV NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"))
    record = wait_for(scheduler, "whole", {"TASK_FINISHED", "TASK_FAILED"}, timeout=90)
    output = sandbox_output(agent.run_dir, record.mesos_task_id)
    assert record.state == "TASK_FINISHED", (record, output)
    gpu1 = next(g for g in node.layout.gpus if g.minor == 1)
    assert line_value(output, "ENV NVIDIA_VISIBLE_DEVICES") == gpu1.uuid
