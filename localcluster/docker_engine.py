"""A private, real Docker engine for tests, and test images made without a registry.

    engine = DockerEngine().start()
    ref = engine.make_image("bed/busybox:nv", labels={"com.nvidia.volumes.needed": "nvidia_driver"})
    engine.client().containers.run(ref, ["true"], remove=True)
    engine.stop()

`dockerd` (Debian docker.io) runs with its own data root, exec root, pidfile and
unix socket in a temp run dir, vfs storage, no iptables, and a bridge of its own
(`mgpu<8 hex>`, a free 10.x.y.0/24 made for it and deleted at stop) for BRIDGE
networking: host ports reach containers through docker-proxy. It touches
nothing of the host's (or another test run's) Docker. Its managed
containerd lives in the exec root. Legacy volume plugins are still looked up in
the host-global /run/docker/plugins, which this module leaves alone.

Images are a busybox-static root filesystem (applets as symlinks, plus the
directories a GPU container needs) given to `docker import` with LABEL / ENV /
CMD changes; each (labels, env, cmd) is imported once per engine and tagged as
often as asked.
"""
import io
import json
import logging
import os
import random
import shutil
import subprocess
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import docker

from localcluster import processes
from localcluster.paths import LocalClusterError

log = logging.getLogger("mesos-gpu.localcluster.docker")

DOCKERD = "dockerd"
BUSYBOX = "/bin/busybox"                       # Debian busybox-static
START_TIMEOUT = 60.0
STOP_GRACE = 20.0
ROOTFS_DIRS = ["bin", "dev", "proc", "sys", "tmp", "etc", "root", "usr/bin",
               "usr/local/nvidia", "var"]

_rootfs_tar: Optional[bytes] = None


def busybox_rootfs() -> bytes:
    """A tar of the minimal root filesystem (built once per process, ~2 MB)."""
    global _rootfs_tar
    if _rootfs_tar is not None:
        return _rootfs_tar
    busybox = shutil.which("busybox", path="/bin:/usr/bin") or BUSYBOX
    if not os.path.exists(busybox):
        raise LocalClusterError(f"{BUSYBOX} not found: install the Debian package busybox-static")
    applets = subprocess.run([busybox, "--list"], capture_output=True, text=True,
                             check=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add(name: str, kind: bytes, mode: int, data: bytes = b"", link: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.linkname, info.size = kind, mode, link, len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data) if data else None)
        for d in ROOTFS_DIRS:
            add(d, tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755)
        add("bin/busybox", tarfile.REGTYPE, 0o755, Path(busybox).read_bytes())
        for applet in applets:
            if applet != "busybox":
                add(f"bin/{applet}", tarfile.SYMTYPE, 0o777, link="busybox")
        add("etc/passwd", tarfile.REGTYPE, 0o644, b"root:x:0:0:root:/root:/bin/sh\n"
            b"nobody:x:65534:65534:nobody:/:/bin/false\n")
        add("etc/group", tarfile.REGTYPE, 0o644, b"root:x:0:\nnogroup:x:65534:\n")
    _rootfs_tar = buf.getvalue()
    return _rootfs_tar


def _quote(text: str) -> str:
    """A Dockerfile string literal: JSON's double-quoted form is accepted."""
    return json.dumps(str(text))


def image_changes(labels: Optional[Dict[str, str]] = None, env: Optional[Dict[str, str]] = None,
                  cmd: Union[None, str, Sequence[str]] = None) -> List[str]:
    """Dockerfile instructions for `docker import --change`."""
    changes = [f"LABEL {_quote(k)}={_quote(v)}" for k, v in sorted((labels or {}).items())]
    changes += [f"ENV {k}={_quote(v)}" for k, v in sorted((env or {}).items())]
    if cmd is not None:
        changes.append("CMD " + json.dumps(["/bin/sh", "-c", cmd] if isinstance(cmd, str)
                                           else list(cmd)))
    return changes


