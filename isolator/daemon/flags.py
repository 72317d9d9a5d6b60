"""The agent-side module's flags, with the Mesos agent's names and rules, so
that an operator's `mesos-agent` command line carries over.

`--isolation`, `--nvidia_gpu_devices` and `--resources=gpus:N` are checked the
way Mesos checks them (src/slave/containerizer/containerizer.cpp): integers,
no duplicates, counts that agree, no more than the machine has, discovery of
every GPU when neither is given, `gpus:0` to manage none.
"""
import argparse
import json
import math
import os
import re
from dataclasses import dataclass
from typing import List, Optional, Tuple
from isolator.api import DEFAULT_WORK_DIR, METRICS_PORT_ATTRIBUTE

from isolator.discovery.gpu import Gpu, Inventory
from isolator.discovery.nvidia_caps import CAPABILITIES, PROC_DEVICES, NvidiaCaps
from isolator.discovery.nvml import ENV_LIBRARY
from volumes.cli import non_empty
from common.errors import UserError

DEFAULT_ISOLATION = "filesystem/linux,cgroups/devices,gpu/nvidia"
DEFAULT_VOLUME_ROOT = "/var/run/mesos/isolators/gpu"
DEFAULT_DOCKER_SOCKET = "unix:///var/run/docker.sock"
DEVICE_CGROUP_CHOICES = ("auto", "v1", "v2", "both")
ON_GPU_FAULT = ("kill", "keep")


class FlagError(UserError):
    """A flag value the agent cannot start with."""


