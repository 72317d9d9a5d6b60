"""The agent daemon: `mesos-gpu agent --work_dir DIR [Mesos-style flags]`.

At start it checks its flags, discovers the GPUs through NVML, picks the ones
to manage (--nvidia_gpu_devices / --resources=gpus:N), reads their topology,
builds the driver volume, recovers the ledger against the kernel and Docker,
and logs what it found. Then it serves the local API on <work_dir>/agent.sock
until SIGTERM or SIGINT, writes the ledger a last time and exits 0.
One daemon per work_dir: a second one is refused (the lock file names the first).
"""
import fcntl
import logging
import os
import signal
import threading
from typing import Dict, Optional

from isolator import cgroup_host, devices, flags, nvml
from isolator import topology as topology_mod
from isolator.container_cgroups import ContainerCgroups
from isolator.docker_state import DockerState
from isolator.gpu import Inventory
from isolator.ledger import Ledger
from isolator.server import AgentServer
from isolator.service import AgentService
from volumes.errors import UserError

log = logging.getLogger("mesos-gpu.agent")
SOCKET_NAME = "agent.sock"
LOCK_NAME = "agent.lock"
REAP_EVERY = 30.0


def socket_path(work_dir: str) -> str:
    return os.path.join(work_dir, SOCKET_NAME)


def _lock(work_dir: str) -> int:
    """Hold <work_dir>/agent.lock for the daemon's life."""
    path = os.path.join(work_dir, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode().strip() or "?"
        os.close(fd)
        raise UserError(f"--work_dir={work_dir}: another agent daemon (pid {holder}) "
                        f"holds {path}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _work_dir(path: str) -> str:
    flags.check_work_dir(path)
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def _volume(args, inventory: Inventory, managed) -> Optional[Dict]:
    if args.driver_volume == "none" or not managed or not inventory.driver_version:
        return None
    from volumes import builder          # the volumes package builds it (read-only)
    vol = builder.build(inventory.driver_version, args.driver_root, args.volume_root)
    log.info("driver volume %s at %s (%s)", vol.name, vol.path,
             "reused" if vol.reused else "built")
    return {"name": vol.name, "path": str(vol.path)}


def _log_devices(dev_dir: str, managed) -> None:
    control = devices.control_devices(dev_dir)
    names = {os.path.basename(n.path) for n in control}
    if control:
        log.info("control devices: %s", ", ".join(
            f"{n.path} {n.major}:{n.minor}" for n in control))
    if managed and "nvidiactl" not in names:
        log.warning("%s/nvidiactl is missing: containers cannot use their GPUs until "
                    "the NVIDIA driver creates it", dev_dir)
    missing = [g.device_path for g in managed
               if not os.path.exists(os.path.join(dev_dir, f"nvidia{g.minor}"))]
    if missing:
        log.warning("GPU device nodes missing under %s: %s", dev_dir, ", ".join(missing))


def build_service(args) -> AgentService:
    """Everything the daemon needs, checked, discovered and recovered."""
    flags.check_isolation(args.isolation)
    flags.check_daemon_values(args)
    _work_dir(args.work_dir)
    inventory = nvml.discover(args.nvml_library)
    selection = flags.select_gpus(inventory, args.nvidia_gpu_devices, args.resources)
    host = cgroup_host.detect()
    versions = flags.device_cgroup_versions(args.device_cgroup, host.devices_v1, host.unified)
    managed = selection.gpus
    if managed:
        kinds = ", ".join(sorted({g.name for g in managed}))
        log.info("%d GPUs found (%s), managing %d: minors %s (%s); driver %s, CUDA %s",
                 len(inventory.gpus), kinds, len(managed), [g.minor for g in managed],
                 selection.reason, inventory.driver_version, inventory.cuda_driver_version)
    else:
        log.info("0 GPUs managed: %s", selection.reason)
    topo = topology_mod.from_nvml(managed, nvml.topology(args.nvml_library)) \
        if len(managed) > 1 else topology_mod.Topology({})
    _log_devices(args.dev_dir, managed)
    log.info("device cgroups: %s under %s (host cgroups %s)", "+".join(versions),
             args.cgroups_root, host.mode)
    docker = None if args.docker_socket in ("", "none") else DockerState(args.docker_socket)
    service = AgentService(
        inventory=inventory, managed=managed, topology=topo,
        ledger=Ledger(args.work_dir),
        cgroups=ContainerCgroups(host, versions, args.cgroups_root),
        dev_dir=args.dev_dir, docker=docker, volume=_volume(args, inventory, managed),
        nvml_library=args.nvml_library, prepare_timeout=args.prepare_timeout)
    return service


def _housekeeping(service: AgentService, stop: threading.Event, flush_every: float) -> None:
    """Flush deferred ledger writes; give back GPUs of never-isolated containers."""
    since_reap = 0.0
    reap_every = min(REAP_EVERY, service.prepare_timeout / 2)
    while not stop.wait(flush_every):
        try:
            service.flush()
            since_reap += flush_every
            if since_reap >= reap_every:
                since_reap = 0.0
                service.reap()
        except Exception:                        # keep serving; the next round retries
            log.exception("housekeeping failed")


def run(args) -> int:
    flags.check_daemon_values(args)
    _work_dir(args.work_dir)
    lock_fd = _lock(args.work_dir)
    try:
        service = build_service(args)
        service.recover()
        server = AgentServer(socket_path(args.work_dir), service)
        stop = threading.Event()

        def on_signal(signum, _frame) -> None:
            log.info("%s received: stopping", signal.Signals(signum).name)
            stop.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        keeper = threading.Thread(target=_housekeeping, name="housekeeping", daemon=True,
                                  args=(service, stop, args.ledger_flush_interval))
        keeper.start()
        log.info("serving the agent API on %s", server.socket_path)
        try:
            server.serve_forever(poll_interval=0.2)
        finally:
            stop.set()
            server.server_close()
            keeper.join(timeout=5)
            service.flush()
        log.info("stopped: %d containers hold %d GPUs (ledger %s)", len(service.holdings),
                 len(service.allocator.allocated), service.ledger.path)
        return 0
    finally:
        os.close(lock_fd)
