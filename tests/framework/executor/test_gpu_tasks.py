"""GPU tasks end to end: our scheduler on a real Mesos 1.11 master and agent
(the agent advertises what `mesos-gpu agent flags` prints), our executor, the
real agent daemon over a fake K80, the real Docker engine and real cgroups.
One cluster and one scheduler for the module, run twice: on an open cluster and on
one secured as production clusters are (`secure`: the framework authenticates to the
master, our executors to the agent with its token; localcluster/mesos_auth.py)."""
import time
from pathlib import Path

import pytest

from framework.scheduling.scheduler import GpuScheduler, RetryPolicy, SchedulerConfig
from framework.state.state_store import StateStore
from framework.tasks.taskinfo import ExecutorSettings
from framework.tasks.task_spec import TaskSpec
from isolator.cgroups.docker_devices import LABEL as CONTAINER_LABEL
from tests.bed.gpu_bed import k80_node, master_and_agent
from framework.scheduling.mesos_credential import Credential
from localcluster.mesos_auth import MesosAuthentication
from tests.framework.e2e import (VOLUME_LABEL, container_probe, host_probe, line_value, opened,
                                 sandbox_output, wait_for)

HOSTNAME = "gpu-k80"


@pytest.fixture(scope="module")
def node(docker_engine):
    with k80_node(docker_engine, "fw-k80") as n:
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
                          auth.agent_env() if auth else None) as agent:
        yield agent


@pytest.fixture(scope="module")
def scheduler(agent, node, docker_engine, tmp_path_factory, auth):
    config = SchedulerConfig(
        master=agent.master, name="fw-gpu-e2e", refuse_seconds=1,
        credential=credential(auth),
        retry=RetryPolicy(max_attempts=1),
        executor=ExecutorSettings(agent_socket=str(node.socket), docker_host=docker_engine.host))
    sched = GpuScheduler(config, StateStore(tmp_path_factory.mktemp("fw-state"))).start()
    assert sched.wait_subscribed(30)
    yield sched
    sched.stop(teardown=True)


def credential(auth):
    return Credential(auth.principal, auth.secret) if auth else None


def no_gpu_left_held(node, docker_engine, timeout: float = 10) -> None:
    """Every GPU back in the pool, no container of ours left in Docker."""
    deadline = time.monotonic() + timeout
    while node.allocated() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert node.allocated() == [] and node.containers() == {}
    leftovers = docker_engine.client().containers.list(all=True, filters={"label": CONTAINER_LABEL})
    assert leftovers == []


def uuid_of(node, minor: int) -> str:
    return next(g.uuid for g in node.layout.gpus if g.minor == minor)


def check_sees_only_its_gpu(node, record, output: str) -> None:
    result = opened(output)
    allowed = [m for m, r in result.items() if r == "ENXIO"]
    assert len(allowed) == 1, output
    assert result == {m: ("ENXIO" if m == allowed[0] else "EPERM") for m in node.minors}
    assert record.gpus == [uuid_of(node, allowed[0])]
    assert line_value(output, "ENV NVIDIA_VISIBLE_DEVICES") == record.gpus[0]


@pytest.mark.parametrize("with_label", [True, False], ids=["volume-label", "no-label"])
def test_docker_task_sees_exactly_its_gpu_and_the_volume_only_with_the_label(
        scheduler, node, agent, docker_engine, busybox_image, with_label):
    image = busybox_image(labels=VOLUME_LABEL if with_label else None)
    task_id = f"docker-gpu-{with_label}".lower()
    scheduler.submit(TaskSpec(id=task_id, container="DOCKER", image=image, gpus=1, cpus=0.1,
                              mem=64, cmd=container_probe(node.minors)))
    record = wait_for(scheduler, task_id, {"TASK_FINISHED", "TASK_FAILED"})
    output = sandbox_output(agent.run_dir, record.mesos_task_id)
    assert record.state == "TASK_FINISHED", (record, output)
    check_sees_only_its_gpu(node, record, output)
    assert line_value(output, "ENV CUDA_VISIBLE_DEVICES") == "0"
    assert line_value(output, "VOLUME") == ("yes" if with_label else "no")
    path = line_value(output, "ENV PATH")
    if with_label:
        assert line_value(output, "VOLUME_RW") == "no"       # read-only
        assert "/usr/local/nvidia/bin" in path.split(":")
        assert "/usr/local/nvidia/lib64" in line_value(output, "ENV LD_LIBRARY_PATH").split(":")
    else:
        assert "/usr/local/nvidia/bin" not in path.split(":")
    assert record.hostname == HOSTNAME
    no_gpu_left_held(node, docker_engine)