def add_selection_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that decide which GPUs are managed (shared by `agent` and `agent flags`)."""
    p.add_argument("--isolation", default=DEFAULT_ISOLATION, metavar="LIST",
                   help="the mesos-agent's isolators, comma-separated; must contain "
                        "'gpu/nvidia' (this daemon is that isolator) and 'cgroups/devices' "
                        "or 'cgroups/all' (the device cgroup is what confines a container "
                        f"to its GPUs). Default: {DEFAULT_ISOLATION}")
    p.add_argument("--nvidia_gpu_devices", metavar="INDICES",
                   help="comma-separated NVML indices of the GPUs to manage, e.g. 0,1; "
                        "requires --resources=gpus:N with N equal to their number. "
                        "Without both, every GPU NVML lists is managed")
    p.add_argument("--resources", metavar="RESOURCES",
                   help="the mesos-agent's resources, 'name:value;...' or JSON; only "
                        "'gpus' is read here: gpus:N must match --nvidia_gpu_devices, "
                        "gpus:0 manages no GPU at all")
    add_nvml_flag(p)
    from isolator.sharing import plan
    plan.add_arguments(p)


def add_metrics_flag(p) -> None:
    """--metrics_address: read by the daemon (it listens there) and by `agent flags`
    (the attribute that tells the framework the port)."""
    p.add_argument("--metrics_address", metavar="HOST:PORT",
                   help="serve GET /metrics (Prometheus text: DCGM exporter's per-GPU names, "
                        "GPU health, per-task usage, allocation) and GET /v1/health (each "
                        "GPU's health, read by the framework) over HTTP on this TCP address, "
                        "e.g. 127.0.0.1:9400. Off by default. `agent flags` then adds the "
                        f"attribute {METRICS_PORT_ATTRIBUTE}:PORT, by which the framework "
                        "finds it at the agent's IP: on a multi-node cluster listen on an "
                        "address the framework can reach")


def add_nvml_flag(p) -> None:
    p.add_argument("--nvml_library", metavar="PATH", type=non_empty,
                   help="load NVML from this file instead of libnvidia-ml.so.1 "
                        f"(also ${ENV_LIBRARY})")
    p.add_argument("--proc_devices", metavar="PATH", type=non_empty, default=PROC_DEVICES,
                   help="the kernel's list of device majors, for nvidia-caps (MIG) "
                        f"(default {PROC_DEVICES})")
    p.add_argument("--nvidia_capabilities", metavar="DIR", type=non_empty,
                   default=CAPABILITIES,
                   help="the driver's capability files, giving each MIG GPU and compute "
                        f"instance's /dev/nvidia-caps minor (default {CAPABILITIES})")


def nvidia_caps(args) -> NvidiaCaps:
    """Where MIG discovery reads the capability files (the flags of add_nvml_flag)."""
    return NvidiaCaps(getattr(args, "proc_devices", PROC_DEVICES),
                      getattr(args, "nvidia_capabilities", CAPABILITIES))


def add_daemon_arguments(p: argparse.ArgumentParser) -> None:
    """The flags only the running daemon needs."""
    p.add_argument("--work_dir", default=DEFAULT_WORK_DIR, metavar="DIR",
                   help="where the ledger (ledger.json, ledger.json.bak) and the API socket "
                        f"agent.sock live, mode 0700; 0711 while a GPU is shared under MPS, "
                        "so that tasks of any user reach its MPS pipe directory (default "
                        f"{DEFAULT_WORK_DIR})")
    p.add_argument("--dev_dir", default="/dev", metavar="DIR", type=non_empty,
                   help="where the NVIDIA device nodes are (nvidia<N>, nvidiactl, "
                        "nvidia-uvm, nvidia-uvm-tools); default /dev")
    p.add_argument("--cgroups_root", default="mesos-gpu", metavar="NAME",
                   help="parent cgroup of the containers' cgroups, under the v1 devices "
                        "hierarchy and/or the cgroup2 tree (default mesos-gpu)")
    p.add_argument("--device_cgroup", default="auto", choices=DEVICE_CGROUP_CHOICES,
                   help="how the kernel enforces device rules: v1 (devices controller), "
                        "v2 (eBPF program on the cgroup2 tree), both, or auto: v1 where "
                        "the devices controller is mounted, else v2")
    p.add_argument("--docker_socket", default=DEFAULT_DOCKER_SOCKET, metavar="URL",
                   help="Docker engine to check Docker GPU containers against at recovery "
                        f"(default {DEFAULT_DOCKER_SOCKET}; 'none' to skip: their GPUs are "
                        "then kept until cleanup)")
    p.add_argument("--driver_root", default="/", metavar="DIR", type=non_empty,
                   help="root of the host filesystem holding the NVIDIA driver files "
                        "(default /)")
    p.add_argument("--volume_root", default=DEFAULT_VOLUME_ROOT, metavar="DIR", type=non_empty,
                   help="where the read-only driver volume nvidia_<version> is built "
                        f"(default {DEFAULT_VOLUME_ROOT})")
    p.add_argument("--driver_volume", default="build", choices=("build", "none"),
                   help="build: make the read-only driver volume nvidia_<version> at start "
                        "(a failure stops the daemon) and hand it out with prepare; none: "
                        "containers get no volume (the host's own libraries are used)")
    p.add_argument("--prepare_timeout", type=float, default=600.0, metavar="SECONDS",
                   help="a container prepared but never isolated gives its GPUs back "
                        "after this long (default 600); a Docker one is first looked for "
                        "in Docker by its label")
    p.add_argument("--ledger_flush_interval", type=float, default=1.0, metavar="SECONDS",
                   help="how often the ledger journal is fdatasync'ed to disk (every change "
                        "is written to it before the answer, which survives any crash of "
                        "the daemon; the sync bounds what a power loss could take); default 1")
    p.add_argument("--reconcile_interval", type=float, default=5.0, metavar="SECONDS",
                   help="how often the daemon compares every holding with its owner process, "
                        "the Mesos agent, the kernel and Docker, releases what nobody owns "
                        "and restores drifted device rules (default 5; an owner's end is "
                        "also noticed at once)")
    p.add_argument("--health_poll_interval", type=float, default=5.0, metavar="SECONDS",
                   help="how often each GPU's figures and the faults NVML raises no event "
                        "for are read: off the bus, pages waiting for retirement, row "
                        "remapping pending or failed, slowdown temperature (default 5; XIDs "
                        "and ECC errors arrive as NVML events at once)")
    p.add_argument("--health_quiet_period", type=float, default=120.0, metavar="SECONDS",
                   help="an unhealthy GPU with no new fault for this long gets an NVML "
                        "self-check and, passing it, is healthy and allocatable again; the "
                        "period doubles each time the GPU became unhealthy in the last 24 h "
                        "(default 120)")
    p.add_argument("--xid_override", metavar="XID=EFFECT[,...]",
                   help="change what an XID does (see isolator/gpu_health/xid_catalog.py): "
                        "application (counted only), unhealthy (no new work on the GPU), "
                        "kill (also stop the work on it), e.g. 13=unhealthy,92=application. "
                        "XIDs not in NVIDIA's catalogue count as unhealthy")
    p.add_argument("--on_gpu_fault", choices=ON_GPU_FAULT, default="kill",
                   help="what happens to the containers on a GPU hit by a fault that loses "
                        "their work (double-bit ECC error, off the bus, an XID whose effect "
                        "is kill): kill (default: they are stopped, their tasks fail naming "
                        "the fault and are replaced on healthy GPUs) or keep (they run on; "
                        "the GPU takes no new work either way)")
    p.add_argument("--cdi_spec", default="none", metavar="FILE",
                   help="write a CDI spec (kind nvidia.com/gpu) for the managed GPUs and the "
                        "driver volume to FILE, e.g. /var/run/cdi/mesos-gpu.json, and keep it "
                        "true to the running driver; default none")
    p.add_argument("--volume_plugin", default="none", metavar="NAME",
                   help="serve the Docker volume plugin NAME (e.g. nvidia-docker) on "
                        "<plugin_socket_dir>/NAME.sock: docker run --volume-driver NAME "
                        "-v nvidia_driver_<version>:/usr/local/nvidia:ro,nocopy; default none")
    p.add_argument("--plugin_socket_dir", default="/run/docker/plugins", metavar="DIR",
                   type=non_empty, help="where dockerd looks for plugin sockets "
                                        "(default /run/docker/plugins)")
    p.add_argument("--nvidia_docker_api", default="none", metavar="HOST:PORT",
                   help="serve nvidia-docker v1's REST API (/v1.0/gpu/info, /gpu/status, "
                        "/docker/cli, /mesos/cli), e.g. 127.0.0.1:3476; needs --volume_plugin; "
                        "default none")
    p.add_argument("--mps_control", metavar="PATH", type=non_empty,
                   help="the driver's nvidia-cuda-mps-control for GPUs shared under MPS "
                        "(default: the one in the driver volume, i.e. the running driver's; "
                        "needed with --driver_volume=none)")
    p.add_argument("--driver_check_interval", type=float, default=30.0, metavar="SECONDS",
                   help="how often the daemon asks NVML for the driver version: a new driver "
                        "gets its volume (and CDI spec), old volumes are removed once no "
                        "container uses them; default 30")


def _isolators(isolation: str) -> List[str]:
    return [x.strip() for x in isolation.split(",") if x.strip()]


def check_isolation(isolation: str) -> List[str]:
    isolators = _isolators(isolation)
    if "gpu/nvidia" not in isolators:
        raise FlagError(f"--isolation={isolation}: 'gpu/nvidia' is missing; this daemon is "
                        "the agent's 'gpu/nvidia' isolator, so --isolation must contain it")
    if "cgroups/devices" not in isolators and "cgroups/all" not in isolators:
        raise FlagError(f"--isolation={isolation}: the 'cgroups/devices' or 'cgroups/all' "
                        "isolator must be enabled in order to use the 'gpu/nvidia' isolator "
                        "(the device cgroup is what keeps a container to its own GPUs)")
    return isolators


def parse_resources(text: str) -> List[Tuple[str, str]]:
    """(name, value text) pairs from Mesos's 'name(role):value;...' or JSON form."""
    text = text.strip()
    if text.startswith("["):
        try:
            items = json.loads(text)
            return [(r["name"], _json_value(r)) for r in items]
        except (ValueError, KeyError, TypeError) as e:
            raise FlagError(f"--resources: not a JSON list of resources ({e})") from None
    out = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, sep, value = part.partition(":")
        if not sep or not name.strip():
            raise FlagError(f"--resources={text}: '{part}' is not 'name:value'")
        out.append((re.sub(r"\(.*\)$", "", name.strip()), value.strip()))
    return out


