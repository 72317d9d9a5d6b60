"""Metronome's /v1 API, one module per resource path."""
from typing import Any, Callable

from framework.jobs.api import jobs, runs, schedules, system
from framework.jobs.core.job_service import JobService
from framework.http.routing import Router


def register(router: Router, service: JobService, info: Callable[[], dict], metrics: Any,
             leadership: Any) -> None:
    """Every /v1 route on the framework's router (one HTTP server, one authentication)."""
    jobs.register(router, service)
    runs.register(router, service)
    schedules.register(router, service)
    system.register(router, service, info, metrics, leadership)
    _metrics(metrics, service)


def _metrics(metrics: Any, service: JobService) -> None:
    """Run counts by state (gauges) and each gang's wait from its run's attempt start to
    all of its tasks launched (a timer)."""
    for status in ("STARTING", "ACTIVE", "SUCCESS", "FAILED"):
        metrics.gauge(f"metronome.runs.{status.lower()}.gauge",
                      lambda status=status: service.counts()[status])
    metrics.gauge("metronome.jobs.gauge", lambda: len(service.jobs))

    service.on_gang_wait = lambda seconds: metrics.time(
        "metronome.runs.gang-wait.timer.seconds", seconds)
