"""The agent daemon: `mesos-gpu agent --work_dir DIR [Mesos-style flags]`.

At start it checks its flags, discovers the GPUs through NVML, picks the ones
to manage (--nvidia_gpu_devices / --resources=gpus:N), reads their topology,
builds the driver volume, recovers the ledger against the kernel and Docker,
and logs what it found. Then it serves the local API on <work_dir>/agent.sock
(and, with --metrics_address, /metrics and /v1/health over TCP), watches the
GPUs' health (isolator/gpu_health/monitor.py; the state in <work_dir>/health.json)
and sweeps up what nobody owns (isolator/containers/orphan_sweep.py) until SIGTERM or
SIGINT, writes a last ledger snapshot and exits 0.
One daemon per work_dir: a second one is refused (the lock file names the first).
A start refused for bad flags or an unusable host leaves no new work_dir behind.
"""
import logging
import os
import shutil
import signal
import threading
import time
from typing import Dict, Optional

from common import instance_lock
from common.paths import MAX_SOCKET_PATH, first_missing
from isolator.cgroups import cgroup_host
from isolator.discovery import devices, nvml
from isolator.daemon import flags, side_services
from isolator.daemon.mig_watch import MigWatch
from isolator.gpu_health import book
from isolator.metrics import metrics
from isolator.discovery import topology as topology_mod
from isolator.gpu_health.monitor import GpuHealthMonitor
from isolator.daemon.metrics_server import MetricsServer
from isolator.gpu_health.xid_catalog import Classifier, parse_overrides
from isolator.cgroups.container_cgroups import ContainerCgroups
from isolator.allocation.docker_state import DockerState
from isolator.discovery import mig
from isolator.discovery.gpu import MIG_ENABLED, Inventory
from isolator.api import SOCKET_NAME
from isolator.allocation.ledger import Ledger
from isolator.containers.orphan_sweep import OrphanSweep
from isolator.daemon.server import AgentServer
from isolator.containers.faults import FaultResponse
from isolator.containers.isolator import GpuIsolator
from isolator.sharing import compute_mode, mps_control, plan as share_plan
from common.errors import UserError

log = logging.getLogger("mesos-gpu.agent")
LOCK_NAME = "agent.lock"
MPS_WATCH_INTERVAL = 0.5       # how soon a dead MPS control daemon is restarted


def socket_path(work_dir: str) -> str:
    return os.path.join(work_dir, SOCKET_NAME)


def _lock(work_dir: str) -> int:
    """Hold <work_dir>/agent.lock for the daemon's life."""
    path = os.path.join(work_dir, LOCK_NAME)
    try:
        return instance_lock.hold(path)
    except instance_lock.Held as e:
        raise UserError(f"--work_dir={work_dir}: another agent daemon (pid {e.pid}) "
                        f"holds {path}") from None
    except OSError as e:
        raise flags.FlagError(f"--work_dir={work_dir}: cannot open {path}: {e.strerror}") from None


def _work_dir(path: str) -> Optional[str]:
    """Create the work dir (mode 0700). Returns the topmost directory this call
    created (removed again if the daemon cannot start), None if it existed."""
    flags.check_work_dir(path)
    sock = socket_path(path)
    if len(os.fsencode(sock)) > MAX_SOCKET_PATH:
        raise flags.FlagError(f"--work_dir={path}: too long for the API socket {sock} "
                              f"(a unix socket path has at most {MAX_SOCKET_PATH} bytes)")
    made = first_missing(path)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)
    except FileExistsError:
        raise flags.FlagError(f"--work_dir={path}: exists and is not a directory") from None
    except OSError as e:
        raise flags.FlagError(f"--work_dir={path}: cannot create it: {e.strerror}") from None
    return made


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