def _json_value(r: dict) -> str:
    if "scalar" in r:
        return str(r["scalar"]["value"])
    raise ValueError(f"resource {r.get('name')!r} is not a scalar")


def gpus_resource(resources: Optional[str]) -> Optional[int]:
    """N from gpus:N, checked to be a non-negative integer; None when absent."""
    if not resources:
        return None
    values = [v for name, v in parse_resources(resources) if name == "gpus"]
    if not values:
        return None
    if len(values) > 1:
        raise FlagError(f"--resources={resources}: 'gpus' is given {len(values)} times")
    try:
        n = float(values[0])
    except ValueError:
        n = -1.0
    if n < 0 or not n.is_integer():
        raise FlagError(f"--resources={resources}: the 'gpus' resource must be a "
                        f"non-negative integer, got '{values[0]}' (whole GPUs; shared ones are "
                        "--shared_gpus)")
    return int(n)


def parse_devices(text: str) -> List[int]:
    indices = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise FlagError(f"--nvidia_gpu_devices={text}: '{part}' is not a GPU index "
                            "(a non-negative integer as NVML numbers GPUs)")
        index = int(part)
        if index in indices:
            raise FlagError(f"--nvidia_gpu_devices={text}: index {index} is listed twice")
        indices.append(index)
    return indices


@dataclass(frozen=True)
class Selection:
    """The GPUs the agent manages and why (for the start-up log)."""
    gpus: Tuple[Gpu, ...]
    reason: str