BRIDGE_PREFIX = "mgpu"
ALIAS_PREFIX = "mesos-gpu-engine-of-pid-"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise LocalClusterError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def _make_bridge(name: str) -> str:
    """A Linux bridge for one engine, on a 10.x.y.0/24 no route of this host uses."""
    if shutil.which("ip") is None:
        raise LocalClusterError("ip not found: install the Debian package iproute2")
    used = _ip("-4", "route", "show").stdout
    for _ in range(50):
        subnet = f"10.{random.randint(100, 199)}.{random.randint(0, 255)}"
        if f"{subnet}." not in used:
            break
    else:
        raise LocalClusterError("no free 10.x.y.0/24 for the Docker engine's bridge")
    _ip("link", "add", name, "type", "bridge")
    try:
        _ip("link", "set", name, "alias", f"{ALIAS_PREFIX}{os.getpid()}")   # its owner, for sweeps
        _ip("addr", "add", f"{subnet}.1/24", "dev", name)
        _ip("link", "set", name, "up")
    except LocalClusterError:
        _delete_bridge(name)
        raise
    return name


def _delete_bridge(name: str) -> None:
    _ip("link", "del", name, check=False)


def _sweep_bridges() -> None:
    """Remove the bridges of engines that are gone (a killed test run's): the
    process that made it has exited and no dockerd names it any more."""
    ours = set()
    for line in _ip("-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
        fields = line.split(":")
        if len(fields) < 3:
            continue
        name = fields[1].strip().split("@")[0]
        if not (name.startswith(BRIDGE_PREFIX) and len(name) == len(BRIDGE_PREFIX) + 8):
            continue
        owner = line.split(f"alias {ALIAS_PREFIX}", 1)[1].split()[0] if \
            f"alias {ALIAS_PREFIX}" in line else ""
        if owner.isdigit() and os.path.exists(f"/proc/{owner}"):
            continue                          # its maker is alive: about to start dockerd
        ours.add(name)
    if not ours:
        return
    in_use = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().decode(errors="replace")
        except OSError:
            continue
        in_use.update(n for n in ours if f"--bridge={n}" in text)
    for name in ours - in_use:
        log.info("removing the bridge %s of a Docker engine that is gone", name)
        _delete_bridge(name)


def _split_ref(ref: str):
    name, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        return ref, "latest"
    return name, tag


class DockerEngine:
    """One dockerd with everything of its own under a temp run dir."""

    def __init__(self) -> None:
        self.run_dir: Optional[Path] = None
        self.proc: Optional[subprocess.Popen] = None
        self.namespace = f"mgpu-{uuid.uuid4().hex[:8]}"
        self._client: Optional[docker.DockerClient] = None
        self._imported: Dict[str, str] = {}      # (labels, env, cmd) as JSON -> image id
        self.bridge: Optional[str] = None

    @property
    def socket(self) -> str:
        return str(self.run_dir / "docker.sock")

    @property
    def host(self) -> str:
        """For DOCKER_HOST or docker.DockerClient(base_url=...)."""
        return f"unix://{self.socket}"

    @property
    def log_file(self) -> Path:
        return self.run_dir / "dockerd.log"

    def start(self) -> "DockerEngine":
        if self.proc is not None:
            raise LocalClusterError(f"dockerd already running on {self.socket}")
        if shutil.which(DOCKERD) is None:
            raise LocalClusterError("dockerd not found: install the Debian package docker.io")
        processes.sweep_orphans()
        # Short path: the socket (and containerd's, inside exec root) must fit 108 bytes.
        self.run_dir = Path(tempfile.mkdtemp(prefix=processes.RUN_DIR_PREFIX + "docker-"))
        (self.run_dir / "daemon.json").write_text("{}\n")   # not the host's /etc/docker
        processes.track(self)
        _sweep_bridges()
        self.bridge = _make_bridge("mgpu" + self.namespace.split("-")[-1])
        cmd = [DOCKERD, "--data-root", str(self.run_dir / "data"),
               "--exec-root", str(self.run_dir / "exec"),
               "--pidfile", str(self.run_dir / "docker.pid"),
               "--host", self.host, "--config-file", str(self.run_dir / "daemon.json"),
               "--storage-driver=vfs", "--iptables=false", "--ip6tables=false",
               f"--bridge={self.bridge}", "--containerd-namespace", self.namespace,
               "--containerd-plugins-namespace", self.namespace + "-plugins"]
        env = {**os.environ, processes.OWNER_VAR: processes.owner_tag(self.run_dir)}
        env.pop("DOCKER_HOST", None)
        started = time.monotonic()
        try:
            with open(self.log_file, "ab") as out:
                self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                             stderr=subprocess.STDOUT, start_new_session=True)
            processes.wait_until(self._answers, START_TIMEOUT, f"dockerd on {self.socket}",
                                 self._died, interval=0.1)
        except BaseException:
            self.stop()
            raise
        log.info("dockerd up on %s in %.1f s (pid %d)", self.socket,
                 time.monotonic() - started, self.proc.pid)
        return self

    def _answers(self) -> bool:
        if not os.path.exists(self.socket):
            return False
        try:
            return self.client().ping()
        except docker.errors.DockerException:
            self._client = None                  # version detection failed: retry later
            return False

    def _died(self) -> Optional[str]:
        if self.proc is not None and self.proc.poll() is not None:
            lines = self.log_file.read_text(errors="replace").strip().splitlines()
            return f"dockerd exited with status {self.proc.returncode}: " + \
                   " | ".join(lines[-3:])
        return None

    def client(self) -> docker.DockerClient:
        """A docker SDK client for this engine (one per engine)."""
        if self.run_dir is None:
            raise LocalClusterError("the Docker engine is not started")
        if self._client is None:
            self._client = docker.DockerClient(base_url=self.host, timeout=120)
        return self._client

    def make_image(self, tag: str, labels: Optional[Dict[str, str]] = None,
                   env: Optional[Dict[str, str]] = None,
                   cmd: Union[None, str, Sequence[str]] = None) -> str:
        """Import the busybox rootfs as `tag` with these labels, environment and
        command; returns the reference ("name:tag")."""
        repo, version = _split_ref(tag)
        key = json.dumps([labels or {}, env or {}, cmd], sort_keys=True)
        api = self.client().api
        if key not in self._imported:
            answer = api.import_image_from_data(busybox_rootfs(), repository=repo, tag=version,
                                                changes=image_changes(labels, env, cmd))
            status = json.loads(answer.strip().splitlines()[-1]) if answer else {}
            if "error" in status:
                raise LocalClusterError(f"docker import {tag}: {status['error']}")
            self._imported[key] = status.get("status") or api.inspect_image(tag)["Id"]
        else:
            api.tag(self._imported[key], repo, version)
        return f"{repo}:{version}"

    def import_rootfs(self, tag: str, rootfs: bytes, labels: Optional[Dict[str, str]] = None,
                      env: Optional[Dict[str, str]] = None,
                      cmd: Union[None, str, Sequence[str]] = None) -> str:
        """`docker import` a root filesystem tar as `tag`; returns the reference."""
        repo, version = _split_ref(tag)
        answer = self.client().api.import_image_from_data(
            rootfs, repository=repo, tag=version, changes=image_changes(labels, env, cmd))
        status = json.loads(answer.strip().splitlines()[-1]) if answer else {}
        if "error" in status:
            raise LocalClusterError(f"docker import {tag}: {status['error']}")
        return f"{repo}:{version}"

    def remove_containers(self) -> None:
        """Force-remove every container of this engine (running or not)."""
        for c in self.client().containers.list(all=True):
            try:
                c.remove(force=True, v=True)
            except docker.errors.APIError as e:
                log.warning("removing container %s: %s", c.short_id, e)

    def stop(self) -> None:
        """Remove the containers, stop dockerd and its containerd, delete the run dir."""
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    self.remove_containers()
                except docker.errors.DockerException as e:
                    log.warning("dockerd on %s: %s", self.socket, e)
            if self._client is not None:
                self._client.close()
                self._client = None
            processes.kill_tree(self.proc.pid, self.run_dir, grace=STOP_GRACE)
            self.proc.wait()
            self.proc = None
        if self.bridge is not None:
            _delete_bridge(self.bridge)
            self.bridge = None
        if self.run_dir is not None:
            if os.environ.get("MESOS_GPU_LOCALCLUSTER_KEEP"):
                processes.unmount_under(self.run_dir)
                log.warning("dockerd run dir kept: %s", self.run_dir)
            else:
                processes.remove_tree(self.run_dir)
            self.run_dir = None
        self._imported.clear()
        processes.untrack(self)

    def __enter__(self) -> "DockerEngine":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<DockerEngine {self.socket if self.run_dir else '-'}>"