def build_isolator(args) -> GpuIsolator:
    """Everything the daemon needs, discovered (the flags are checked by run())."""
    health_path = os.path.join(args.work_dir, book.FILE_NAME)
    inventory = nvml.discover(args.nvml_library,
                              known=book.known_gpus(health_path).values(),
                              caps=flags.nvidia_caps(args))
    selection = flags.select_gpus(inventory, args.nvidia_gpu_devices, args.resources)
    host = cgroup_host.detect()
    versions = flags.device_cgroup_versions(args.device_cgroup, host.devices_v1, host.unified)
    physical = selection.gpus
    managed = mig.schedulable(physical, inventory.mig_devices)     # never a MIG GPU whole
    if physical:
        kinds = ", ".join(sorted({g.name for g in physical}))
        log.info("%d GPUs found (%s), managing %d: minors %s (%s); driver %s, CUDA %s",
                 len(inventory.gpus), kinds, len(physical), [g.minor for g in physical],
                 selection.reason, inventory.driver_version, inventory.cuda_driver_version)
        for g in physical:
            if g.mig_mode == MIG_ENABLED:
                units = [m for m in managed if getattr(m, "parent_uuid", "") == g.uuid]
                log.info("GPU %d (%s) is in MIG mode: handed out as its %d MIG device(s) %s, "
                         "never whole", g.index, g.uuid, len(units),
                         ", ".join(f"{m.profile} gi {m.gpu_instance_id}" for m in units))
    else:
        log.info("0 GPUs managed: %s", selection.reason)
    topo = topology_mod.from_nvml(physical, nvml.topology(args.nvml_library)) \
        if len(physical) > 1 else topology_mod.Topology({})
    _log_devices(args.dev_dir, managed)
    log.info("device cgroups: %s under %s (host cgroups %s)", "+".join(versions),
             args.cgroups_root, host.mode)
    docker = None if args.docker_socket in ("", "none") else DockerState(args.docker_socket)
    shares = share_plan.plan_of(args, [g for g in managed if g.key == g.minor])  # never a MIG GPU
    volume = _volume(args, inventory, managed)
    mps = _mps_controls(args, shares, volume)
    return GpuIsolator(
        inventory=inventory, managed=managed, topology=topo,
        ledger=Ledger(args.work_dir),
        cgroups=ContainerCgroups(host, versions, args.cgroups_root),
        dev_dir=args.dev_dir, docker=docker, volume=volume,
        nvml_library=args.nvml_library, prepare_timeout=args.prepare_timeout,
        health=book.HealthBook(physical, health_path, args.health_quiet_period),
        shares=shares, mps=mps)


def _mps_controls(args, shares: share_plan.SharePlan, volume: Optional[Dict]) -> Dict:
    """One MPS control daemon per GPU shared under MPS, started (or adopted from the
    last run) before the API serves; a control daemon of a GPU no longer shared is quit."""
    root = os.path.join(args.work_dir, "mps")
    wanted = {m: s for m, s in shares.gpus.items() if s.sharing == "mps"}
    program = args.mps_control or (os.path.join(volume["path"], "bin", mps_control.PROGRAM)
                                   if volume else None)
    if wanted and (not program or not os.access(program, os.X_OK)):
        raise flags.FlagError(
            f"--sharing=mps: no {mps_control.PROGRAM} to run "
            + (f"({program} is not an executable)" if program else
               "(--driver_volume=none: give --mps_control PATH)"))
    if wanted:
        # a task running as another user than root must reach its GPU's pipe directory
        # under the work dir: others may pass through it (0711) but list nothing, and
        # every file of ours in it is 0600 (the ledger, its journal, the API socket)
        os.chmod(args.work_dir, 0o711)
        log.info("work dir %s: mode 0711 (tenants of other users reach the MPS pipe "
                 "directories under %s)", args.work_dir, root)
        closed = _closed_ancestor(args.work_dir)
        if closed:
            log.warning("%s: tasks running as a user other than root cannot use a GPU "
                        "shared under MPS until they may pass through it (chmod o+x)", closed)
    controls = {}
    for minor, s in sorted(wanted.items()):
        control = mps_control.MpsControl(program, root, minor, s.gpu.uuid, s.thread_cap,
                                         s.memory_cap)
        try:
            control.start()
            compute_mode.make_exclusive(args.nvml_library, minor, control.dir)
            control.compute_mode = compute_mode.NAMES.get(
                compute_mode.current(args.nvml_library, minor), "?")
        except (mps_control.MpsError, OSError, UserError) as e:
            for started in [*controls.values(), control]:
                started.stop()
            raise UserError(f"GPU {s.gpu.index} (--shared_gpus, --sharing=mps): {e}") from None
        controls[minor] = control
    return controls


def _closed_ancestor(path: str) -> str:
    """The first directory above `path` that other users may not pass through, named
    with its mode; '' when there is none."""
    parent = os.path.dirname(os.path.abspath(path))
    while True:
        mode = os.stat(parent).st_mode & 0o777
        if not mode & 0o001:
            return f"{parent} (mode {mode:04o}) lets no other user through"
        if parent == "/":
            return ""
        parent = os.path.dirname(parent)


def _quit_unshared(args, isolator: GpuIsolator) -> None:
    """Quit the control daemon of a GPU shared under MPS last run and not now (after
    recovery: a tenant still on it refuses the start before its MPS is touched)."""
    root = os.path.join(args.work_dir, "mps")
    if not os.path.isdir(root):
        return
    for name in os.listdir(root):
        minor = name[len("nvidia"):]
        if minor.isdigit() and int(minor) not in isolator.mps:
            control = mps_control.MpsControl("", root, int(minor), "", 100, 0)
            control.stop_adopted()
            try:
                compute_mode.restore(args.nvml_library, int(minor), control.dir)
            except UserError as e:
                log.warning("%s (it stays as it is)", e)