def check_selection(nvidia_gpu_devices: Optional[str],
                    resources: Optional[str]) -> Tuple[Optional[int], Optional[List[int]]]:
    """The rules for --nvidia_gpu_devices and --resources=gpus:N that need no
    NVML (checked before discovery, so a typo is the only line printed):
    (N, indices), each None when not given."""
    n = gpus_resource(resources)
    indices = parse_devices(nvidia_gpu_devices) if nvidia_gpu_devices is not None else None
    if indices is not None and n is None:
        raise FlagError(f"--nvidia_gpu_devices={nvidia_gpu_devices} cannot be set without "
                        f"also setting the 'gpus' resource (--resources=gpus:{len(indices)})")
    if n == 0 and indices is not None:
        raise FlagError(f"--nvidia_gpu_devices={nvidia_gpu_devices} cannot be combined "
                        "with gpus:0 (gpus:0 means no GPU is managed)")
    if n and indices is None:
        raise FlagError(f"--resources={resources}: the 'gpus' resource cannot be set without "
                        "also setting --nvidia_gpu_devices (which GPUs, by NVML index)")
    if n is not None and indices is not None and len(indices) != n:
        raise FlagError(f"'--resources' and '--nvidia_gpu_devices' specify different numbers "
                        f"of GPU devices: gpus:{n} but {len(indices)} indices "
                        f"({nvidia_gpu_devices})")
    return n, indices


def select_gpus(inventory: Inventory, nvidia_gpu_devices: Optional[str],
                resources: Optional[str]) -> Selection:
    """Mesos's rules for --nvidia_gpu_devices and --resources=gpus:N."""
    n, indices = check_selection(nvidia_gpu_devices, resources)
    if n == 0:
        return Selection((), "gpus:0 in --resources: no GPU is managed")
    if inventory.unavailable:
        if n:
            raise FlagError(f"--resources={resources}: cannot manage {n} GPUs: NVML is not "
                            f"available ({inventory.unavailable})")
        return Selection((), f"no GPUs: {inventory.unavailable}")
    have = len(inventory.gpus)
    if indices is None:
        return Selection(inventory.gpus, f"all {have} GPUs NVML lists")
    if n > have:
        raise FlagError(f"--resources=gpus:{n}: this machine has only {have} GPU(s)")
    missing = [i for i in indices if i >= have]
    if missing:
        raise FlagError(f"--nvidia_gpu_devices={nvidia_gpu_devices}: no GPU with NVML index "
                        f"{missing[0]} (this machine has indices 0-{have - 1})")
    by_index = {g.index: g for g in inventory.gpus}
    return Selection(tuple(by_index[i] for i in indices),
                     f"--nvidia_gpu_devices={nvidia_gpu_devices}")


def device_cgroup_versions(choice: str, devices_v1: Optional[str],
                           unified: Optional[str]) -> List[str]:
    """Which hierarchies enforce device rules, checked against what is mounted."""
    if choice == "auto":
        choice = "v1" if devices_v1 else "v2"
    versions = ["v1", "v2"] if choice == "both" else [choice]
    if "v1" in versions and not devices_v1:
        raise FlagError(f"--device_cgroup={choice}: the cgroup v1 devices controller is "
                        "not mounted on this host")
    if "v2" in versions and not unified:
        raise FlagError(f"--device_cgroup={choice}: no cgroup2 tree is mounted on this host")
    return versions


def check_daemon_values(args) -> None:
    """The daemon's own flags: names that stay inside their trees, positive times."""
    parts = args.cgroups_root.split("/")
    if not args.cgroups_root or any(p in ("", ".", "..") or not re.fullmatch(r"[A-Za-z0-9_.-]+", p)
                                    for p in parts):
        raise FlagError(f"--cgroups_root={args.cgroups_root}: must be a relative cgroup path of "
                        "A-Z a-z 0-9 _ . - names (no '..')")
    for name in ("prepare_timeout", "ledger_flush_interval", "reconcile_interval",
                 "health_poll_interval", "health_quiet_period"):
        value = getattr(args, name)
        if not (value > 0 and math.isfinite(value)):    # inf overflows the timer waits
            raise FlagError(f"--{name}={value}: must be a positive number of seconds")
    check_work_dir(args.work_dir)
    from isolator.gpu_health.xid_catalog import parse_overrides
    try:
        parse_overrides(args.xid_override)
        check_metrics_address(args.metrics_address)
    except UserError as e:
        raise FlagError(str(e)) from None


def check_metrics_address(address: Optional[str]) -> None:
    if address is not None:
        from isolator.daemon.metrics_server import parse_address
        parse_address(address)


def check_work_dir(work_dir: str) -> str:
    if not os.path.isabs(work_dir):
        raise FlagError(f"--work_dir={work_dir}: must be an absolute path")
    return work_dir
