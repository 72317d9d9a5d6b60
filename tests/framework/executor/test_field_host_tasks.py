"""GPU tasks on nodes laid out as GPU nodes in the field are (the H200 host of
shared/reference/real-gpu-node.md): the driver under /usr/local/nvidia named by an
ld.so.conf.d file, nvidia-smi shell wrappers in /usr/bin and /bin, a CUDA compat
directory of another release. Real Mesos, our executor and agent daemon, the real
Docker engine and runc, real NVIDIA libraries (the real libcuda loads without a
GPU; its cuInit answers 100, no device).

For the three kinds of task (DOCKER, MESOS with an image, MESOS on the host) the
libcuda the task's dynamic loader maps for `libcuda.so.1` is the running
driver's, unless the compat rule chose a compat libcuda of a newer driver branch;
`nvidia-smi` in the task is the driver's ELF (it runs, and fails only for lack of
a kernel driver). Two nodes: one running 535.261.03 (the compat libraries of
535.216.03 are not newer), one running 470.256.02 (535's are)."""
import json
import os
import shutil
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from framework.scheduling.scheduler import GpuScheduler, RetryPolicy, SchedulerConfig
from framework.state.state_store import StateStore
from framework.tasks.task_spec import TaskSpec
from framework.tasks.taskinfo import ExecutorSettings
from localcluster import cuda_probe, driver_files, driver_root_host, fake_nvml
from localcluster.gpu_node import GpuNode, layout_for_driver_files
from localcluster.mesos import Agent, Master
from tests.framework.e2e import NO_MKNOD, VOLUME_LABEL, line_value, sandbox_output, wait_for

V, OLD, V470 = driver_files.DRIVER_VERSION, driver_files.OLD_DRIVER_VERSION, \
    driver_files.DRIVER_470_VERSION
VOLUME_LIBCUDA = "/usr/local/nvidia/lib64/libcuda.so.{}"
IMAGE_COMPAT_LIBCUDA = f"/{driver_root_host.CUDA_DIR}/compat/libcuda.so.{{}}"
HOST_CUDA_DIR = "usr/local/cuda-bed-compat"
NO_KERNEL_DRIVER = "couldn't communicate with the NVIDIA driver"

# What the task runs: the loader probe, then nvidia-smi as a user would call it.
TASK = r"""
echo "PROBE $({probe})"
out=$({no_mknod}nvidia-smi -L 2>&1); echo "SMI_EXIT $?"
echo "SMI $(echo "$out" | head -2 | tr '\n' ' ')"
echo "SMI_PATH $(command -v nvidia-smi)"
echo "ENV LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
"""


@pytest.fixture(scope="module")
def host_compat():
    """This machine's /usr/local/cuda/compat holding 535.216.03's libcuda, as the
    H200 host had an older one: in the CUDA install this machine has (its compat/
    directory made and removed), or a CUDA directory of the test's own. One it
    did not make is never touched. Yields the compat libcuda's real path."""
    cuda = Path("/usr/local/cuda")
    if os.path.lexists(cuda):
        compat = cuda / "compat"
        if os.path.lexists(compat):
            pytest.fail(f"{compat} exists on this machine: the test lays out a CUDA compat "
                        f"directory there and will not touch one it did not make")
        made = [driver_root_host.fill_compat(compat, OLD)]
    else:
        driver_root_host.lay_out_compat(Path("/"), OLD, cuda_dir=HOST_CUDA_DIR)
        made = [cuda, Path("/") / HOST_CUDA_DIR]
    try:
        yield os.path.realpath(cuda / "compat" / f"libcuda.so.{OLD}")
    finally:
        for path in made:
            if path.is_symlink():
                path.unlink()
            else:
                shutil.rmtree(path)


@contextmanager
def cluster(docker_engine, node: GpuNode, hostname: str, state_dir: Path):
    resources, attributes = node.flags()
    with Master() as master, Agent(master, resources, attributes, hostname=hostname) as agent:
        config = SchedulerConfig(
            master=agent.master, name=f"fw-{hostname}", refuse_seconds=1,
            retry=RetryPolicy(max_attempts=1),
            executor=ExecutorSettings(agent_socket=str(node.socket),
                                      docker_host=docker_engine.host))
        scheduler = GpuScheduler(config, StateStore(state_dir)).start()
        assert scheduler.wait_subscribed(30)
        try:
            yield agent, scheduler
        finally:
            scheduler.stop(teardown=True)


@pytest.fixture(scope="module")
def node535(mesos_prefix, docker_engine, host_compat, tmp_path_factory):
    root = driver_root_host.build(tmp_path_factory.mktemp("field") / "host", V, compat=OLD)
    layout = layout_for_driver_files(fake_nvml.k80(), "field-535")
    with GpuNode(layout, docker_engine.host, driver_root=root) as node, \
            cluster(docker_engine, node, "field-535",
                    tmp_path_factory.mktemp("fw-state")) as (agent, scheduler):
        yield node, agent, scheduler


@pytest.fixture(scope="module")
def node470(mesos_prefix, docker_engine, host_compat, tmp_path_factory):
    root = driver_root_host.build(tmp_path_factory.mktemp("field") / "host", V470, compat=None)
    layout = replace(fake_nvml.k80(), name="field-470", driver=V470,
                     cuda=driver_files.CUDA_470_VERSION)
    with GpuNode(layout, docker_engine.host, driver_root=root) as node, \
            cluster(docker_engine, node, "field-470",
                    tmp_path_factory.mktemp("fw-state")) as (agent, scheduler):
        yield node, agent, scheduler


