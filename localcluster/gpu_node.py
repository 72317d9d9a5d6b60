"""The agent side of one GPU node, for end-to-end tests and the demo.

With a fake NVML layout (a host without GPUs):
- GPU device nodes (c 195:N, nvidiactl, nvidia-uvm) in a temp dev dir: there
  is no NVIDIA kernel driver, so opening a node gives ENXIO when the device
  cgroup lets it through and EPERM when it does not (localcluster/device_nodes.py);
- the real agent daemon, `mesos-gpu agent`, over a fake NVML layout whose
  driver version is that of the real NVIDIA 535 files, so it builds the
  real read-only driver volume;
- `mesos-gpu agent flags`: the --resources / --attributes its Mesos agent gets;
  `cpuinfo` (a recorded /proc/cpuinfo) gives the node a CPU of its own, for its
  platform_features (its Mesos agent needs MESOS_GPU_CPUINFO too, for executors);
- `metrics_address`: the daemon's read-only HTTP endpoint (/metrics, /v1/health),
  also in the agent flags (attribute gpu_metrics_port); `nvml`: the fake NVML's
  fault control (localcluster/fake_nvml/control.py) of a simulated node.

With no layout (a host with an NVIDIA driver): the host's own NVML, /dev and
driver files, so the demo runs on real GPUs the same way.
"""
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Dict, Optional, Sequence

from isolator.cgroups import cgroup_host
from isolator.discovery import platform_features
from isolator.client import AgentClient
from isolator.sharing import compute_mode
from common.errors import UserError
from localcluster import device_nodes
from localcluster.processes import remove_cgroup_tree
from localcluster import driver_files, fake_nvml
from localcluster.fake_nvml.control import Control

READY_LINE = "serving the agent API"
MESOS_GPU = [sys.executable, "-m", "mesos_gpu"]


def layout_for_driver_files(base: fake_nvml.Layout, name: str) -> fake_nvml.Layout:
    """`base` reporting the driver version of the real NVIDIA files of driver_files."""
    return replace(base, name=name, driver=driver_files.DRIVER_VERSION)