@pytest.mark.parametrize("with_label", [True, False], ids=["volume-label", "no-label"])
def test_unified_task_on_the_host_runs_in_its_cgroup_with_exactly_its_gpu(
        scheduler, node, agent, docker_engine, with_label):
    task_id = f"host-gpu-{with_label}".lower()
    scheduler.submit(TaskSpec(id=task_id, container="MESOS", gpus=1, cpus=0.1, mem=64,
                              labels=VOLUME_LABEL if with_label else {},
                              cmd=host_probe(node.minors, node.dev_dir)))
    record = wait_for(scheduler, task_id, {"TASK_FINISHED", "TASK_FAILED"})
    output = sandbox_output(agent.run_dir, record.mesos_task_id)
    assert record.state == "TASK_FINISHED", (record, output)
    check_sees_only_its_gpu(node, record, output)
    assert node.cgroups_root in line_value(output, "CGROUP")
    assert line_value(output, "VOLUME") == ("yes" if with_label else "no")
    if with_label:
        assert line_value(output, "VOLUME_RW") == "no"
    no_gpu_left_held(node, docker_engine)


def test_unified_task_with_an_image_runs_under_runc(scheduler, node, agent, docker_engine,
                                                     busybox_image):
    image = busybox_image(labels=VOLUME_LABEL)
    scheduler.submit(TaskSpec(id="runc-gpu", container="MESOS", image=image, gpus=1, cpus=0.1,
                              mem=64, cmd=container_probe(node.minors)))
    record = wait_for(scheduler, "runc-gpu", {"TASK_FINISHED", "TASK_FAILED"})
    output = sandbox_output(agent.run_dir, record.mesos_task_id)
    assert record.state == "TASK_FINISHED", (record, output)
    check_sees_only_its_gpu(node, record, output)
    assert line_value(output, "VOLUME") == "yes" and line_value(output, "VOLUME_RW") == "no"
    no_gpu_left_held(node, docker_engine)


def test_two_tasks_never_share_a_gpu_and_a_third_waits(scheduler, node, docker_engine,
                                                        busybox_image):
    image = busybox_image()
    for i in range(3):
        scheduler.submit(TaskSpec(id=f"share-{i}", container="DOCKER", image=image, gpus=1,
                                  cpus=0.1, mem=32, cmd="sleep 4"))
    running = [wait_for(scheduler, f"share-{i}", {"TASK_RUNNING"}) for i in (0, 1)]
    assert {g for r in running for g in r.gpus} == {uuid_of(node, m) for m in node.minors}
    assert running[0].gpus != running[1].gpus
    assert sorted(node.allocated()) == node.minors
    assert scheduler.task("share-2").state == "PENDING"      # no GPU free: not launched
    third = wait_for(scheduler, "share-2", {"TASK_RUNNING"}, timeout=60)
    assert len(third.gpus) == 1
    for i in range(3):
        assert wait_for(scheduler, f"share-{i}", {"TASK_FINISHED"}).state == "TASK_FINISHED"
    no_gpu_left_held(node, docker_engine)


def test_killed_task_gives_its_gpu_back(scheduler, node, docker_engine, busybox_image):
    scheduler.submit(TaskSpec(id="to-kill", container="DOCKER", image=busybox_image(), gpus=2,
                              cpus=0.1, mem=32, cmd="sleep 600"))
    running = wait_for(scheduler, "to-kill", {"TASK_RUNNING"})
    assert len(running.gpus) == 2
    scheduler.kill("to-kill")
    assert wait_for(scheduler, "to-kill", {"TASK_KILLED"}, timeout=30).state == "TASK_KILLED"
    no_gpu_left_held(node, docker_engine)


