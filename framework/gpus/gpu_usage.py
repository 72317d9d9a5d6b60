"""A task's GPU usage, as its executor reports it in its status updates' `data`.

The contract between the executor (framework/executor/usage_reporter.py) and the
scheduler: TaskStatus.data is the JSON of `{"gpuUsage": TaskGpuUsage}`. The
scheduler keeps the last one on the task's record; the Marathon task JSON shows
it as `gpuUsage` (with `?gpus=true`, like `gpuUuids`).

Memory and SM utilisation are the task's own processes' (NVML per-process
figures, mapped to the container by the processes' cgroups: the agent daemon's
/v1/usage); `peakMemoryUsedBytes` is the most the task was seen using.
"""
import base64
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Tuple

from isolator.api import Usage

DATA_KEY = "gpuUsage"
INTERVAL_ENV = "MESOS_GPU_USAGE_INTERVAL"     # the executor's sampling interval, seconds


@dataclass(frozen=True)
class GpuUsageSample:
    uuid: str
    memory_used: int                  # bytes, the task's processes
    memory_total: int
    utilization: Optional[int] = None # percent, SM utilisation of the task's processes

    def to_json(self) -> dict:
        return {"uuid": self.uuid, "memoryUsedBytes": self.memory_used,
                "memoryTotalBytes": self.memory_total, "utilizationPercent": self.utilization}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "GpuUsageSample":
        return cls(d["uuid"], int(d["memoryUsedBytes"]), int(d["memoryTotalBytes"]),
                   d.get("utilizationPercent"))


@dataclass(frozen=True)
class TaskGpuUsage:
    memory_used: int
    memory_total: int
    peak_memory_used: int
    utilization: Optional[int]        # mean over its GPUs
    sampled_at: float
    gpus: Tuple[GpuUsageSample, ...] = field(default_factory=tuple)

    @classmethod
    def of(cls, usage: Usage, peak: int, at: float) -> "TaskGpuUsage":
        gpus = tuple(GpuUsageSample(g.uuid, g.task_memory_used, g.memory_total,
                                    g.task_sm_utilization) for g in usage.gpus)
        known = [g.utilization for g in gpus if g.utilization is not None]
        used = sum(g.memory_used for g in gpus)
        return cls(used, sum(g.memory_total for g in gpus), max(peak, used),
                   round(sum(known) / len(known)) if known else None, at, gpus)

    @property
    def in_use(self) -> bool:
        return self.memory_used > 0 or bool(self.utilization)

    def differs(self, other: Optional["TaskGpuUsage"], memory_share: float = 0.05,
                utilization_points: int = 10) -> bool:
        """Worth another status update: memory moved by more than `memory_share` of the
        GPUs' memory, or utilisation by `utilization_points`."""
        if other is None:
            return True
        if abs(self.memory_used - other.memory_used) > memory_share * max(1, self.memory_total):
            return True
        a, b = self.utilization, other.utilization
        return (a is None) != (b is None) or (a is not None and abs(a - b) >= utilization_points)

    def to_json(self) -> dict:
        return {"memoryUsedBytes": self.memory_used, "memoryTotalBytes": self.memory_total,
                "peakMemoryUsedBytes": self.peak_memory_used,
                "utilizationPercent": self.utilization, "sampledAt": self.sampled_at,
                "gpus": [g.to_json() for g in self.gpus]}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "TaskGpuUsage":
        return cls(int(doc["memoryUsedBytes"]), int(doc["memoryTotalBytes"]),
                   int(doc.get("peakMemoryUsedBytes", doc["memoryUsedBytes"])),
                   doc.get("utilizationPercent"), float(doc.get("sampledAt", 0.0)),
                   tuple(GpuUsageSample.from_json(g) for g in doc.get("gpus") or ()))


def status_data(usage: TaskGpuUsage) -> str:
    """TaskStatus.data (base64, as the v1 JSON API carries bytes)."""
    return base64.b64encode(json.dumps({DATA_KEY: usage.to_json()}).encode()).decode()


def from_status(status: Mapping[str, Any]) -> Optional[TaskGpuUsage]:
    """The usage a status update carries; None when it carries none (or not ours)."""
    data = status.get("data")
    if not data:
        return None
    try:
        doc = json.loads(base64.b64decode(data))
        return TaskGpuUsage.from_json(doc[DATA_KEY]) if isinstance(doc, dict) \
            and DATA_KEY in doc else None
    except (ValueError, KeyError, TypeError):
        return None
