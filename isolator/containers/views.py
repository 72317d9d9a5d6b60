"""What the GPU isolator shows and never changes: a container's GPU usage, the
node's GPU health, and `info` (holdings, free GPUs, shares, counters).

A base of GpuIsolator (isolator.py): these read its state under its lock, so
they stay beside the lifecycle without being part of it."""
import threading
from typing import Dict

from isolator.allocation import process_containers
from isolator.allocation.ledger import Holding
from isolator.api import GpuHealth, GpuUsage, NodeHealth, ProcessUsage, Usage
from isolator.discovery import nvml
from isolator.discovery.gpu import Gpu
from isolator.errors import Unavailable
from isolator.gpu_health import nvml_health
from isolator.gpu_health.book import UNHEALTHY

USAGE_SLOTS = 4           # usage requests in NVML at once: half the API server's workers


class IsolatorViews:
    """Read-only views over a GpuIsolator's state (its lock, holdings, GPUs, health
    book and monitor, shares and MPS control daemons)."""

    def __init__(self) -> None:
        self._usage_slots = threading.BoundedSemaphore(USAGE_SLOTS)

    def usage(self, container_id: str) -> Usage:
        """The container's GPUs now: the whole GPU's figures (a MIG device's own memory and
        processes: nvml_health.sample_mig), and its own processes'."""
        with self.lock:
            h = self.holding(container_id)
            gpus = [self.gpus[m] for m in h.gpus if m in self.gpus]
        samples = {}
        if gpus:
            # NVML may hang (a driver in trouble): a few usage requests wait on it, the
            # next are refused at once, so the workers stay free for the other routes
            if not self._usage_slots.acquire(blocking=False):
                raise Unavailable(f"NVML: {USAGE_SLOTS} usage requests are still waiting on "
                                  f"NVML calls; try later")
            try:
                if self.monitor is not None and self.monitor.holds_nvml:
                    # NVML is initialised for the daemon's life: no session, whose lock
                    # would make each usage wait on another's stuck call
                    samples = {g.key: nvml_health.sample_unit(g) for g in gpus}
                else:
                    with nvml.session(self.nvml_library):
                        samples = {g.key: nvml_health.sample_unit(g) for g in gpus}
            except nvml.NvmlUnavailable as e:
                raise Unavailable(f"NVML: {e}") from None
            finally:
                self._usage_slots.release()
        return Usage(h.container_id, tuple(gpu_usage(g, samples[g.key], h) for g in gpus))

    def health_report(self) -> NodeHealth:
        if self.health is None:
            return NodeHealth((), "off")
        with self.lock:
            holder: Dict[int, str] = {}
            for cid, h in sorted(self.holdings.items()):
                for minor in sorted({self.gpus[k].minor for k in h.gpus if k in self.gpus}):
                    holder[minor] = ",".join(filter(None, (holder.get(minor), cid)))
        snapshot = self.monitor.snapshot() if self.monitor is not None else {}
        gpus = []
        for s in self.health.all():
            g = self.physical[s.minor]
            gpus.append(GpuHealth(
                minor=s.minor, index=g.index, uuid=g.uuid, name=g.name, state=s.state,
                since=s.since, reason=s.reason, cause=s.cause, xid=s.xid,
                self_check_at=s.quiet_until if s.state == UNHEALTHY else None,
                container_id=holder.get(s.minor, ""), shared=s.minor in self.shares.gpus))
        return NodeHealth(tuple(gpus), snapshot.get("status", "not monitored"),
                          snapshot.get("sampled_at", 0.0))

    def info(self) -> Dict:
        with self.lock:
            return {"inventory": self.inventory.to_json(),
                    "managed": sorted(self.gpus),
                    "withdrawn": {str(k): why for k, why in sorted(self.withdrawn.items())},
                    "mig_devices": {str(k): {"uuid": g.uuid, "parent_uuid": g.parent_uuid,
                                             "profile": g.profile}
                                    for k, g in self.gpus.items() if k != g.minor},
                    "free": sorted(self.allocator.available),
                    "allocated": sorted(self.allocator.allocated),
                    "cgroups": {"host": self.cgroups.host.to_json(),
                                "versions": self.cgroups.versions, "root": self.cgroups.root},
                    "control_devices": [n.to_json() for n in self.control_devices()],
                    "volume": {"name": self.volume.name, "path": self.volume.path}
                    if self.volume else None,
                    "ledger": {"path": self.ledger.path, "journal": self.ledger.journal_path,
                               "writes": self.ledger.writes},
                    "counters": dict(self.counters),
                    "unhealthy": {str(m): why for m, why in self.unhealthy().items()},
                    "containers": {cid: h.to_json() for cid, h in self.holdings.items()},
                    "shared": self.shared_info()}

    def shared_info(self) -> Dict:
        """Each shared GPU: how, its slots, who holds what, its MPS control daemon."""
        used = self.shares.used_slots(self.holdings.values())
        out = {}
        for minor, s in sorted(self.shares.gpus.items()):
            tenants = {cid: h.share for cid, h in self.holdings.items()
                       if h.share and h.gpus[0] == minor}
            out[str(s.gpu.index)] = {
                "minor": minor, "uuid": s.gpu.uuid, "sharing": s.sharing,
                "granularity": s.granularity, "max_share": s.max_share,
                "slots": s.slots, "free_slots": s.slots - used[minor],
                "free": round((s.slots - used[minor]) * s.granularity, 6),
                "tenants": tenants, "isolation": s.isolation,
                "mps_control": self.mps[minor].to_json() if minor in self.mps else None}
        return out


def gpu_usage(g: Gpu, sample: nvml_health.DeviceSample, h: Holding) -> GpuUsage:
    """One GPU of a container: the GPU's figures, and those of the container's processes."""
    mine = process_containers.of_processes([p.pid for p in sample.processes], h)
    processes = tuple(ProcessUsage(p.pid, p.memory_used, p.sm_utilization, mine[p.pid])
                      for p in sample.processes)
    own = [p for p in processes if p.in_container]
    return GpuUsage(minor=g.minor, uuid=g.uuid, index=g.index,
                    memory_used=sample.memory_used or 0,
                    memory_total=sample.memory_total or g.memory_total,
                    gpu_utilization=sample.gpu_utilization,
                    memory_utilization=sample.memory_utilization,
                    task_memory_used=sum(p.memory_used for p in own),
                    task_sm_utilization=process_containers.task_sm_utilization(
                        [p.sm_utilization for p in own], len(own), g.key != g.minor, h),
                    processes=processes)