def test_image_missing_on_the_agent_fails_with_the_reason(scheduler, node, docker_engine):
    scheduler.submit(TaskSpec(id="no-image", container="DOCKER", image="bed/never-made:1",
                              gpus=1, cpus=0.1, mem=32, cmd="true"))
    record = wait_for(scheduler, "no-image", {"TASK_FAILED"})
    # not in the engine: pulled from Docker Hub, which this bed cannot reach (or, with
    # a network, does not have it): either way the task fails naming the image
    assert "bed/never-made:1 on gpu-k80 failed: " in record.message or \
        "image bed/never-made:1 cannot be pulled on gpu-k80: " in record.message, record.message
    no_gpu_left_held(node, docker_engine)


def test_image_needing_a_newer_cuda_fails_before_anything_starts(scheduler, node, docker_engine,
                                                                 busybox_image):
    image = busybox_image(labels={"com.nvidia.cuda.version": "99.0"})
    for container in ("DOCKER", "MESOS"):
        task_id = f"cuda-{container.lower()}"
        scheduler.submit(TaskSpec(id=task_id, container=container, image=image, gpus=1,
                                  cpus=0.1, mem=32, cmd="true"))
        record = wait_for(scheduler, task_id, {"TASK_FAILED", "TASK_FINISHED"})
        assert record.state == "TASK_FAILED"
        assert (f"image {image}: unsupported CUDA version: the image needs CUDA 99.0, newer "
                f"than driver 535.261.03 (CUDA 12.2), and the image has no CUDA "
                f"forward-compatibility libcuda in /usr/local/cuda/compat") in record.message
    no_gpu_left_held(node, docker_engine)


def test_agent_without_a_docker_engine_refuses_docker_tasks_clearly(
        agent, auth, node, docker_engine, busybox_image, tmp_path):
    config = SchedulerConfig(
        master=agent.master, name="fw-no-docker", refuse_seconds=1, credential=credential(auth),
        retry=RetryPolicy(max_attempts=1),
        executor=ExecutorSettings(agent_socket=str(node.socket),
                                  docker_host=f"unix://{tmp_path}/no-docker.sock"))
    sched = GpuScheduler(config, StateStore(tmp_path / "state")).start()
    try:
        sched.submit(TaskSpec(id="no-engine", container="DOCKER", image=busybox_image(),
                              gpus=1, cpus=0.1, mem=32, cmd="true"))
        record = wait_for(sched, "no-engine", {"TASK_FAILED"})
        assert "cannot run this container type: no Docker engine answers" in record.message
    finally:
        sched.stop(teardown=True)
    no_gpu_left_held(node, docker_engine)


def test_framework_teardown_shuts_executors_down_and_leaves_nothing(
        agent, auth, node, docker_engine, busybox_image, tmp_path):
    config = SchedulerConfig(
        master=agent.master, name="fw-teardown", refuse_seconds=1, credential=credential(auth),
        executor=ExecutorSettings(agent_socket=str(node.socket), docker_host=docker_engine.host))
    sched = GpuScheduler(config, StateStore(tmp_path / "state")).start()
    image = busybox_image()
    sched.submit(TaskSpec(id="td-runc", container="MESOS", image=image, gpus=1, cpus=0.1,
                          mem=32, cmd="sleep 600"))
    sched.submit(TaskSpec(id="td-docker", container="DOCKER", image=image, gpus=1, cpus=0.1,
                          mem=32, cmd="sleep 600"))
    try:
        for task_id in ("td-runc", "td-docker"):
            wait_for(sched, task_id, {"TASK_RUNNING"})
        container_ids = list(node.containers())
        assert len(container_ids) == 2 and sorted(node.allocated()) == node.minors
    finally:
        sched.stop(teardown=True)           # Mesos shuts the executors down
    no_gpu_left_held(node, docker_engine, timeout=20)
    leftovers = [p for cid in container_ids for p in Path("/sys/fs/cgroup").glob(f"*/{cid}")]
    assert leftovers == []
