"""A DOCKER task: a container of the local Docker engine holding exactly the
GPUs the agent daemon granted.

- devices: the granted GPU nodes and the control devices, nothing else
  (isolator.cgroups.docker_devices); privileged only when the app asks and the
  operator allowed it (the API refuses it otherwise);
- the driver volume at /usr/local/nvidia, read-only, only when the image rules
  say so (volumes.image_rules: NVIDIA_VISIBLE_DEVICES in the image env, else the
  label com.nvidia.volumes.needed), with PATH / LD_LIBRARY_PATH set as Mesos does
  except for CUDA compat directories (volumes.environment, volumes.cuda_compat);
- NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES from the grant;
- the sandbox at /mnt/mesos/sandbox (MESOS_SANDBOX, the working directory), the
  app's volumes, its user, host networking or BRIDGE with its host ports
  published, and the app's Docker parameters, each as `--key=value`: the
  container is made with `docker create`, as Mesos's Docker containerizer runs
  `docker run`, so every parameter the operator allowed takes effect;
- the label mesos-gpu.container-id, so the daemon can cross-check it on recovery;
- its stdout and stderr copied into the sandbox's `stdout` and `stderr`.

The image is brought into the engine before (framework.executor.image_pull);
an image that needs a newer CUDA than the driver is refused before anything
is created.
"""
import logging
import os
import shutil
import subprocess
import threading
from typing import IO, Any, List, Mapping, Optional

import docker
import docker.errors

from framework.executor import sandbox as sandbox_files
from framework.executor.launch_errors import TaskFailure
from framework.executor.task_process import command_of, driver_volume, task_environment
from framework.tasks.task_spec import BRIDGE, TaskSpec
from isolator.cgroups import docker_devices
from isolator.api import Grant
from volumes import cuda_compat, environment, image_rules
from common.errors import UserError

log = logging.getLogger(__name__)

TASK_LABEL = "mesos-gpu.task-id"
DOCKER_CLI = "docker"
CREATE_TIMEOUT = 120.0


def docker_client(docker_host: Optional[str], agent: str) -> docker.DockerClient:
    """A client of the local engine (DOCKER_HOST, else the default socket). Making it
    asks the engine its API version: that answer is the proof that an engine is there
    (no ping besides it: every call counts when many tasks start at once)."""
    try:
        return docker.DockerClient(base_url=docker_host) if docker_host else docker.from_env()
    except docker.errors.DockerException as e:
        raise TaskFailure(f"agent {agent} cannot run this container type: no Docker engine "
                          f"answers at {docker_host or 'the default socket'} ({e})") from None


def inspect(client: docker.DockerClient, image: str, agent: str) -> image_rules.ImageInfo:
    try:
        return image_rules.inspect_image(client, image)
    except UserError as e:
        raise TaskFailure(f"{e} (on agent {agent})") from None


def check_cuda(driver_cuda: Optional[str], image: image_rules.ImageInfo,
               compat: Optional[cuda_compat.Decision] = None,
               driver_version: Optional[str] = None) -> None:
    try:
        image_rules.check_cuda(driver_cuda, image.cuda_version, compat, driver_version)
    except UserError as e:
        raise TaskFailure(f"image {image.ref}: {e}") from None