class GpuNode:
    """Device nodes + agent daemon; `flags()` for the Mesos agent."""

    def __init__(self, layout: Optional[fake_nvml.Layout], docker_host: Optional[str] = None,
                 volume: bool = True, cpuinfo: Optional[str] = None,
                 metrics_address: Optional[str] = None,
                 daemon_args: Sequence[str] = (),
                 driver_root: Optional[Path] = None,
                 share_args: Sequence[str] = ()) -> None:
        self.layout = layout
        self.driver_root = driver_root  # the host's driver files (default: the Debian 535 tree)
        self._mig: Optional[list] = None    # the MIG flags of a MIG layout (_mig_flags)
        self.cpuinfo = cpuinfo          # a recorded /proc/cpuinfo: the node's simulated CPU
        self.docker_host = docker_host
        self.volume = volume
        self.dir = Path(tempfile.mkdtemp(prefix="mgpu-fw-node-"))
        self.dev_dir = self.dir / "dev"
        self.work_dir = self.dir / "work"
        self.cgroups_root = f"mesos-gpu-node-{secrets.token_hex(4)}"
        self.proc: Optional[subprocess.Popen] = None
        self.log_path = self.dir / "agent.log"
        self.client = AgentClient(str(self.socket), timeout=30)
        self.metrics_address = metrics_address
        self.daemon_args = list(daemon_args)
        # --shared_gpus and its siblings: given to the daemon and to `agent flags` alike,
        # so the Mesos agent offers the shares the daemon gives
        self.share_args = list(share_args)
        self.nvml = Control(self.dir / "nvml.control") if self.simulated else None

    @property
    def socket(self) -> Path:
        return self.work_dir / "agent.sock"

    @property
    def simulated(self) -> bool:
        return self.layout is not None

    @property
    def minors(self) -> list[int]:
        if self.simulated:
            return [g.minor for g in self.layout.gpus]
        return sorted(self.client.info()["managed"])

    def env(self) -> Dict[str, str]:
        if not self.simulated:
            env = dict(os.environ)
        else:
            env = {k: v for k, v in os.environ.items()
                   if k not in ("FAKE_NVML_CONFIG", "MESOS_GPU_NVML_LIBRARY", "FAKE_NVML_INIT_ERROR",
                                "FAKE_NVML_CONTROL")}
            env.update(self.layout.env(control=self.nvml.path))
        if self.cpuinfo:
            env[platform_features.ENV_CPUINFO] = str(self.cpuinfo)
        return env

    def start(self) -> "GpuNode":
        args = ["agent", "--work_dir", str(self.work_dir), "--cgroups_root", self.cgroups_root,
                "--docker_socket", self.docker_host or "none", "--ledger_flush_interval", "0.2",
                *self._metrics_flag(), *self.share_args, *self.daemon_args]
        if self.simulated:
            device_nodes.make_device_nodes(self.dev_dir, self.minors)
            args += ["--dev_dir", str(self.dev_dir), "--device_cgroup", "v1", *self._mig_flags()]
        if self.volume:
            root = self.driver_root or (driver_files.build() if self.simulated else "/")
            args += ["--driver_root", str(root), "--volume_root", str(self.dir / "volumes")]
        else:
            args += ["--driver_volume", "none"]
        logged = len(self.log())
        with open(self.log_path, "ab") as log:
            prefix = device_nodes.NO_MKNOD if self.simulated else []
            self.proc = subprocess.Popen(prefix + MESOS_GPU + args, env=self.env(), stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while READY_LINE not in self.log()[logged:]:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"agent daemon did not start:\n{self.log()}")
            time.sleep(0.1)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def crash(self) -> None:
        """SIGKILL the daemon alone (its work dir, ledger and health file stay);
        `start()` runs it again on them."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def start_lines(self) -> list[str]:
        """What the daemon logged while starting (GPUs found, volume, ledger), without
        the timestamps."""
        lines = []
        for line in self.log().splitlines():
            if READY_LINE in line:
                break
            if line.strip():
                lines.append(re.sub(r"^\S+ \S+ ", "", line))
        return lines

    def _mig_flags(self) -> list[str]:
        """A layout with MIG devices: the bed's /proc/devices and capability files in
        this node's directory, and the /dev/nvidia-caps nodes they name."""
        if not self.simulated or not self.layout.caps_minors():
            return []
        if self._mig is None:               # made once: `flags()` asks after `start()`
            self._mig = self.layout.mig_bed(self.dir / "proc", self.dev_dir)
        return self._mig

    def _metrics_flag(self) -> list[str]:
        return ["--metrics_address", self.metrics_address] if self.metrics_address else []

    @property
    def metrics_url(self) -> Optional[str]:
        return f"http://{self.metrics_address}" if self.metrics_address else None

    def flags(self, cpus: float = 4, mem: int = 4096) -> tuple[str, str]:
        """(MESOS_RESOURCES, MESOS_ATTRIBUTES) from `mesos-gpu agent flags`."""
        out = subprocess.run(MESOS_GPU + ["agent", "flags", *self._metrics_flag(),
                                          *self.share_args, *self._mig_flags()],
                             env=self.env(), check=True, capture_output=True, text=True).stdout
        resources = re.search(r"--resources=(\S+)", out).group(1)
        attributes = re.search(r"--attributes=(\S+)", out).group(1)
        return f"cpus:{cpus};mem:{mem};disk:1000;{resources}", attributes

    def allocated(self) -> list[int]:
        return self.client.info()["allocated"]

    def containers(self) -> dict:
        return self.client.info()["containers"]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._end_mps_control_daemons()
        host = cgroup_host.detect()
        for mount in (host.devices_v1, host.unified):
            if mount:
                remove_cgroup_tree(Path(mount) / self.cgroups_root)
        subprocess.run(["rm", "-rf", str(self.dir)], check=False)

    def _end_mps_control_daemons(self) -> None:
        """The MPS control daemons the daemon started outlive it on purpose (its
        restart keeps them); the node's end is theirs too (by the pid each wrote):
        `quit` first, which also ends their MPS servers on a real GPU, then SIGKILL."""
        for pid_file in (self.work_dir / "mps").glob("nvidia*/control.pid"):
            try:
                pid = int(pid_file.read_text())
                if b"nvidia-cuda-mps-control" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    continue
                program = os.readlink(f"/proc/{pid}/exe")
                subprocess.run([program], input="quit\n", text=True, capture_output=True,
                               timeout=10, env={**os.environ, "CUDA_MPS_PIPE_DIRECTORY":
                                                str(pid_file.parent / "pipe")})
                deadline = time.monotonic() + 5
                while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                    if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
                        break
                    time.sleep(0.1)
                os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        if not self.simulated:                 # a real GPU: its compute mode as it was
            for mps_dir in (self.work_dir / "mps").glob("nvidia*"):
                if mps_dir.name[len("nvidia"):].isdigit():
                    try:
                        compute_mode.restore(None, int(mps_dir.name[len("nvidia"):]),
                                             str(mps_dir))
                    except UserError:
                        pass

    def __enter__(self) -> "GpuNode":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
