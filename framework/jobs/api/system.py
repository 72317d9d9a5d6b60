"""`/v1/ping`, `/info` and `/v1/info`, `/leader` and `/v1/leader`, `/v1/queue` (runs waiting to start, with why)
and `/v1/metrics` (run counts by state, gang wait)."""
from typing import Any, Callable

from framework.jobs.core.job_service import JobService
from framework.http.routing import Request, Response, Router
from framework.http.validation import message

VERSION = "0.6.0-mesos-gpu"


def register(router: Router, service: JobService, info: Callable[[], dict], metrics: Any,
             leadership: Any) -> None:
    s = SystemResource(service, info, metrics, leadership)
    router.add(r"/v1/ping", GET=s.ping)       # Metronome's own are at /ping (Marathon's,
    router.add(r"/(?:v1/)?info", GET=s.info)  # the same answer), /info and /leader
    router.add(r"/(?:v1/)?leader", GET=s.leader)
    router.add(r"/v1/queue", GET=s.queue)
    router.add(r"/v1/metrics", GET=s.metrics)


class SystemResource:
    def __init__(self, service: JobService, info: Callable[[], dict], metrics: Any,
                 leadership: Any) -> None:
        self.service, self._info, self._metrics, self.leadership = (service, info, metrics,
                                                                    leadership)

    def ping(self, r: Request) -> Response:
        return Response(200, "pong\n")

    def info(self, r: Request) -> Response:
        marathon = self._info()
        return Response(200, {"version": VERSION, "libVersion": marathon.get("version"),
                              "config": {"master": marathon["marathon_config"]["master"],
                                         "framework_name":
                                             marathon["marathon_config"]["framework_name"],
                                         "gang_hold_seconds": _hold_seconds()}})

    def leader(self, r: Request) -> Response:
        leader = self.leadership.leader()
        if leader is None:
            raise message(404, "There is no leader")
        return Response(200, {"leader": leader})

    def queue(self, r: Request) -> Response:
        waiting: dict = {}
        for run in self.service.all_runs():
            if run.status == "STARTING":
                waiting.setdefault(run.job_id, []).append({"runId": run.id,
                                                          "reason": run.reason})
        return Response(200, [{"jobId": j, "runs": runs} for j, runs in waiting.items()])

    def metrics(self, r: Request) -> Response:
        return Response(200, self._metrics.json())


def _hold_seconds() -> float:
    from framework.scheduling.gang_placement import HOLD_SECONDS
    return HOLD_SECONDS
