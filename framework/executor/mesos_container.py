"""A MESOS (unified containerizer) task: a child process in its own cgroup.

The agent daemon makes the cgroup and applies the device rules (`isolate` with
the child's pid). The child must not run the task's command before that, so
each kind of child waits until the executor says it has been placed:

- MesosHostContainer (no image): `unshare --mount` + a small shell that blocks on a pipe,
  then, in its private mount namespace, bind-mounts the driver volume
  read-only at /usr/local/nvidia (when the rules say so) and the app's volumes,
  and execs the command on the host's filesystem, in the sandbox, as the
  app's user when it names one;
- MesosImageContainer (a Docker image): the image's root filesystem is exported from the
  local Docker engine into an OCI bundle and run by `runc` (Debian's docker.io
  ships it). `runc create` leaves the container's init blocked until
  `runc start`; the init's pid is isolated in between. The bundle lists the
  granted device nodes; devices the task makes itself stay denied by the
  cgroup. The executor is the init's subreaper, so it gets the exit status.
  The sandbox is mounted at /mnt/mesos/sandbox (the working directory), the
  app's volumes where it says, and the process runs as the app's user (looked
  up in the image's /etc/passwd).

Either way the task's stdout and stderr are the sandbox's `stdout` and `stderr`.
"""
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional


from framework.executor import sandbox as sandbox_files
from framework.executor.launch_errors import TaskFailure
from framework.executor.task_process import command_of, driver_volume, host_compat, task_environment
from framework.tasks.task_spec import TaskSpec
from isolator.api import Grant
from volumes import cuda_compat, environment
from volumes.image_rules import ImageInfo, needs_volume

if TYPE_CHECKING:       # imported where an image is used: a host task's executor never loads it
    import docker

log = logging.getLogger(__name__)

# Runs as the child: wait for the go-ahead on stdin (a pipe), mount the
# driver volume ($1) and the app's volumes ($2: "source target ro|rw" lines),
# exec the command ($3: the setpriv prefix for another user, else empty) with
# stdin from /dev/null.
_HOST_LAUNCHER = r"""
read -r go || exit 125
exec </dev/null
if [ -n "$1" ]; then
  mount --bind -o ro,nosuid,nodev "$1" /usr/local/nvidia || exit 126
fi
printf '%s\n' "$2" | while read -r source target mode; do
  [ -n "$source" ] || continue
  mount --bind "$source" "$target" || exit 126
  if [ "$mode" = ro ]; then mount -o remount,bind,ro "$target" || exit 126; fi
done || exit 126
shift 2
exec "$@"
"""
EXIT_NOT_PLACED = 125
DOCKER_CAPABILITIES = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
                       "CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
                       "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"]
MASKED_PATHS = ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
                "/proc/scsi"]
