"""The agent-side module's operations: prepare, isolate, update, usage, cleanup, info.

One lock serialises every change, so concurrent executors never get the same
GPU. Order of effects, so that a crash anywhere is safe (see recovery.py):
- a container gains GPUs in the ledger (written, fsynced) before the kernel
  lets it open them, and before the answer;
- isolate is recorded before the answer too: recovery tells a container that
  is isolated and gone (release) from one not isolated yet (wait) by it;
- it loses them in the kernel first, then in the ledger (written within
  --ledger_flush_interval, or by the next durable write, whichever comes
  first): recovery releases an isolated container whose cgroup is gone.
"""
import logging
import os
import threading
import time
from dataclasses import replace
from typing import Dict, List, Optional, Sequence

from isolator import crashpoints, devices, nvml
from isolator.allocator import Allocator, check_count
from isolator.cgroup_paths import valid_container_id
from isolator.container_cgroups import CgroupVanished, ContainerCgroups
from isolator.docker_state import DockerState, DockerUnavailable
from isolator.errors import BadRequest, Conflict, Gone, NotFound, Unavailable
from isolator.gpu import Gpu, Inventory
from isolator.ledger import Holding, Ledger
from isolator.recovery import Recovery, Report
from isolator.topology import Topology

log = logging.getLogger("mesos-gpu.agent")
KINDS = ("cgroup", "docker")


