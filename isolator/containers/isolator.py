"""The GPU isolator: each container's life on this node (prepare, isolate, update,
cleanup; release and adopt for the orphan sweep), one lock over every change, each
change in the ledger's journal before the kernel or the caller sees it. The order
of effects that makes a crash anywhere safe is in ARCHITECTURE.md."""
import logging
import threading
import time
from collections import Counter
from dataclasses import replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from isolator import crashpoints
from isolator.allocation.allocator import Allocator
from isolator.allocation.docker_state import DockerState, DockerUnavailable
from isolator.allocation.ledger import Holding, Ledger, LedgerUnwritable
from isolator.allocation.owner import Owner
from isolator.allocation.recovery import Recovery, Report
from isolator.api import (DOCKER, MESOS, Cleanup, CleanupRequest, Grant, GpuFaultStop,
                          GrantedGpu, GrantedShare, IsolateRequest, PrepareRequest,
                          UpdateRequest, Volume, check_container_id)
from isolator.cgroups.container_cgroups import CgroupVanished, ContainerCgroups
from isolator.containers import mesos_cgroups
from isolator.containers.views import IsolatorViews
from isolator.discovery import devices
from isolator.discovery.gpu import Gpu, Inventory
from isolator.discovery.topology import Topology
from isolator.errors import BadRequest, Conflict, Forbidden, Gone, NotFound, Unavailable
from isolator.gpu_health.book import HealthBook
from isolator.sharing.mps_control import MpsControl
from isolator.sharing.plan import SharePlan, memory_of, size_text

log = logging.getLogger("mesos-gpu.agent")
CONTROL_TTL = 1.0


