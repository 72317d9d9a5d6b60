"""The scheduler's series in the framework's /metrics (framework/http/metrics.py
serves them, as Marathon's JSON or as Prometheus text): tasks by state, offers,
launches and their duration, health-check results, GPU health. Names in
Marathon's manner under `mesos_gpu.`; the list: ARCHITECTURE.md, "Metrics of the
framework".
"""
import threading
import time
from typing import Any, Callable, Dict, Mapping, Optional

from framework.tasks import taskinfo
from framework.http.metrics import Metrics
from framework.scheduling.task_record import PENDING, RUNNING, STAGING, TaskRecord

STATES = (PENDING, "TASK_STAGING", "TASK_STARTING", "TASK_RUNNING", "TASK_KILLING",
          "TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST",
          "TASK_DROPPED", "TASK_UNREACHABLE", "TASK_GONE", "TASK_GONE_BY_OPERATOR",
          "TASK_UNKNOWN")
PREFIX = "mesos_gpu"


def state_name(state: str) -> str:
    return state.lower().removeprefix("task_")


def count_health_check(metrics: Metrics, healthy: bool) -> None:
    """One health-check result, whoever ran the check."""
    result = "healthy" if healthy else "unhealthy"
    metrics.count(f"{PREFIX}.tasks.health_checks.{result}.counter")


class LaunchClock:
    """Launch-to-running time of each launch attempt (by its Mesos task id)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.lock = threading.Lock()
        self.staged: Dict[str, float] = {}

    def update(self, record: TaskRecord) -> None:
        with self.lock:
            if record.state == STAGING and record.mesos_task_id not in self.staged:
                self.staged[record.mesos_task_id] = time.monotonic()
                self.metrics.count(f"{PREFIX}.tasks.launched.counter")
            elif record.state == RUNNING and record.mesos_task_id in self.staged:
                began = self.staged.pop(record.mesos_task_id)
                self.metrics.time(f"{PREFIX}.tasks.launch.duration.timer.seconds",
                                  time.monotonic() - began)
            elif record.terminal:
                self.staged.pop(record.mesos_task_id, None)

    def status(self, status: Mapping[str, Any]) -> None:
        if "healthy" in status:
            count_health_check(self.metrics, bool(status["healthy"]))
        labels = (status.get("labels") or {}).get("labels", [])
        if any(label.get("key") == taskinfo.GPU_FAULT_LABEL for label in labels):
            self.metrics.count(f"{PREFIX}.tasks.gpu_faults.counter")


def register(metrics: Metrics, scheduler: Any,
             current: Optional[Callable[[], Any]] = None) -> None:
    """The scheduler's gauges and counters (a scheduler stand-in without them: none).
    `current()` gives the scheduler in charge now: while it is not this one (an
    instance that stepped down), the gauges read 0 instead of what this one last
    knew; the counters go on."""
    if not hasattr(scheduler, "on_update"):
        return

    def in_charge() -> bool:
        return current is None or current() is scheduler

    counted = {"at": -1.0, "counts": {}}

    def by_state() -> Dict[str, int]:
        """Counted once for all the state gauges of one read of the metrics."""
        if not in_charge():
            return {}
        if time.monotonic() - counted["at"] > 0.5:
            counts = dict.fromkeys(STATES, 0)
            for record in scheduler.tasks():
                counts[record.state] = counts.get(record.state, 0) + 1
            counted["at"], counted["counts"] = time.monotonic(), counts
        return counted["counts"]

    def gauge(name: str, read: Callable[[], float]) -> None:
        metrics.gauge(name, lambda: read() if in_charge() else 0)

    for state in STATES:
        metrics.gauge(f"{PREFIX}.tasks.{state_name(state)}.gauge",
                      lambda state=state: by_state().get(state, 0))
    if hasattr(scheduler, "offers_seen"):
        gauge(f"{PREFIX}.offers.received.gauge", lambda: sum(scheduler.offers_seen().values()))
    clock = LaunchClock(metrics)
    for name in ("tasks.launched", "tasks.health_checks.healthy",
                 "tasks.health_checks.unhealthy", "tasks.gpu_faults"):
        metrics.count(f"{PREFIX}.{name}.counter", 0)        # listed from the start
    scheduler.on_update(clock.update)
    if hasattr(scheduler, "on_status"):
        scheduler.on_status(clock.status)
    view = getattr(scheduler, "gpu_health", None)
    if view is None:
        return
    gauge(f"{PREFIX}.agents.gpu_health.reporting.gauge",
          lambda: sum(1 for a in view.agents() if a.health and not a.error))
    gauge(f"{PREFIX}.agents.gpu_health.unreachable.gauge",
          lambda: sum(1 for a in view.agents() if a.error))
    gauge(f"{PREFIX}.gpus.unhealthy.gauge", lambda: sum(
        1 for a in view.agents() if a.health for g in a.health.gpus if not g.healthy))
    gauge(f"{PREFIX}.gpus.unusable.gauge", lambda: sum(view.unusable().values()))