class DockerContainer:
    """One container: create, start, wait, kill, remove."""

    def __init__(self, spec: TaskSpec, container_id: str, client: docker.DockerClient,
                 image: image_rules.ImageInfo, grant: Optional[Grant],
                 extra_env: Mapping[str, str], sandbox: str = "",
                 docker_host: Optional[str] = None,
                 compat: Optional[cuda_compat.Decision] = None) -> None:
        self.spec = spec
        self.container_id = container_id
        self.client = client
        self.image = image
        self.grant = grant
        self.extra_env = {**extra_env, "MESOS_SANDBOX": sandbox_files.MOUNT_POINT}
        self.sandbox = sandbox
        self.docker_host = docker_host
        self.container: Optional[Any] = None
        self.volume_path = driver_volume(grant, image.needs_volume)
        self.env = task_environment(self.spec, self.image.env, self.grant,
                                    bool(self.volume_path), self.extra_env, compat)

    def describe(self) -> str:
        volume = f", driver volume {self.volume_path}" if self.volume_path else ""
        network = f", {self.spec.network.lower()} network"
        return f"Docker container {self.container_id} from {self.spec.image}{network}{volume}"

    def create_argv(self) -> List[str]:
        """`docker create` options, image and command for this task."""
        spec = self.spec
        argv = ["--name", self.container_id]
        labels = {**docker_devices.labels(self.container_id), TASK_LABEL: spec.id,
                  "MESOS_TASK_ID": self.extra_env.get("MESOS_TASK_ID", spec.id)}
        for key, value in labels.items():
            argv += ["--label", f"{key}={value}"]
        argv += ["--network", "bridge" if spec.network == BRIDGE else "host"]
        if spec.network == BRIDGE:
            for request, host in zip(spec.ports, spec.host_ports):
                if host is None:
                    continue
                for protocol in request.protocol.split(","):
                    argv += ["--publish",
                             f"{host}:{request.container_port or host}/{protocol.strip()}"]
        for device in docker_devices.docker_options(self.grant)["devices"]:
            argv += ["--device", device]
        if self.volume_path:
            argv += ["--volume", f"{self.volume_path}:{environment.MOUNT_POINT}:ro"]
        share = self.grant.share if self.grant else None
        if share is not None and share.pipe_dir:
            # MPS: the GPU's pipe directory at the same path (the grant's
            # CUDA_MPS_PIPE_DIRECTORY names it) and the host's IPC namespace, where the
            # MPS server's shared memory is (as NVIDIA's device plugin runs MPS clients)
            argv += ["--volume", f"{share.pipe_dir}:{share.pipe_dir}", "--ipc", "host"]
        if self.sandbox:
            argv += ["--volume", f"{self.sandbox}:{sandbox_files.MOUNT_POINT}",
                     "--workdir", sandbox_files.MOUNT_POINT]
        for volume in spec.volumes:
            source = volume.host_path if volume.host_path.startswith("/") else \
                sandbox_files.directory_in(self.sandbox, volume.host_path, "volume hostPath")
            target = volume.target(sandbox_files.MOUNT_POINT)
            argv += ["--volume", f"{source}:{target}:{'ro' if volume.read_only else 'rw'}"]
        if spec.mem > 0:
            argv += ["--memory", f"{max(6, int(spec.mem))}m"]
        if spec.cpus > 0:
            argv += ["--cpu-shares", str(max(2, int(spec.cpus * 1024)))]
        if spec.privileged:
            argv.append("--privileged")
        if spec.user:
            argv += ["--user", spec.user]
        for name, value in self.env.items():
            argv += ["--env", f"{name}={value}"]
        for key, value in spec.docker_parameters:
            argv.append(f"--{key.strip().lstrip('-')}={value}")
        argv.append(self.image.id or spec.image)
        argv += command_of(spec) or []
        return argv

    def create(self) -> str:
        """Create (not start) the container; returns its Docker id."""
        cli = shutil.which(DOCKER_CLI)
        if cli is None:
            raise TaskFailure("this agent cannot run DOCKER containers: the docker command "
                              "(Debian package docker.io) is not installed")
        env = dict(os.environ)
        if self.docker_host:
            env["DOCKER_HOST"] = self.docker_host
        argv = self.create_argv()            # makes the relative volumes' directories
        if self.spec.user and self.sandbox:
            self._give_sandbox(self.spec.user)   # them too: the user writes there
        try:
            result = subprocess.run([cli, "create", *argv], env=env,
                                    stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                    timeout=CREATE_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise TaskFailure(f"docker create did not answer within {CREATE_TIMEOUT:g}s",
                              retry=True) from None
        if result.returncode != 0:
            self._forget_half_made()
            message = result.stderr.strip().splitlines()
            raise TaskFailure(f"the Docker engine refused to create the container: "
                              f"{message[-1] if message else 'exit ' + str(result.returncode)}")
        docker_id = result.stdout.strip().splitlines()[-1]
        # The SDK's handle on it from its id alone: no inspect (start, wait, logs, stop
        # and remove need only the id; pid() reloads what it reads).
        self.container = self.client.containers.prepare_model({"Id": docker_id})
        return docker_id

    def _give_sandbox(self, user: str) -> None:
        """The sandbox owned by the task's user, as Mesos does it: the user as
        this host knows it (the image resolves the name for the process)."""
        try:
            sandbox_files.give_to(self.sandbox, *sandbox_files.host_ids(user))
        except LookupError as e:
            log.warning("sandbox of %s left to root: %s", self.container_id, e)

    def _forget_half_made(self) -> None:
        """A create that failed part-way may leave the named container behind."""
        try:
            self.client.containers.get(self.container_id).remove(force=True)
        except docker.errors.DockerException:
            pass

    def start(self) -> None:
        try:
            self.container.start()
        except docker.errors.DockerException as e:
            raise TaskFailure(f"the Docker engine refused to start the container: "
                              f"{getattr(e, 'explanation', None) or e}") from None
        if self.sandbox:
            stdout, stderr = sandbox_files.open_output(self.sandbox)
            for name, sink in (("stdout", stdout), ("stderr", stderr)):
                threading.Thread(target=self._copy_output, args=(name, sink),
                                 name=f"{name}-{self.container_id}", daemon=True).start()

    def _copy_output(self, name: str, sink: IO[bytes]) -> None:
        """One of the container's streams into its sandbox file."""
        try:
            for chunk in self.container.logs(stream=True, follow=True, stdout=name == "stdout",
                                             stderr=name == "stderr"):
                sink.write(chunk)
        except (docker.errors.DockerException, OSError):
            pass
        finally:
            sink.close()

    def pid(self) -> Optional[int]:
        """The container's first process on the host (its namespaces' holder)."""
        try:
            self.container.reload()
            return int(self.container.attrs["State"]["Pid"]) or None
        except (docker.errors.DockerException, KeyError, TypeError, ValueError):
            return None

    def environment(self) -> Mapping[str, str]:
        """The task's environment, as its processes see it (image's, then ours)."""
        return self.env

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