class GpuIsolator(IsolatorViews):
    def __init__(self, *, inventory: Inventory, managed: Sequence[Gpu], topology: Topology,
                 ledger: Ledger, cgroups: ContainerCgroups, dev_dir: str = "/dev",
                 docker: Optional[DockerState] = None, volume: Optional[Dict] = None,
                 nvml_library: Optional[str] = None, prepare_timeout: float = 600.0,
                 health: Optional[HealthBook] = None,
                 shares: Optional[SharePlan] = None,
                 mps: Optional[Dict[int, MpsControl]] = None) -> None:
        super().__init__()
        self.inventory = inventory
        # what is handed out, by key: whole GPUs (key = minor) and MIG devices (mig.py)
        self.gpus: Dict[int, Gpu] = {g.key: g for g in managed}
        # the physical GPUs behind them, by minor: health and faults are theirs
        self.physical: Dict[int, Gpu] = {g.minor: g for g in inventory.gpus
                                         if any(u.minor == g.minor for u in managed)}
        # the GPU minors the kernel's rules name (a MIG device's parent node is shared by
        # its siblings: recovery and drift checks read whole GPUs' rules only)
        self.kernel_minors: List[int] = sorted(g.minor for g in managed if g.key == g.minor)
        self.shares = shares or SharePlan({})     # the shared GPUs (plan.py)
        self.mps: Dict[int, MpsControl] = mps or {}   # minor -> its MPS control daemon
        # whole GPUs and MIG devices: a shared GPU is never handed out whole
        self.allocator = Allocator([g for g in managed
                                    if g.key != g.minor or g.minor not in self.shares.gpus],
                                   topology)
        self.ledger = ledger
        self.cgroups = cgroups
        self.dev_dir = dev_dir
        self.docker = docker
        self.volume = Volume(**volume) if volume else None
        self.nvml_library = nvml_library
        self.prepare_timeout = prepare_timeout
        self.holdings: Dict[str, Holding] = {}
        self.lock = threading.RLock()
        self._granted = {g.key: GrantedGpu.of(g) for g in managed}
        self._control_read: Tuple[float, List[devices.DeviceNode]] = (0.0, [])
        self.counters: Counter = Counter()        # releases by reason, drift repairs, ...
        self.withdrawn: Dict[int, str] = {}       # key -> why: MIG devices gone from NVML
        self._owner_listeners: List[Callable[[Owner], None]] = []
        self.health = health                      # None: every GPU counts as healthy
        self.monitor = None                       # the GpuHealthMonitor, when one runs
        self._compact_failed = False
        self._unrecorded: set = set()            # releases the ledger refused, said once

    # --- start-up and shutdown -------------------------------------------------------------

    def recover(self) -> Report:
        """Load the ledger, check it against the kernel and Docker, write a new snapshot."""
        with self.lock:
            recorded = self.ledger.load()
            recovery = Recovery(self.cgroups, self.kernel_minors, self.device_rules, self.docker,
                                list(self.gpus.values()))
            self.holdings = self._record_recovery(recorded, recovery.run(recorded))
            self.shares.check_holdings(self.holdings.values(), self.gpus)
            for h in self.holdings.values():
                self.allocator.claim(m for m in h.whole_gpus if m in self.allocator.gpus)
            self._compact()
            log.info(recovery.report.summary(self.holdings))
            for h in self.holdings.values():
                self._watch(h.owner)
            return recovery.report

    def _record_recovery(self, recorded: Dict[str, Holding],
                         recovered: Dict[str, Holding]) -> Dict[str, Holding]:
        """What recovery changed, in the journal before anything is served (a snapshot
        may not fit on a full disk, a few records do): the daemon never serves from a
        state the ledger does not hold. A change the journal cannot take is not made:
        that container stays as recorded (its GPUs held), for the orphan sweep to settle
        once the disk takes it."""
        out = dict(recovered)
        kept = []
        changes = [(cid, None) for cid in recorded.keys() - recovered.keys()]
        changes += [(cid, h) for cid, h in recovered.items() if recorded.get(cid) != h]
        for cid, h in changes:
            try:
                if h is None:
                    self.ledger.remove(cid)
                else:
                    self.ledger.put(h)
            except LedgerUnwritable as e:      # recovery only keeps or changes records
                out[cid] = recorded[cid]
                kept.append(cid)
                error = e
        if kept:
            log.warning("recovery: %d container(s) kept as recorded (%s): the journal cannot "
                        "take what recovery decided for them; the orphan sweep settles them "
                        "once it can: %s", len(kept), ", ".join(sorted(kept)), error)
        return out

    def close(self) -> None:
        """A last snapshot (the journal emptied) when the daemon stops."""
        with self.lock:
            self._compact()
            self.ledger.close()

    def on_new_owner(self, listener: Callable[[Owner], None]) -> None:
        """Call `listener(owner)` for each owner that gains a container (the
        orphan sweep watches it, to notice its end at once)."""
        self._owner_listeners.append(listener)

    def _watch(self, owner: Optional[Owner]) -> None:
        if owner is not None:
            for listener in self._owner_listeners:
                listener(owner)

    # --- helpers ----------------------------------------------------------------------------

    def control_devices(self) -> List[devices.DeviceNode]:
        """The control devices, read again at most every CONTROL_TTL seconds
        (nvidia-uvm's major is dynamic: a module reload may change it)."""
        read_at, nodes = self._control_read
        now = time.monotonic()
        if now - read_at > CONTROL_TTL:
            nodes = devices.control_devices(self.dev_dir)
            self._control_read = (now, nodes)
        return list(nodes)

    def device_rules(self, keys) -> List[devices.Rule]:
        granted = [self.gpus.get(k) or Gpu(-1, k, "", "", 0, "", "") for k in keys
                   if k in self.gpus or k < 256]      # an unknown MIG key names no node
        return devices.container_rules(granted, self.control_devices())

    def holding(self, container_id: str) -> Holding:
        h = self.holdings.get(check_container_id(container_id))
        if h is None:
            raise NotFound(f"unknown container {container_id}: it was never prepared here, "
                           "or it was cleaned up")
        return h

    def _put(self, h: Holding) -> None:
        """Record, then change: a change the ledger cannot hold (LedgerUnwritable, a
        full or failing disk) is not made."""
        self.ledger.put(h)
        self.holdings[h.container_id] = h
        self._compact_if_large()

    def _drop(self, h: Holding) -> None:
        self.ledger.remove(h.container_id)
        del self.holdings[h.container_id]
        self.allocator.release(h.whole_gpus)
        self._compact_if_large()

    def unhealthy(self) -> Dict[int, str]:
        """key -> why, for each device not to be given: its GPU is not healthy (a fault
        of a GPU in MIG mode is a fault of every MIG device on it), or it is a MIG
        device gone from NVML (daemon/mig_watch.py)."""
        sick = self.health.not_healthy() if self.health is not None else {}
        out = {k: sick[g.minor] for k, g in self.gpus.items() if g.minor in sick}
        out.update(self.withdrawn)
        return out

    def withdraw(self, why: Dict[int, str]) -> List[int]:
        """Never give these devices again (a holder keeps what it has); returns the
        keys withdrawn now (not before)."""
        with self.lock:
            new = [k for k in why if k in self.gpus and k not in self.withdrawn]
            for k in new:
                self.withdrawn[k] = why[k]
            return new

    def holders(self) -> Dict[int, str]:
        """key -> the container holding it."""
        with self.lock:
            return {k: h.container_id for h in self.holdings.values() for k in h.gpus}

    def _compact_if_large(self) -> None:
        if self.ledger.needs_compaction():
            self._compact()

    def _compact(self) -> None:
        """A new snapshot; one that does not fit costs nothing (the journal has every
        change), it is said once and tried again at the next compaction."""
        try:
            self.ledger.compact(self.holdings)
        except OSError as e:
            if not self._compact_failed:
                log.warning("ledger %s: cannot write a new snapshot (%s); the journal %s "
                            "keeps every change meanwhile", self.ledger.path,
                            e.strerror or e, self.ledger.journal_path)
            self._compact_failed = True
            return
        if self._compact_failed:
            log.info("ledger %s: snapshot written again", self.ledger.path)
        self._compact_failed = False

    @staticmethod
    def _check_owner(h: Holding, caller: Owner, what: str) -> None:
        if h.owner is not None and (h.owner.pid, h.owner.start_time) != (caller.pid,
                                                                          caller.start_time):
            raise Forbidden(f"container {h.container_id} was prepared by "
                            f"{h.owner.describe()}; process {caller.pid} may not {what} it")

    def _grant(self, h: Holding, control: Optional[List[devices.DeviceNode]] = None) -> Grant:
        gpus = [self.gpus[m] for m in h.gpus if m in self.gpus]
        control = self.control_devices() if control is None else control
        nodes = control + devices.granted_nodes(gpus, self.dev_dir)
        uuids = ",".join(g.uuid for g in gpus)
        mig = any(g.key != g.minor for g in gpus)
        # CUDA enumerates the MIG devices a process may open by their MIG- UUIDs;
        # indices would depend on what else the container can see
        env = {"NVIDIA_VISIBLE_DEVICES": uuids or "void",
               "CUDA_VISIBLE_DEVICES": uuids if mig else
               ",".join(str(i) for i in range(len(gpus)))}
        share = self._granted_share(h) if h.share and gpus else None
        if share is not None and share.sharing == "mps":
            # the caps the control daemon enforces stand whatever these say; these ask
            # for the container's own share below them
            env.update({"CUDA_MPS_PIPE_DIRECTORY": share.pipe_dir,
                        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(share.thread_percentage),
                        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={size_text(share.memory_limit)}"})
        return Grant(
            container_id=h.container_id, container_type=h.container_type,
            gpus=tuple(self._granted[g.key] for g in gpus),
            devices=tuple(nodes), env=env,
            driver_version=self.inventory.driver_version,
            cuda_driver_version=self.inventory.cuda_driver_version,
            volume=self.volume if gpus else None,
            topology=self.allocator.topology.describe(list(h.whole_gpus)),
            share=share)

    def _granted_share(self, h: Holding) -> GrantedShare:
        minor = h.gpus[0]
        gpu = self.gpus[minor]
        shared = self.shares.gpus.get(minor)
        if h.sharing != "mps":
            return GrantedShare(h.share, h.sharing, gpu.index, minor,
                                isolated=shared.isolation if shared else "")
        control = self.mps.get(minor)
        return GrantedShare(h.share, h.sharing, gpu.index, minor,
                            client_limit=shared.max_share if shared else h.share,
                            thread_percentage=max(1, int(round(h.share * 100))),
                            memory_limit=memory_of(gpu, h.share),
                            pipe_dir=control.pipe_dir if control else "",
                            isolated=shared.isolation if shared else "")

    # --- operations -------------------------------------------------------------------------

    def prepare(self, request: PrepareRequest, caller: Owner) -> Grant:
        with self.lock:
            held = self.holdings.get(request.container_id)
            if held is not None:
                if (held.owner == caller and held.container_type == request.container_type
                        and (held.share == request.share.fraction if request.share
                             else not held.share and len(held.gpus) == request.gpus
                             and self._profile_of(held) == request.mig_profile)):
                    return self._grant(held)          # the same request again: a retry
                by = held.owner.describe() if held.owner else "an unknown process"
                raise Conflict(f"container {request.container_id} is already prepared "
                               f"(holding GPUs {list(held.gpus)}, by {by})")
            if request.share is not None:
                h = self._share_holding(request, caller)
            else:
                chosen = self.allocator.allocate(request.gpus, unhealthy=self.unhealthy(),
                                                 profile=request.mig_profile)
                h = Holding(request.container_id, request.container_type,
                            tuple(g.key for g in chosen), tuple(g.uuid for g in chosen),
                            "prepared", time.time(), caller, task=request.task)
            try:
                self._put(h)
            except LedgerUnwritable as e:
                self.allocator.release(h.whole_gpus)
                log.error("prepare of %s refused: %s", h.container_id, e)
                raise
            crashpoints.reached("prepare:after_ledger", h.container_id)
            log.info("prepared %s (%s) for %s: GPUs %s (%s)", h.container_id, h.container_type,
                     caller.describe(), list(h.gpus),
                     f"a {h.share:g} share, {h.sharing}" if h.share
                     else self.allocator.topology.describe(list(h.gpus)))
            self._watch(caller)
            return self._grant(h)

    def _share_holding(self, request: PrepareRequest, caller: Owner) -> Holding:
        """A share of a shared GPU: the GPU the offer named (or the fullest that fits),
        refused by name when it is not a multiple of the granularity, above the MPS
        cap, on an unhealthy GPU or more than is left."""
        shared, _ = self.shares.choose(request.share, self.holdings.values(),
                                       self.unhealthy())
        minor = shared.gpu.minor
        if shared.sharing == "mps":
            control = self.mps.get(minor)
            if control is None or not control.alive():
                raise Unavailable(f"GPU {shared.gpu.index}'s MPS control daemon is not "
                                  "running (it is being restarted); try again")
        return Holding(request.container_id, request.container_type, (minor,),
                       (shared.gpu.uuid,), "prepared", time.time(), caller,
                       task=request.task, share=request.share.fraction,
                       sharing=shared.sharing)

    def isolate(self, request: IsolateRequest, caller: Owner) -> Grant:
        if request.docker_id is not None:
            self._check_docker_label(request.container_id, request.docker_id)   # no lock held
        with self.lock:
            h = self.holding(request.container_id)
            self._check_owner(h, caller, "isolate")
            if h.state == "isolated":
                if ((request.pid is not None and h.placed and h.placed.pid == request.pid)
                        or (request.docker_id is not None and h.docker_id == request.docker_id)):
                    return self._grant(h)             # the same request again: a retry
                if request.pid is not None and h.placed is None and h.container_type == MESOS:
                    return self._grant(self._placed_before_crash(h, request.pid, caller))
                raise Conflict(f"container {h.container_id} is already isolated")
            if h.container_type == DOCKER:
                if request.docker_id is None:
                    raise BadRequest(f"container {h.container_id} is a DOCKER container: "
                                     "isolate it by 'docker_id'")
                log.info("isolated %s: Docker container %s, GPUs %s", h.container_id,
                         request.docker_id[:12], list(h.gpus))
                h = replace(h, state="isolated", docker_id=request.docker_id)
            else:
                if request.pid is None:
                    raise BadRequest(f"container {h.container_id} is a MESOS container: "
                                     "isolate it by 'pid'")
                h = mesos_cgroups.enter_new(self.cgroups, h, request.pid, caller,
                                           self.device_rules(h.gpus))
            try:
                self._put(h)   # recovery must know it was isolated: see cleanup
            except LedgerUnwritable as e:
                mesos_cgroups.undo_move(self.cgroups, h)
                log.error("isolate of %s refused: %s", h.container_id, e)
                raise
            return self._grant(h)

    def _placed_before_crash(self, h: Holding, pid: int, caller: Owner) -> Holding:
        """The same isolate again, after a crash between the move and its record:
        recovery found the process in the cgroups and recorded them without it."""
        h = mesos_cgroups.enter_again(self.cgroups, h, pid, caller)
        try:
            self._put(h)
        except LedgerUnwritable as e:
            log.error("isolate of %s refused: %s", h.container_id, e)
            raise
        log.info("isolated %s: pid %d was moved in before a crash; recorded", h.container_id,
                 pid)
        return h

    def _check_docker_label(self, container_id: str, docker_id: str) -> None:
        """The Docker container must carry our label with this container id. Asked of the
        engine before the isolator's lock is taken: the engine may be slow."""
        if self.docker is None:
            return
        try:
            label = self.docker.label_of(docker_id)
        except KeyError:
            raise BadRequest(f"docker_id {docker_id}: no such Docker container") from None
        except DockerUnavailable as e:
            raise Unavailable(str(e)) from None
        if label != container_id:
            raise BadRequest(f"docker_id {docker_id}: its label mesos-gpu.container-id is "
                             f"{label!r}, not {container_id!r}")

    def update(self, request: UpdateRequest, caller: Owner) -> Grant:
        with self.lock:
            h = self.holding(request.container_id)
            self._check_owner(h, caller, "update")
            if h.container_type == DOCKER and h.state == "isolated":
                raise Conflict(f"container {h.container_id}: Docker cannot add or remove "
                               "devices of a running container; restart the task with the "
                               "new count")
            if h.share:
                raise Conflict(f"container {h.container_id} holds a {h.share:g} share of GPU "
                               f"minor {h.gpus[0]}: a share is not resized; restart the task "
                               "with the new request")
            held = list(h.gpus)
            if h.state == "isolated" and not self.cgroups.existing(h.cgroups):
                raise Gone(f"container {h.container_id}: its cgroup "
                           f"{', '.join(h.cgroups.values())} vanished; the container is "
                           "gone, call cleanup")
            if request.gpus > len(held):
                h = self._grow(h, request.gpus - len(held))
            elif request.gpus < len(held):
                h = self._shrink(h, request.gpus)
            return self._grant(h)

    def _profile_of(self, h: Holding) -> str:
        """The MIG profile of a holding's devices ("" for whole GPUs)."""
        return next((getattr(self.gpus[k], "profile", "") for k in h.gpus if k in self.gpus), "")

    def _grow(self, h: Holding, more: int) -> Holding:
        added = self.allocator.allocate(more, held=h.gpus, unhealthy=self.unhealthy(),
                                        profile=self._profile_of(h))
        new = replace(h, gpus=h.gpus + tuple(g.key for g in added),
                      uuids=h.uuids + tuple(g.uuid for g in added))
        try:
            self._put(new)
        except LedgerUnwritable as e:
            self.allocator.release(g.key for g in added)
            log.error("update of %s refused: %s", h.container_id, e)
            raise
        crashpoints.reached("update:after_ledger", h.container_id)
        try:
            if h.state == "isolated":
                self.cgroups.apply(h.cgroups, self.device_rules(new.gpus))
        except CgroupVanished as e:
            try:
                self._put(h)
                self.allocator.release(g.key for g in added)
            except LedgerUnwritable:    # the added GPUs stay the container's until cleanup
                pass
            raise Gone(f"container {h.container_id}: its cgroup {e} vanished; "
                       "the container is gone, call cleanup") from None
        crashpoints.reached("update:after_kernel", h.container_id)
        log.info("updated %s: GPUs %s -> %s", h.container_id, list(h.gpus), list(new.gpus))
        return new

    def _shrink(self, h: Holding, count: int) -> Holding:
        keep = set(self.allocator.keep([m for m in h.gpus if m in self.gpus], count))
        keep |= {m for m in h.gpus if m not in self.gpus}
        gpus = tuple(m for m in h.gpus if m in keep)
        new = replace(h, gpus=gpus, uuids=tuple(u for m, u in zip(h.gpus, h.uuids) if m in keep))
        if h.state == "isolated":
            try:
                self.cgroups.apply(h.cgroups, self.device_rules(gpus))
            except CgroupVanished as e:
                raise Gone(f"container {h.container_id}: its cgroup {e} vanished; "
                           "the container is gone, call cleanup") from None
        crashpoints.reached("update:after_kernel", h.container_id)
        try:           # the kernel allows less already: the safe side, until it is recorded
            self._put(new)
        except LedgerUnwritable as e:
            log.error("update of %s refused: %s", h.container_id, e)
            raise
        self.allocator.release(m for m in h.gpus if m not in keep)
        log.info("updated %s: GPUs %s -> %s", h.container_id, list(h.gpus), list(gpus))
        return new

    def cleanup(self, request: CleanupRequest) -> Cleanup:
        """The container's end, as its owner (or an operator) reports it: its cgroups
        emptied and removed, its GPUs back. A Docker container is the caller's to
        remove (the orphan sweep removes one whose owner is gone)."""
        with self.lock:
            # stopped for a GPU fault: said even when the owner's cleanup overtakes the
            # stop (a Docker container is removed outside the lock)
            stop = self.health.stop_of(request.container_id) if self.health else None
            stopped = GpuFaultStop(stop.message, stop.uuids, stop.xid) if stop else None
            if stopped is not None and request.container_id not in self.holdings:
                return Cleanup(request.container_id, stopped=stopped)
            h = self.holding(request.container_id)
            killed = mesos_cgroups.remove(self.cgroups, h)
            crashpoints.reached("cleanup:after_kernel", h.container_id)
            try:
                self._drop(h)
            except LedgerUnwritable as e:
                log.error("cleanup of %s: its GPUs %s stay held until the cleanup is "
                          "recorded: %s", h.container_id, list(h.gpus), e)
                raise LedgerUnwritable(f"container {h.container_id} is stopped, its GPUs "
                                       f"stay held until it can be recorded: {e}; ask the "
                                       "cleanup again") from None
            if killed:
                log.info("cleanup of %s killed %d leftover process(es)", h.container_id,
                         len(killed))
            log.info("cleaned up %s: GPUs %s back to the pool", h.container_id, list(h.gpus))
            return Cleanup(h.container_id, h.gpus, tuple(killed), stopped)

    def release(self, h: Holding, reason: str, why: str, stop: bool = True) -> bool:
        """Give back the GPUs of a container nobody holds any more (`reason` is a short
        code counted in the metrics, `why` the sentence logged) and, with `stop`, stop the
        container too; False when the holding changed meanwhile (its owner cleaned it up,
        say) and nothing was done. A Docker container is removed without the isolator's lock
        (the engine may be slow); its GPUs stay held until it is gone."""
        with self.lock:
            if self.holdings.get(h.container_id) is not h:
                return False
        if stop and h.container_type == DOCKER and self.docker is not None:
            try:
                self.docker.remove(h.container_id, h.docker_id)
            except DockerUnavailable as e:
                log.warning("container %s: %s; its GPUs stay held until Docker answers",
                            h.container_id, e)
                return False
        with self.lock:
            if self.holdings.get(h.container_id) is not h:
                return False
            killed = mesos_cgroups.remove(self.cgroups, h) if stop else []
            crashpoints.reached("release:after_stop", h.container_id)
            try:
                self._drop(h)
            except LedgerUnwritable as e:       # the next sweep tries again
                if h.container_id not in self._unrecorded:
                    log.warning("container %s: its release cannot be recorded yet (tried "
                                "again each pass): %s", h.container_id, e)
                self._unrecorded.add(h.container_id)
                return False
            self._unrecorded.discard(h.container_id)
            self.counters[f"released_{reason}"] += 1
        log.warning("container %s released GPUs %s: %s%s", h.container_id, list(h.gpus), why,
                    f" ({len(killed)} process(es) killed)" if killed else "")
        return True

    def adopt(self, h: Holding, docker_id: str) -> None:
        """A DOCKER container prepared, never isolated, that does run: record it isolated
        (its executor died between `docker run` and isolate, or the answer was lost)."""
        with self.lock:
            if self.holdings.get(h.container_id) is h:
                try:
                    self._put(replace(h, state="isolated", docker_id=docker_id))
                except LedgerUnwritable as e:   # the next sweep tries again
                    log.warning("container %s: cannot record it as isolated yet: %s",
                                h.container_id, e)
                    return
                log.info("container %s: its Docker container %s runs: recorded as isolated",
                         h.container_id, docker_id[:12])