def _housekeeping(isolator: GpuIsolator, stop: threading.Event, sync_every: float) -> None:
    """fdatasync the ledger journal (each change is already written to it)."""
    ledger = isolator.ledger
    while not stop.wait(sync_every):
        failing = ledger.sync_error is not None
        try:
            ledger.sync()
        except OSError as e:                     # keep serving; the next round retries
            if not failing:
                log.error("ledger journal %s: fdatasync failed (%s): the disk under %s is "
                          "failing; until it works again every change is fdatasync'ed "
                          "before it is acknowledged, and refused when that fails",
                          ledger.journal_path, e.strerror or e, os.path.dirname(ledger.path))
        except Exception:
            log.exception("ledger sync failed")


def _check_flags(args) -> None:
    """Every flag that can be judged without NVML or the disk, before anything is made."""
    flags.check_isolation(args.isolation)
    flags.check_daemon_values(args)
    flags.check_selection(args.nvidia_gpu_devices, args.resources)
    share_plan.check_flags(args)
    side_services.check_flags(args)
    if args.docker_socket not in ("", "none"):
        import docker.utils                     # checked now, not at the first recovery
        try:
            docker.utils.parse_host(args.docker_socket)
        except docker.errors.DockerException as e:
            raise flags.FlagError(f"--docker_socket={args.docker_socket}: {e} (e.g. "
                                  f"{flags.DEFAULT_DOCKER_SOCKET}, tcp://HOST:2375 or none)"
                                  ) from None


def run(args) -> int:
    _check_flags(args)
    made = _work_dir(args.work_dir)
    lock_fd = _lock(args.work_dir)
    try:
        stop = threading.Event()
        extras = metrics_server = monitor = None
        try:
            isolator = build_isolator(args)
            faults = FaultResponse(isolator, kill_on_fault=args.on_gpu_fault == "kill")
            isolator.recover()
            _quit_unshared(args, isolator)
            isolator.health.load()
            # Before the API socket: once it exists (systemd's readiness check) all is served.
            extras = side_services.start(args, isolator)     # plugin, REST API, CDI, driver watch
            latency = metrics.Histograms()
            if args.metrics_address:
                metrics_server = MetricsServer(args.metrics_address, isolator, latency)
            monitor = GpuHealthMonitor(list(isolator.physical.values()), isolator.health,
                                       Classifier(parse_overrides(args.xid_override)),
                                       faults.gpu_fault, args.nvml_library,
                                       args.health_poll_interval)
            isolator.monitor = monitor
            threads = monitor.start(stop)
            server = AgentServer(socket_path(args.work_dir), isolator, latency=latency)
        except BaseException:
            stop.set()
            for part in (extras, metrics_server):
                if part is not None:
                    part.close() if part is extras else part.server_close()
            if monitor is not None:
                monitor.close()
            if made is not None:        # a refused start leaves no work dir behind
                shutil.rmtree(made, ignore_errors=True)
            raise

        def on_signal(signum, _frame) -> None:
            log.info("%s received: stopping", signal.Signals(signum).name)
            stop.set()
            server.shutdown()
            if metrics_server is not None:
                metrics_server.shutdown()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        keeper = threading.Thread(target=_housekeeping, name="housekeeping", daemon=True,
                                  args=(isolator, stop, args.ledger_flush_interval))
        keeper.start()
        sweep = OrphanSweep(isolator, args.reconcile_interval)
        threads += sweep.start(stop)
        if isolator.mps:
            threads.append(threading.Thread(
                target=mps_control.watch, name="mps-watch", daemon=True,
                args=(list(isolator.mps.values()), stop, MPS_WATCH_INTERVAL,
                      faults.mps_restarted),
                kwargs={"on_server_failure": faults.mps_server_failed}))
            threads[-1].start()
        threads += MigWatch(isolator, args.nvml_library, flags.nvidia_caps(args),
                            args.driver_check_interval).start(stop)
        log.info("sweeping holdings nobody owns every %g s (and at once when an owner ends)",
                 args.reconcile_interval)
        if metrics_server is not None:
            threads.append(threading.Thread(target=metrics_server.serve_forever,
                                            kwargs={"poll_interval": 0.2},
                                            name="metrics-server", daemon=True))
            threads[-1].start()
            log.info("serving /metrics and /v1/health on %s (read-only HTTP)", metrics_server.url)
        log.info("serving the agent API on %s (backlog %d, %d workers)", server.socket_path,
                 server.backlog, len(server._workers))
        try:
            server.serve_forever(poll_interval=0.2)
        finally:
            stop.set()
            sweep.wake.set()
            monitor.wake.set()
            server.server_close()
            if metrics_server is not None:
                metrics_server.shutdown()
                metrics_server.server_close()
            extras.close()
            deadline = time.monotonic() + 5     # one bound for all: a thread may be stuck in NVML
            for t in [keeper, *threads]:
                t.join(timeout=max(0.0, deadline - time.monotonic()))
            monitor.close()
            isolator.close()
        log.info("stopped: %d containers hold %d GPUs (ledger %s)", len(isolator.holdings),
                 len(isolator.allocator.allocated), isolator.ledger.path)
        return 0
    finally:
        os.close(lock_fd)