class AgentService:
    def __init__(self, *, inventory: Inventory, managed: Sequence[Gpu], topology: Topology,
                 ledger: Ledger, cgroups: ContainerCgroups, dev_dir: str = "/dev",
                 docker: Optional[DockerState] = None, volume: Optional[Dict] = None,
                 nvml_library: Optional[str] = None, prepare_timeout: float = 600.0) -> None:
        self.inventory = inventory
        self.gpus: Dict[int, Gpu] = {g.minor: g for g in managed}
        self.allocator = Allocator(managed, topology)
        self.ledger = ledger
        self.cgroups = cgroups
        self.dev_dir = dev_dir
        self.docker = docker
        self.volume = volume
        self.nvml_library = nvml_library
        self.prepare_timeout = prepare_timeout
        self.holdings: Dict[str, Holding] = {}
        self.lock = threading.RLock()
        self._unsaved = False

    # --- start-up -------------------------------------------------------------

    def recover(self) -> Report:
        """Load the ledger, check it against the kernel and Docker, write it back."""
        with self.lock:
            recorded = self.ledger.load()
            recovery = Recovery(self.cgroups, list(self.gpus), self._rules, self.docker)
            self.holdings = recovery.run(recorded)
            for h in self.holdings.values():
                self.allocator.claim(m for m in h.gpus if m in self.gpus)
            self.ledger.write(self.holdings)
            self._unsaved = False
            log.info(recovery.report.summary(self.holdings))
            return recovery.report

    # --- helpers --------------------------------------------------------------

    def _control(self) -> List[devices.DeviceNode]:
        return devices.control_devices(self.dev_dir)

    def _rules(self, minors) -> List[devices.Rule]:
        granted = [self.gpus.get(m) or Gpu(-1, m, "", "", 0, "", "") for m in minors]
        return devices.container_rules(granted, self._control())

    @staticmethod
    def _check_id(container_id: object) -> str:
        if not valid_container_id(container_id):
            raise BadRequest(f"'container_id' must be 1-128 characters of A-Z a-z 0-9 _ . -, "
                             f"got {container_id!r}")
        return container_id

    def _get(self, container_id: object) -> Holding:
        h = self.holdings.get(self._check_id(container_id))
        if h is None:
            raise NotFound(f"unknown container {container_id}: it was never prepared here, "
                           "or it was cleaned up")
        return h

    def _save(self) -> None:
        """Durably, now (a container gains GPUs)."""
        self.ledger.write(self.holdings)
        self._unsaved = False

    def _save_soon(self) -> None:
        """Within --ledger_flush_interval (releases, isolate records)."""
        self._unsaved = True

    def flush(self) -> bool:
        with self.lock:
            if self._unsaved:
                self._save()
                return True
            return False

    def _answer(self, h: Holding, control: Optional[List[devices.DeviceNode]] = None) -> Dict:
        gpus = [self.gpus[m] for m in h.gpus if m in self.gpus]
        control = self._control() if control is None else control
        nodes = control + [devices.gpu_node(g, self.dev_dir) for g in gpus]
        uuids = ",".join(g.uuid for g in gpus)
        return {"container_id": h.container_id, "kind": h.kind,
                "gpus": [g.to_json() for g in gpus],
                "devices": [n.to_json() for n in nodes],
                "env": {"NVIDIA_VISIBLE_DEVICES": uuids or "void",
                        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(gpus)))},
                "driver_version": self.inventory.driver_version,
                "cuda_driver_version": self.inventory.cuda_driver_version,
                "volume": self.volume if gpus else None,
                "topology": self.allocator.topology.describe(list(h.gpus))}

    # --- operations -----------------------------------------------------------

    def prepare(self, container_id: object, gpus: object, kind: object = "cgroup") -> Dict:
        count = check_count(gpus)
        if kind not in KINDS:
            raise BadRequest(f"'kind' must be one of {', '.join(KINDS)}, got {kind!r}")
        self._check_id(container_id)
        with self.lock:
            if container_id in self.holdings:
                raise Conflict(f"container {container_id} is already prepared "
                               f"(holding GPUs {list(self.holdings[container_id].gpus)})")
            chosen = self.allocator.allocate(count)
            h = Holding(container_id, kind, tuple(g.minor for g in chosen),
                        tuple(g.uuid for g in chosen), "prepared", time.time())
            self.holdings[container_id] = h
            try:
                self._save()
            except OSError:
                del self.holdings[container_id]
                self.allocator.release(h.gpus)
                raise
            crashpoints.reached("prepare:after_ledger", container_id)
            log.info("prepared %s (%s): GPUs %s (%s)", container_id, kind, list(h.gpus),
                     self.allocator.topology.describe(list(h.gpus)))
            return self._answer(h)

    def isolate(self, container_id: object, pid: object = None,
                docker_id: object = None) -> Dict:
        with self.lock:
            h = self._get(container_id)
            if h.state == "isolated":
                raise Conflict(f"container {container_id} is already isolated")
            if h.kind == "docker":
                h = self._record_docker(h, docker_id)
            else:
                h = self._isolate_cgroup(h, pid)
            self.holdings[h.container_id] = h
            self._save()        # recovery must know it was isolated: see cleanup
            return self._answer(h)

    def _record_docker(self, h: Holding, docker_id: object) -> Holding:
        if not isinstance(docker_id, str) or not docker_id.isalnum():
            raise BadRequest(f"'docker_id' must be the Docker container's id, got {docker_id!r}")
        if self.docker is not None:
            try:
                label = self.docker.label_of(docker_id)
            except KeyError:
                raise BadRequest(f"docker_id {docker_id}: no such Docker container") from None
            except DockerUnavailable as e:
                raise Unavailable(str(e)) from None
            if label != h.container_id:
                raise BadRequest(f"docker_id {docker_id}: its label mesos-gpu.container-id is "
                                 f"{label!r}, not {h.container_id!r}")
        log.info("isolated %s: Docker container %s, GPUs %s", h.container_id, docker_id[:12],
                 list(h.gpus))
        return replace(h, state="isolated", docker_id=docker_id)

    def _isolate_cgroup(self, h: Holding, pid: object) -> Holding:
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise BadRequest(f"'pid' must be a positive integer, got {pid!r}")
        if not os.path.exists(f"/proc/{pid}"):
            raise BadRequest(f"pid {pid}: no such process")
        if self.cgroups.existing(self.cgroups.paths(h.container_id)):
            raise Conflict(f"container {h.container_id}: a cgroup of that name already exists")
        try:
            paths = self.cgroups.create(h.container_id, self._rules(h.gpus), pid)
        except ProcessLookupError:
            raise BadRequest(f"pid {pid}: the process exited before it could be isolated")
        except OSError as e:
            raise Conflict(f"container {h.container_id}: cannot create its cgroup: {e}")
        crashpoints.reached("isolate:after_move", h.container_id)
        log.info("isolated %s: pid %d in %s, GPUs %s", h.container_id, pid,
                 ", ".join(paths.values()), list(h.gpus))
        return replace(h, state="isolated", cgroups=paths, pid=pid)

    def update(self, container_id: object, gpus: object) -> Dict:
        count = check_count(gpus)
        with self.lock:
            h = self._get(container_id)
            if h.kind == "docker" and h.state == "isolated":
                raise Conflict(f"container {container_id}: Docker cannot add or remove devices "
                               "of a running container; restart the task with the new count")
            held = list(h.gpus)
            if h.state == "isolated" and not self.cgroups.existing(h.cgroups):
                raise Gone(f"container {container_id}: its cgroup {', '.join(h.cgroups.values())} "
                           "vanished; the container is gone, call cleanup")
            if count > len(held):
                h = self._grow(h, count - len(held))
            elif count < len(held):
                h = self._shrink(h, count)
            return self._answer(h)

    def _grow(self, h: Holding, more: int) -> Holding:
        added = self.allocator.allocate(more, held=h.gpus)
        new = replace(h, gpus=h.gpus + tuple(g.minor for g in added),
                      uuids=h.uuids + tuple(g.uuid for g in added))
        self.holdings[h.container_id] = new
        self._save()
        crashpoints.reached("update:after_ledger", h.container_id)
        try:
            if h.state == "isolated":
                self.cgroups.apply(h.cgroups, self._rules(new.gpus))
        except CgroupVanished as e:
            self.holdings[h.container_id] = h
            self.allocator.release(g.minor for g in added)
            self._save_soon()
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
                self.cgroups.apply(h.cgroups, self._rules(gpus))
            except CgroupVanished as e:
                raise Gone(f"container {h.container_id}: its cgroup {e} vanished; "
                           "the container is gone, call cleanup") from None
        crashpoints.reached("update:after_kernel", h.container_id)
        self.allocator.release(m for m in h.gpus if m not in keep)
        self.holdings[h.container_id] = new
        self._save()
        log.info("updated %s: GPUs %s -> %s", h.container_id, list(h.gpus), list(gpus))
        return new

    def cleanup(self, container_id: object) -> Dict:
        with self.lock:
            h = self._get(container_id)
            killed: List[int] = []
            if h.kind == "cgroup":
                killed = self.cgroups.remove({**self.cgroups.paths(h.container_id), **h.cgroups})
            crashpoints.reached("cleanup:after_kernel", h.container_id)
            self.allocator.release(h.gpus)
            del self.holdings[h.container_id]
            if h.state == "prepared":
                self._save()    # else recovery would wait for an isolate that never comes
            else:
                self._save_soon()   # an isolated container without cgroup/Docker
                                    # container is released by recovery anyway
            if killed:
                log.info("cleanup of %s killed %d leftover process(es)", container_id, len(killed))
            log.info("cleaned up %s: GPUs %s back to the pool", container_id, list(h.gpus))
            return {"container_id": h.container_id, "released": list(h.gpus), "killed": killed}

    def reap(self, now: Optional[float] = None) -> List[str]:
        """Containers prepared but never isolated within --prepare_timeout give
        their GPUs back (a Docker one is adopted instead if Docker runs it)."""
        now = time.time() if now is None else now
        with self.lock:
            late = [h for h in self.holdings.values()
                    if h.state == "prepared" and now - h.prepared_at > self.prepare_timeout]
            if not late:
                return []
            live = None
            if any(h.kind == "docker" for h in late) and self.docker is not None:
                try:
                    live = self.docker.live()
                except DockerUnavailable as e:
                    log.warning("reap: %s", e)
                    late = [h for h in late if h.kind != "docker"]
            reaped = []
            for h in late:
                if h.kind == "docker" and live and h.container_id in live:
                    self.holdings[h.container_id] = replace(
                        h, state="isolated", docker_id=live[h.container_id])
                    continue
                if h.kind == "cgroup" and self.cgroups.existing(
                        self.cgroups.paths(h.container_id)):
                    continue                  # being isolated right now
                self.allocator.release(h.gpus)
                del self.holdings[h.container_id]
                reaped.append(h.container_id)
                log.warning("container %s was prepared %.0f s ago and never isolated: "
                            "GPUs %s back to the pool", h.container_id, now - h.prepared_at,
                            list(h.gpus))
            self._save_soon()
            return reaped

    def usage(self, container_id: object) -> Dict:
        with self.lock:
            h = self._get(container_id)
            gpus = [self.gpus[m] for m in h.gpus if m in self.gpus]
            pids = set(self.cgroups.procs(h.cgroups) or ()) if h.kind == "cgroup" else set()
        try:
            figures = nvml.usage([g.index for g in gpus], self.nvml_library) if gpus else {}
        except nvml.NvmlUnavailable as e:
            raise Unavailable(f"NVML: {e}") from None
        per_gpu = []
        for g in gpus:
            f = figures[g.index]
            for p in f["processes"]:
                p["in_container"] = p["pid"] in pids if pids else None
            per_gpu.append({"minor": g.minor, "uuid": g.uuid, "index": g.index, **f})
        return {"container_id": h.container_id, "gpus": per_gpu,
                "memory_used": sum(f["memory_used"] for f in per_gpu),
                "memory_total": sum(f["memory_total"] for f in per_gpu)}

    def info(self) -> Dict:
        with self.lock:
            return {"inventory": self.inventory.to_json(),
                    "managed": sorted(self.gpus),
                    "free": sorted(self.allocator.available),
                    "allocated": sorted(self.allocator.allocated),
                    "cgroups": {"host": self.cgroups.host.to_json(),
                                "versions": self.cgroups.versions, "root": self.cgroups.root},
                    "control_devices": [n.to_json() for n in self._control()],
                    "volume": self.volume,
                    "ledger": self.ledger.path,
                    "containers": {cid: h.to_json() for cid, h in self.holdings.items()}}
