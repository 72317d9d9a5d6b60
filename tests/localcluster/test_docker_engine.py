"""The real Docker engine (Debian docker.io) started by the tests, and images made
from a busybox-static rootfs by `docker import`, read back through the docker SDK."""

import docker
import pytest

from localcluster import processes
from localcluster.docker_engine import DockerEngine

NV_LABELS = {"com.nvidia.volumes.needed": "nvidia_driver",
             "com.nvidia.cuda.version": "12.2", "com.example.note": 'two "quoted" words'}


def test_imported_image_labels_are_read_back_through_the_sdk(docker_engine, busybox_image):
    ref = busybox_image(labels=NV_LABELS, env={"CUDA_VERSION": "12.2"})
    client = docker_engine.client()
    image = client.images.get(ref)
    assert image.labels == NV_LABELS
    assert client.api.inspect_image(ref)["Config"]["Labels"] == NV_LABELS
    assert "CUDA_VERSION=12.2" in image.attrs["Config"]["Env"]


def test_container_runs_from_the_imported_image(docker_engine, busybox_image):
    ref = busybox_image(labels={"com.nvidia.volumes.needed": "nvidia_driver"},
                        env={"CUDA_VERSION": "12.2"}, cmd="echo default command")
    client = docker_engine.client()
    out = client.containers.run(ref, ["sh", "-c", "echo $CUDA_VERSION; id -u; cd / && ls -d "
                                      "dev proc sys tmp etc usr/local/nvidia"],
                                remove=True, network_mode="none").decode().split()
    assert out[:2] == ["12.2", "0"]
    assert sorted(out[2:]) == ["dev", "etc", "proc", "sys", "tmp", "usr/local/nvidia"]
    assert client.containers.run(ref, remove=True, network_mode="none") == b"default command\n"


def test_same_labels_are_imported_once(docker_engine, busybox_image):
    a = busybox_image(labels={"k": "v"}, tag="bed/once:a")
    b = busybox_image(labels={"k": "v"}, tag="bed/once:b")
    c = busybox_image(labels={"k": "other"}, tag="bed/once:c")
    images = docker_engine.client().images
    assert images.get(a).id == images.get(b).id
    assert images.get(c).id != images.get(a).id
    assert images.get(c).labels == {"k": "other"}


def test_engine_is_private(docker_engine):
    info = docker_engine.client().info()
    assert info["Driver"] == "vfs"
    assert info["DockerRootDir"].startswith(str(docker_engine.run_dir))
    assert docker_engine.socket.startswith(str(docker_engine.run_dir))
    assert docker_engine.host == f"unix://{docker_engine.socket}"
    # A client made from the host string alone reaches the same engine.
    other = docker.DockerClient(base_url=docker_engine.host)
    try:
        assert other.info()["ID"] == info["ID"]
    finally:
        other.close()


def test_stop_removes_containers_dockerd_and_containerd():
    engine = DockerEngine().start()
    try:
        ref = engine.make_image("bed/stop:test")
        engine.client().containers.run(ref, ["sleep", "600"], detach=True, network_mode="none")
        run_dir, pid = engine.run_dir, engine.proc.pid

        def names() -> set:
            found = set()
            for p in processes.belonging(run_dir):
                try:
                    found.add(open(f"/proc/{p}/comm").read().strip())
                except OSError:             # ended between the listing and the read
                    pass
            return found
        # `run` returns once runc started the init; it becomes `sleep` a moment later
        processes.wait_until(lambda: {"dockerd", "containerd", "sleep"} <= names(), 10,
                             "the container's sleep under the engine's run dir")
        assert processes.mounts_under(run_dir), "dockerd mounted nothing under its run dir"
    finally:
        engine.stop()
    assert not processes.alive(pid)
    assert processes.belonging(run_dir) == []
    assert processes.mounts_under(run_dir) == []
    assert not run_dir.exists()


def test_client_of_a_stopped_engine_is_an_error():
    engine = DockerEngine()
    with pytest.raises(Exception, match="not started"):
        engine.client()
