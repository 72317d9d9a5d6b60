"""The daemon's figures in Prometheus text format (GET /metrics, on the unix socket and
on --metrics_address).

Allocation (GPUs and containers), releases and drift repairs, ledger writes and
API latency here; per-GPU figures in DCGM exporter's names, GPU health and
per-task GPU usage in gpu_metrics.py.
"""
import threading
from typing import TYPE_CHECKING, Dict, List, Optional

from isolator.metrics import gpu_metrics
from isolator.metrics.exposition import Text

if TYPE_CHECKING:
    from isolator.containers.isolator import GpuIsolator

# seconds; an API call normally takes well under a millisecond
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)


class Histograms:
    """Latency of each API route, as Prometheus histograms (cumulative buckets)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: Dict[str, List[float]] = {}      # route -> bucket counts + [sum, count]

    def observe(self, route: str, seconds: float) -> None:
        with self._lock:
            row = self._data.setdefault(route, [0.0] * (len(BUCKETS) + 2))
            for i, bound in enumerate(BUCKETS):
                if seconds <= bound:
                    row[i] += 1
            row[-2] += seconds
            row[-1] += 1

    def samples(self):
        with self._lock:
            rows = {route: list(row) for route, row in self._data.items()}
        for route, row in sorted(rows.items()):
            for bound, count in zip(BUCKETS, row):
                yield "_bucket", {"route": route, "le": repr(bound)}, int(count)
            yield "_bucket", {"route": route, "le": "+Inf"}, int(row[-1])
            yield "_sum", {"route": route}, row[-2]
            yield "_count", {"route": route}, int(row[-1])


def render(isolator: "GpuIsolator", latency: Optional[Histograms] = None) -> str:
    info = isolator.info()
    out = Text()
    allocation(out, info)
    gpu_metrics.write(out, isolator)
    if latency is not None:
        out.family("mesos_gpu_api_request_seconds", "histogram",
                   "Time to answer an agent API request, by route.", (),
                   latency.samples())
    return out.render()


def allocation(out: Text, info: Dict) -> None:
    """From GpuIsolator.info(): GPUs total / allocated / free, and per container."""
    gpus = {g["minor"]: g for g in info["inventory"]["gpus"]}
    out.family("mesos_gpu_gpus_total", "gauge", "GPUs this agent manages.",
               [({}, len(info["managed"]))])
    out.family("mesos_gpu_gpus_allocated", "gauge", "Managed GPUs held by a container.",
               [({}, len(info["allocated"]))])
    out.family("mesos_gpu_gpus_free", "gauge", "Managed GPUs free to allocate.",
               [({}, len(info["free"]))])
    containers = info["containers"]
    out.family("mesos_gpu_containers", "gauge", "Containers holding an allocation.",
               [({}, len(containers))])
    out.family("mesos_gpu_container_gpus", "gauge", "GPUs held by each container.",
               [({"container_id": cid, "container_type": c["container_type"],
                  "state": c["state"]}, len(c["gpus"]))
                for cid, c in sorted(containers.items())])
    owner = {m: cid for cid, c in containers.items() for m in c["gpus"]}
    out.family("mesos_gpu_gpu_allocated", "gauge",
               "1 when the GPU is held by a container (labelled), else 0.",
               [({"minor": m, "uuid": gpus.get(m, {}).get("uuid", ""),
                  "container_id": owner.get(m, "")}, int(m in owner))
                for m in info["managed"]])
    counters = info.get("counters", {})
    out.family("mesos_gpu_containers_released_total", "counter",
               "Containers whose GPUs the daemon took back itself, by reason.",
               [({"reason": k[len("released_"):]}, v) for k, v in sorted(counters.items())
                if k.startswith("released_")])
    out.family("mesos_gpu_device_rule_repairs_total", "counter",
               "Device rules found drifted from the ledger and restored, by where.",
               [({"where": k[len("drift_repairs_"):]}, v) for k, v in sorted(counters.items())
                if k.startswith("drift_repairs_")])
    out.family("mesos_gpu_ledger_writes_total", "counter", "Changes appended to the ledger.",
               [({}, info.get("ledger", {}).get("writes", 0))])
