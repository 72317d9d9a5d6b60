"""Tasks of every kind on a GPU shared under MPS, end to end on the real parts: a real
Mesos 1.11 master and agent, our executor and agent daemon, the real Docker engine and
runc, the real MPS control daemon of the bed's 535 driver for GPU 1, the real 535
libcuda from the driver volume.

Each task (DOCKER, MESOS with an image, MESOS on the host) holds 0.25 of GPU 1 and runs
a real CUDA client: its libcuda reaches the GPU's control daemon through the pipe
directory it was given (in the host's IPC namespace), and the control daemon starts the
driver's real MPS server, which fails here for lack of a GPU, as a server that dies
under its clients does on a real node. The agent daemon reads that from the control
daemon's log and stops the task: it fails naming the MPS server."""
import os
import re

import pytest

from framework.tasks.task_spec import TaskSpec
from localcluster import cuda_probe, fake_nvml
from localcluster.gpu_node import GpuNode, layout_for_driver_files
from tests.framework.e2e import NO_MKNOD, VOLUME_LABEL, line_value, sandbox_output, wait_for
from tests.framework.executor.test_field_host_tasks import KIND_IDS, KINDS, cluster

TASK = r"""
echo "IPC $(readlink /proc/self/ns/ipc)"
echo "PIPE $CUDA_MPS_PIPE_DIRECTORY $(ls $CUDA_MPS_PIPE_DIRECTORY | tr '\n' ' ')"
echo "PROBE $({probe})"
sleep 600
"""


@pytest.fixture(scope="module")
def mps_cluster(mesos_prefix, docker_engine, tmp_path_factory):
    layout = layout_for_driver_files(fake_nvml.k80(), "mps-tasks")
    with GpuNode(layout, docker_engine.host, share_args=["--shared_gpus", "1"]) as node, \
            cluster(docker_engine, node, "mps-tasks",
                    tmp_path_factory.mktemp("fw-state")) as (agent, scheduler):
        yield node, agent, scheduler


@pytest.fixture(scope="module")
def probe_image(docker_engine):
    return docker_engine.import_rootfs("bed/cuda-probe:mps", cuda_probe.image_tar(),
                                       VOLUME_LABEL, env={"PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("container, with_image", KINDS, ids=KIND_IDS)
def test_a_tasks_cuda_client_reaches_its_mps_server_and_its_failure_stops_the_task(
        mps_cluster, probe_image, container, with_image):
    node, agent, scheduler = mps_cluster
    task_id = f"mps-{container}-{with_image}".lower()
    probe = cuda_probe.IMAGE_PATH if with_image else NO_MKNOD + str(cuda_probe.build())
    control_log = node.work_dir / "mps/nvidia1/log/control.log"
    seen = len(control_log.read_bytes())
    scheduler.submit(TaskSpec(id=task_id, container=container,
                              image=probe_image if with_image else None, gpus=0.25, cpus=0.1,
                              mem=64, labels=VOLUME_LABEL, cmd=TASK.format(probe=probe)))
    record = wait_for(scheduler, task_id, {"TASK_FINISHED", "TASK_FAILED", "TASK_KILLED"},
                      timeout=120)
    output = sandbox_output(agent.run_dir, record.mesos_task_id)
    pipe = str(node.work_dir / "mps/nvidia1/pipe")
    # its GPU's pipe directory and the control daemon's socket in it; the host's IPC
    assert line_value(output, "PIPE").split()[:2] == [pipe, "control"], output
    assert line_value(output, "IPC") == os.readlink("/proc/self/ns/ipc"), output
    # the real libcuda of the volume asked the control daemon for a server ...
    assert cuda_probe.parse(line_value(output, "PROBE"))["loaded"], output
    log = control_log.read_bytes()[seen:].decode()
    assert re.search(r"NEW CLIENT \d+ from user 0", log), log
    # ... whose failure stopped the task, naming it
    assert record.state == "TASK_FAILED", (record, output)
    assert "shared under MPS: its MPS server (pid" in record.message, record
    assert node.client.info()["shared"]["1"]["tenants"] == {}
