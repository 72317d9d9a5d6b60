"""A DOCKER task: a container of the local Docker engine holding exactly the
GPUs the agent daemon granted.

- devices: the granted GPU nodes and the control devices, nothing else
  (isolator.docker_devices); never privileged;
- the driver volume at /usr/local/nvidia, read-only, only when the image rules
  say so (volumes.image_rules: NVIDIA_VISIBLE_DEVICES in the image env, else the
  label com.nvidia.volumes.needed), with PATH / LD_LIBRARY_PATH set as Mesos does;
- NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES from the grant;
- the label mesos-gpu.container-id, so the daemon can cross-check it on recovery.

The image must already be in the engine (nothing is pulled); an image that
needs a newer CUDA than the driver is refused before anything is created.
"""
import logging
import sys
import threading
from typing import Any, Mapping, Optional

import docker
import docker.errors

from framework.executor.launch_errors import TaskFailure
from framework.executor.task_process import command_of, driver_volume, task_environment
from framework.task_spec import TaskSpec
from isolator import docker_devices
from isolator.api import Grant
from volumes import environment, image_rules
from common.errors import UserError

log = logging.getLogger(__name__)

TASK_LABEL = "mesos-gpu.task-id"


def docker_client(docker_host: Optional[str], agent: str) -> docker.DockerClient:
    """A client of the local engine (DOCKER_HOST, else the default socket)."""
    try:
        client = docker.DockerClient(base_url=docker_host) if docker_host else docker.from_env()
        client.ping()
        return client
    except docker.errors.DockerException as e:
        raise TaskFailure(f"agent {agent} cannot run this container type: no Docker engine "
                          f"answers at {docker_host or 'the default socket'} ({e})") from None


def inspect(client: docker.DockerClient, image: str, agent: str) -> image_rules.ImageInfo:
    try:
        return image_rules.inspect_image(client, image)
    except UserError as e:
        raise TaskFailure(f"{e} (on agent {agent})") from None


def check_cuda(driver_cuda: Optional[str], image: image_rules.ImageInfo) -> None:
    try:
        image_rules.check_cuda(driver_cuda, image.cuda_version)
    except UserError as e:
        raise TaskFailure(f"image {image.ref}: {e}") from None


class DockerContainer:
    """One container: create, start, wait, kill, remove."""

    def __init__(self, spec: TaskSpec, container_id: str, client: docker.DockerClient,
                 image: image_rules.ImageInfo, grant: Optional[Grant],
                 extra_env: Mapping[str, str]) -> None:
        self.spec = spec
        self.container_id = container_id
        self.client = client
        self.image = image
        self.grant = grant
        self.extra_env = extra_env
        self.container: Optional[Any] = None
        self.volume_path = driver_volume(grant, image.needs_volume)

    def describe(self) -> str:
        volume = f", driver volume {self.volume_path}" if self.volume_path else ""
        return f"Docker container {self.container_id} from {self.spec.image}{volume}"

    def create(self) -> str:
        """Create (not start) the container; returns its Docker id."""
        kwargs: dict[str, Any] = dict(docker_devices.docker_options(self.grant))
        if self.volume_path:
            kwargs["volumes"] = {self.volume_path: {"bind": environment.MOUNT_POINT, "mode": "ro"}}
        if self.spec.mem > 0:
            kwargs["mem_limit"] = f"{max(6, int(self.spec.mem))}m"
        if self.spec.cpus > 0:
            kwargs["cpu_shares"] = max(2, int(self.spec.cpus * 1024))
        env = task_environment(self.spec, self.image.env, self.grant, bool(self.volume_path),
                               self.extra_env)
        labels = {**docker_devices.labels(self.container_id), TASK_LABEL: self.spec.id}
        try:
            self.container = self.client.containers.create(
                self.image.id or self.spec.image, command_of(self.spec), name=self.container_id,
                environment=env, labels=labels, network_mode="host", detach=True, **kwargs)
        except docker.errors.DockerException as e:
            raise TaskFailure(f"the Docker engine refused to create the container: "
                              f"{getattr(e, 'explanation', None) or e}") from None
        return self.container.id

    def start(self) -> None:
        try:
            self.container.start()
        except docker.errors.DockerException as e:
            raise TaskFailure(f"the Docker engine refused to start the container: "
                              f"{getattr(e, 'explanation', None) or e}") from None
        threading.Thread(target=self._copy_output, name=f"logs-{self.container_id}",
                         daemon=True).start()

    def _copy_output(self) -> None:
        """The container's output into the executor's (the sandbox's stdout)."""
        try:
            for chunk in self.container.logs(stream=True, follow=True):
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
        except docker.errors.DockerException:
            pass

    def wait(self) -> int:
        try:
            return int(self.container.wait()["StatusCode"])
        except docker.errors.DockerException as e:
            log.error("lost track of container %s: %s", self.container_id, e)
            return 255

    def kill(self, grace: float) -> None:
        if self.container is None:
            return
        try:
            self.container.stop(timeout=max(0, int(grace)))
        except docker.errors.NotFound:
            pass
        except docker.errors.DockerException as e:
            log.warning("stopping container %s: %s", self.container_id, e)

    def remove(self) -> None:
        if self.container is None:
            return
        try:
            self.container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.DockerException as e:
            log.warning("removing container %s: %s", self.container_id, e)
        self.container = None

    def discard_files(self) -> None:
        """Nothing on disk outside Docker."""