@pytest.fixture(scope="module")
def probe_image(docker_engine):
    """The glibc probe image with a compat directory of `compat` (None: none)."""
    made = {}

    def make(compat, cuda_label=None):
        key = (compat, cuda_label)
        if key not in made:
            labels = dict(VOLUME_LABEL)
            if cuda_label:
                labels["com.nvidia.cuda.version"] = cuda_label
            tag = f"bed/cuda-probe:{compat or 'none'}-{cuda_label or 'any'}"
            made[key] = docker_engine.import_rootfs(tag, cuda_probe.image_tar(compat), labels,
                                                    env={"PATH": "/usr/bin:/bin"})
        return made[key]
    return make


def run_task(cluster_, task_id: str, container: str, image=None):
    node, agent, scheduler = cluster_
    no_mknod = "" if image else NO_MKNOD
    probe = cuda_probe.IMAGE_PATH if image else NO_MKNOD + str(cuda_probe.build())
    scheduler.submit(TaskSpec(id=task_id, container=container, image=image, gpus=1, cpus=0.1,
                              mem=64, labels=VOLUME_LABEL,
                              cmd=TASK.format(probe=probe, no_mknod=no_mknod)))
    record = wait_for(scheduler, task_id, {"TASK_FINISHED", "TASK_FAILED"}, timeout=120)
    output = sandbox_output(agent.run_dir, record.mesos_task_id)
    assert record.state == "TASK_FINISHED", (record, output)
    return output


def probe_of(output: str) -> dict:
    return json.loads(line_value(output, "PROBE"))


def check_driver_program(output: str) -> None:
    """nvidia-smi ran as the driver's ELF: it reached NVML and found no kernel
    driver; a wrapper in the volume would have run into itself."""
    assert NO_KERNEL_DRIVER in line_value(output, "SMI"), output
    assert line_value(output, "SMI_EXIT") not in ("126", "127")
    assert "leads back to this file" not in output


KINDS = [("DOCKER", True), ("MESOS", True), ("MESOS", False)]
KIND_IDS = ["docker", "mesos-image", "mesos-host"]


@pytest.mark.parametrize("container, with_image", KINDS, ids=KIND_IDS)
def test_an_older_compat_directory_never_comes_before_the_running_driver(
        node535, probe_image, host_compat, container, with_image):
    """535.261.03 runs; the image's (and the host's) compat libcuda is 535.216.03:
    the loader maps the volume's libcuda, nvidia-smi is the driver's."""
    image = probe_image(OLD) if with_image else None
    output = run_task(node535, f"old-compat-{container}-{with_image}".lower(), container, image)
    probe = probe_of(output)
    assert probe["libcuda"] == VOLUME_LIBCUDA.format(V), output
    assert probe["cuInit"] == 100                   # it ran: no device without a kernel driver
    ld = line_value(output, "ENV LD_LIBRARY_PATH").split(":")
    assert not any("compat" in d for d in ld) and ld[:2] == ["/usr/local/nvidia/lib",
                                                              "/usr/local/nvidia/lib64"]
    check_driver_program(output)


@pytest.mark.parametrize("container, with_image", KINDS, ids=KIND_IDS)
def test_a_newer_compat_directory_is_used_first(node470, probe_image, host_compat,
                                                container, with_image):
    """470.256.02 runs; the image's compat libcuda is 535.261.03 (the host's
    535.216.03): a newer driver branch, so the loader maps the compat one. The image
    says it needs CUDA 12.2, newer than 470's 11.4: it runs because of it."""
    image = probe_image(V, cuda_label="12.2") if with_image else None
    output = run_task(node470, f"new-compat-{container}-{with_image}".lower(), container, image)
    probe = probe_of(output)
    want = IMAGE_COMPAT_LIBCUDA.format(V) if with_image else host_compat
    assert probe["libcuda"] == want, output
    ld = line_value(output, "ENV LD_LIBRARY_PATH").split(":")
    assert ld[0] == "/usr/local/cuda/compat" and "/usr/local/nvidia/lib64" in ld
    check_driver_program(output)


def test_without_compat_libraries_the_running_driver_is_mapped(node470, probe_image):
    output = run_task(node470, "no-compat-docker", "DOCKER", probe_image(None))
    assert probe_of(output)["libcuda"] == VOLUME_LIBCUDA.format(V470)
    check_driver_program(output)


@pytest.mark.parametrize("container", ["DOCKER", "MESOS"])
def test_an_image_newer_than_the_driver_without_covering_compat_is_refused_by_name(
        node470, probe_image, container):
    node, agent, scheduler = node470
    image = probe_image(driver_files.DRIVER_470_VERSION, cuda_label="12.2")
    task_id = f"refused-{container}".lower()
    scheduler.submit(TaskSpec(id=task_id, container=container, image=image, gpus=1, cpus=0.1,
                              mem=64, cmd="true"))
    record = wait_for(scheduler, task_id, {"TASK_FINISHED", "TASK_FAILED"}, timeout=120)
    assert record.state == "TASK_FAILED"
    assert (f"image {image}: unsupported CUDA version: the image needs CUDA 12.2, newer than "
            f"driver {V470} (CUDA 11.4), and its forward-compatibility "
            f"libcuda.so.{V470} is not of a newer driver branch") in record.message
    assert node.allocated() == []


def test_the_volume_holds_the_drivers_programs_not_the_wrappers(node535):
    node, _, _ = node535
    volume = next((node.dir / "volumes").glob("nvidia_*"))
    for name in ("nvidia-smi", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"):
        assert (volume / "bin" / name).read_bytes()[:4] == b"\x7fELF", name
    assert V.encode() in (volume / "bin" / "nvidia-smi").read_bytes()