READONLY_PATHS = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphaned descendants (a runc container's init) become our children."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_CHILD_SUBREAPER): errno %d", ctypes.get_errno())


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class MesosHostContainer:
    """The command on the host's filesystem, in a private mount namespace."""

    def __init__(self, spec: TaskSpec, container_id: str, grant: Optional[Grant],
                 extra_env: Mapping[str, str], sandbox: str) -> None:
        self.spec = spec
        self.container_id = container_id
        self.grant = grant
        self.sandbox = sandbox
        self.volume_path = driver_volume(grant, needs_volume(spec.labels, spec.env))
        base = {"PATH": environment.DEFAULT_PATH, "HOME": "/root"}
        self.env = task_environment(spec, base, grant, bool(self.volume_path),
                                    {**extra_env, "MESOS_SANDBOX": sandbox},
                                    host_compat(grant, bool(self.volume_path)))
        self.process: Optional[subprocess.Popen] = None
        self._go: Optional[int] = None

    def describe(self) -> str:
        if not self.grant:
            return "host process (no agent daemon on this agent: not isolated)"
        volume = f", driver volume {self.volume_path}" if self.volume_path else ""
        return f"host process (cgroup {self.container_id}{volume})"

    def create(self) -> int:
        """Start the child, blocked before the command; returns its pid."""
        argv = command_of(self.spec)
        if not argv:
            raise TaskFailure(f"task {self.spec.id}: nothing to run (no cmd, no args)")
        if self.volume_path:
            os.makedirs(environment.MOUNT_POINT, exist_ok=True)  # the mount point, empty
        mounts = self._volume_lines()
        prefix = self._as_user()
        stdout, stderr = sandbox_files.open_output(self.sandbox)
        read_end, self._go = os.pipe()
        try:
            self.process = subprocess.Popen(
                ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                 _HOST_LAUNCHER, "mesos-gpu-launch", self.volume_path or "", mounts,
                 *prefix, *argv],
                env=self.env, cwd=self.sandbox, stdin=read_end, stdout=stdout, stderr=stderr,
                start_new_session=True)
        except OSError as e:
            os.close(self._go)
            self._go = None
            raise TaskFailure(f"cannot start the task's process: {e}") from None
        finally:
            os.close(read_end)
            stdout.close()
            stderr.close()
        return self.process.pid

    def _volume_lines(self) -> str:
        """The app's volumes for the launcher: a relative container path is in
        the sandbox (made when missing), an absolute one must exist on the host."""
        lines = []
        for volume in self.spec.volumes:
            source = _volume_source(volume, self.sandbox)
            target = volume.target(self.sandbox)
            if not volume.container_path.startswith("/"):
                target = sandbox_files.directory_in(self.sandbox, volume.container_path,
                                                    "volume containerPath")
            elif not os.path.exists(target):
                raise TaskFailure(f"volume {volume.container_path}: a task without an image "
                                  f"runs on the host's filesystem, where {target} does not "
                                  f"exist")
            if any(c.isspace() for c in source + target):
                raise TaskFailure(f"volume {volume.host_path} -> {volume.container_path}: "
                                  f"paths with white space are not supported")
            lines.append(f"{source} {target} {'ro' if volume.read_only else 'rw'}")
        return "\n".join(lines)

    def _as_user(self) -> list:
        """`setpriv` to run the command as the app's user (a user of this host)."""
        if not self.spec.user:
            return []
        try:
            uid, gid = sandbox_files.host_ids(self.spec.user)
        except LookupError as e:
            raise TaskFailure(f"user: {e}") from None
        sandbox_files.give_to(self.sandbox, uid, gid)
        groups = ["--init-groups"] if not self.spec.user.split(":")[0].isdigit() \
            else ["--clear-groups"]
        return ["setpriv", f"--reuid={uid}", f"--regid={gid}", *groups, "--"]

    def pid(self) -> Optional[int]:
        return self.process.pid if self.process is not None else None

    def environment(self) -> Mapping[str, str]:
        return self.env

    def start(self) -> None:
        os.write(self._go, b"go\n")
        os.close(self._go)
        self._go = None

    def wait(self) -> int:
        code = self.process.wait()
        if code == EXIT_NOT_PLACED:
            log.error("the task's process ended before it was placed in its cgroup")
        return code if code >= 0 else 128 - code

    def kill(self, grace: float) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        _kill_group(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _kill_group(self.process.pid, signal.SIGKILL)

    def remove(self) -> None:
        if self._go is not None:  # never started: closing the pipe makes it exit
            os.close(self._go)
            self._go = None
        if self.process is not None and self.process.poll() is None:
            _kill_group(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def discard_files(self) -> None:
        """Nothing on disk."""


class MesosImageContainer:
    """The image's root filesystem run by runc, with only the granted devices."""

    def __init__(self, spec: TaskSpec, container_id: str, client: "docker.DockerClient",
                 image: ImageInfo, grant: Optional[Grant], extra_env: Mapping[str, str],
                 workdir: str, runc: str = "runc",
                 compat: Optional[cuda_compat.Decision] = None) -> None:
        self.spec = spec
        self.container_id = container_id
        self.compat = compat        # the image's CUDA compat decision (executor/image_compat)
        self.client = client
        self.image = image
        self.grant = grant
        self.extra_env = extra_env
        self.runc = shutil.which(runc) or runc
        self.workdir = workdir  # the sandbox: Mesos reclaims it even if we die
        self.volume_path = driver_volume(grant, image.needs_volume)
        self.bundle: Optional[Path] = None
        self.init_pid: Optional[int] = None
        self.env: dict = {}

    def describe(self) -> str:
        volume = f", driver volume {self.volume_path}" if self.volume_path else ""
        return f"runc container {self.container_id} from {self.spec.image}{volume}"

    def _runc(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess:
        return subprocess.run([self.runc, "--root", str(self.bundle / "state"),
                               "--log", str(self.bundle / "runc.log"), "--log-format", "json",
                               *args], stdin=subprocess.DEVNULL, **kwargs)

    def _runc_error(self) -> str:
        """The last error runc logged."""
        try:
            lines = (self.bundle / "runc.log").read_text().strip().splitlines()
        except OSError:
            return "no log"
        for line in reversed(lines):
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("level") in ("error", "fatal"):
                return entry.get("msg", line)
        return lines[-1] if lines else "no log"

    def create(self) -> int:
        if not shutil.which(self.runc):
            raise TaskFailure("this agent cannot run MESOS containers with an image: "
                              "runc is not installed")
        # In the sandbox (Mesos reclaims it even if we die), in a directory the
        # task does not see (a tmpfs covers it in the container).
        self.bundle = Path(tempfile.mkdtemp(prefix="runc-bundle-",
                                            dir=sandbox_files.private_dir(self.workdir)))
        config = self._image_config()
        self._export_rootfs()
        (self.bundle / "config.json").write_text(json.dumps(self._oci_config(config), indent=1))
        pid_file = self.bundle / "init.pid"
        # The container's init inherits runc's stdio: the sandbox's stdout and
        # stderr files, never a pipe we would wait on. Errors go to runc's log.
        stdout, stderr = sandbox_files.open_output(self.workdir)
        try:
            result = self._runc("create", "--bundle", str(self.bundle), "--pid-file",
                                str(pid_file), self.container_id, stdout=stdout, stderr=stderr)
        finally:
            stdout.close()
            stderr.close()
        if result.returncode != 0:
            raise TaskFailure(f"runc could not create the container: {self._runc_error()}")
        self.init_pid = int(pid_file.read_text())
        return self.init_pid

    def pid(self) -> Optional[int]:
        return self.init_pid

    def environment(self) -> Mapping[str, str]:
        return self.env

    def _image_config(self) -> dict:
        import docker.errors
        try:
            return self.client.api.inspect_image(self.image.id or self.spec.image)["Config"] or {}
        except docker.errors.DockerException as e:
            raise TaskFailure(f"image {self.spec.image}: cannot read its configuration: {e}") \
                from None

    def _export_rootfs(self) -> None:
        """`docker create` + `docker export`, unpacked with tar (ownership kept)."""
        import docker.errors
        rootfs = self.bundle / "rootfs"
        rootfs.mkdir()
        try:
            holder = self.client.containers.create(self.image.id or self.spec.image,
                                                   ["/bin/true"], labels={
                                                       "mesos-gpu.export-for": self.container_id})
        except docker.errors.DockerException as e:
            raise TaskFailure(f"image {self.spec.image}: cannot export its filesystem: {e}") \
                from None
        try:
            tar = subprocess.Popen(["tar", "-x", "--numeric-owner", "-C", str(rootfs)],
                                   stdin=subprocess.PIPE, stderr=subprocess.PIPE)
            for chunk in holder.export():
                tar.stdin.write(chunk)
            tar.stdin.close()
            if tar.wait() != 0:
                raise TaskFailure(f"image {self.spec.image}: unpacking its filesystem failed: "
                                  f"{tar.stderr.read().decode(errors='replace').strip()}")
        finally:
            holder.remove(force=True)

    def _process_args(self, config: Mapping[str, Any]) -> list[str]:
        entrypoint = list(config.get("Entrypoint") or [])
        if self.spec.cmd is not None:
            return ["/bin/sh", "-c", self.spec.cmd]
        args = entrypoint + (list(self.spec.args) or list(config.get("Cmd") or []))
        if not args:
            raise TaskFailure(f"image {self.spec.image} has no command and the task gives none")
        return args

    def _user(self) -> dict:
        """The OCI process user: the app's, looked up in the image."""
        if not self.spec.user:
            return {"uid": 0, "gid": 0}
        ids = sandbox_files.image_ids(str(self.bundle / "rootfs"), self.spec.user)
        if ids is None:
            raise TaskFailure(f"user: {self.spec.user!r} is not a user of image "
                              f"{self.spec.image} (its /etc/passwd)")
        sandbox_files.give_to(self.workdir, *ids)
        return {"uid": ids[0], "gid": ids[1]}

    def _sandbox_mounts(self) -> list:
        """The sandbox at /mnt/mesos/sandbox (without the executor's files), then
        the app's volumes."""
        target = sandbox_files.MOUNT_POINT
        mounts = [
            {"destination": target, "type": "bind", "source": self.workdir,
             "options": ["bind", "rw", "nosuid", "nodev"]},
            {"destination": f"{target}/{sandbox_files.PRIVATE_DIR}", "type": "tmpfs",
             "source": "tmpfs", "options": ["ro", "nosuid", "nodev", "noexec", "size=4k"]}]
        for volume in self.spec.volumes:
            source = _volume_source(volume, self.workdir)
            mounts.append({"destination": volume.target(target), "type": "bind",
                           "source": source, "options": ["rbind", "ro" if volume.read_only
                                                         else "rw", "nosuid", "nodev"]})
        return mounts

    def _oci_config(self, config: Mapping[str, Any]) -> dict:
        image_env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
        base = {"PATH": environment.DEFAULT_PATH, "HOME": "/root", **image_env}
        env = task_environment(self.spec, base, self.grant, bool(self.volume_path),
                               {**self.extra_env, "MESOS_SANDBOX": sandbox_files.MOUNT_POINT},
                               self.compat)
        self.env = env
        mounts = [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
        ]
        if self.volume_path:
            mounts.append({"destination": environment.MOUNT_POINT, "type": "bind",
                           "source": self.volume_path, "options": ["rbind", "ro", "nosuid", "nodev"]})
        mounts += self._sandbox_mounts()
        mps = self._mps_pipe_dir()
        namespaces = ["pid", "ipc", "uts", "mount"]
        if mps:
            # an MPS client reaches its GPU's server through the control daemon's sockets
            # in the pipe directory and memory shared in the host's IPC namespace (what
            # Docker's `--ipc host` gives a DOCKER task): that directory and no other of
            # the work dir, the host's IPC and its /dev/shm
            namespaces.remove("ipc")
            mounts = [m for m in mounts if m["destination"] != "/dev/shm"]
            mounts += [{"destination": "/dev/shm", "type": "bind", "source": "/dev/shm",
                        "options": ["rbind", "nosuid", "noexec", "nodev"]},
                       {"destination": mps, "type": "bind", "source": mps,
                        "options": ["rbind", "nosuid", "nodev", "noexec"]}]
        granted = self.grant.devices if self.grant else ()
        devices = [{"path": f"/dev/{d.name}", "type": "c", "major": d.major, "minor": d.minor,
                    "fileMode": 0o666, "uid": 0, "gid": 0} for d in granted]
        rules = [{"allow": False, "access": "rwm"}] + [
            {"allow": True, "type": "c", "major": d.major, "minor": d.minor, "access": "rwm"}
            for d in granted]
        resources: dict[str, Any] = {"devices": rules}
        if self.spec.mem > 0:
            resources["memory"] = {"limit": int(self.spec.mem * 1024 * 1024)}
        if self.spec.cpus > 0:
            resources["cpu"] = {"shares": max(2, int(self.spec.cpus * 1024))}
        return {
            "ociVersion": "1.0.2",
            "process": {"terminal": False, "user": self._user(),
                        "args": self._process_args(config),
                        "env": [f"{k}={v}" for k, v in env.items()],
                        "cwd": sandbox_files.MOUNT_POINT,
                        "capabilities": {name: DOCKER_CAPABILITIES for name in
                                         ("bounding", "effective", "permitted")},
                        "noNewPrivileges": True},
            "root": {"path": "rootfs", "readonly": False},
            "hostname": self.container_id[:63],
            "mounts": mounts,
            "linux": {"namespaces": [{"type": t} for t in namespaces],
                      "devices": devices, "resources": resources,
                      "cgroupsPath": f"/{self.container_id}",
                      "maskedPaths": MASKED_PATHS, "readonlyPaths": READONLY_PATHS},
        }

    def _mps_pipe_dir(self) -> str:
        """The MPS pipe directory of the GPU this task has a share of; '' if none."""
        share = self.grant.share if self.grant else None
        return share.pipe_dir if share is not None and share.sharing == "mps" else ""

    def start(self) -> None:
        result = self._runc("start", self.container_id)
        if result.returncode != 0:
            raise TaskFailure(f"runc could not start the container: {self._runc_error()}")

    def wait(self) -> int:
        try:
            _, status = os.waitpid(self.init_pid, 0)
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code
        except ChildProcessError:  # not our child after all (no subreaper): poll runc
            while self._state() not in ("stopped", None):
                time.sleep(0.2)
            return 255

    def _state(self) -> Optional[str]:
        result = self._runc("state", self.container_id, capture_output=True, text=True)
        if result.returncode != 0:
            return None
        return json.loads(result.stdout).get("status")

    def kill(self, grace: float) -> None:
        """TERM, then KILL to the container's init (the whole pid namespace goes
        with it). Not `runc kill --all`: runc finds "all" through its devices
        cgroup, which the agent daemon has moved the init out of."""
        if self.bundle is None or self._state() in ("stopped", None):
            return
        log.info("stopping runc container %s (TERM, KILL after %.1fs)", self.container_id, grace)
        self._runc("kill", self.container_id, "TERM", capture_output=True)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self._state() not in ("stopped", None):
            time.sleep(0.1)
        try:
            os.kill(self.init_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def remove(self) -> None:
        """The container and its cgroups (fast; the files go in discard_files)."""
        if self.bundle is not None:
            self._runc("delete", "--force", self.container_id, capture_output=True)

    def discard_files(self) -> None:
        if self.bundle is not None:
            shutil.rmtree(self.bundle, ignore_errors=True)
            self.bundle = None


def _volume_source(volume, sandbox: str) -> str:
    """What to bind-mount: a relative host path is a directory of the sandbox;
    an absolute one must exist on this agent (as Mesos wants it)."""
    if not volume.host_path.startswith("/"):
        return sandbox_files.directory_in(sandbox, volume.host_path, "volume hostPath")
    if not os.path.exists(volume.host_path):
        raise TaskFailure(f"volume {volume.host_path}: it does not exist on this agent")
    return volume.host_path
