"""`/v1/jobs/{jobId}/runs`: start a run, list the active ones, read one (active or
among the last finished), stop one (`actions/stop`). A run's JSON is Metronome's
(id, jobId, status, createdAt, completedAt, tasks) plus, where strict clients do not
read, ours: attempt, instances, reason (why it waits, why it ended), ranks (each
task's rank, host, GPUs, state)."""
from framework.jobs.api.jobs import JOB_PATH, detail as _detail
from framework.jobs.core.job_service import JobService
from framework.http.routing import Request, Response, Router

RUN_PATH = JOB_PATH + r"/runs/(?P<run_id>[^/]+)"


def register(router: Router, service: JobService) -> None:
    runs = RunsResource(service)
    router.add(JOB_PATH + r"/runs", GET=runs.list, POST=runs.start)
    router.add(RUN_PATH, GET=runs.get)
    router.add(RUN_PATH + r"/actions/stop", POST=runs.stop)


class RunsResource:
    def __init__(self, service: JobService) -> None:
        self.service = service

    def list(self, r: Request, job_id: str) -> Response:
        self.service.job(job_id)
        return Response(200, [run.to_json(_detail(r)) for run in
                              self.service.active_runs(job_id)])

    def start(self, r: Request, job_id: str) -> Response:
        return Response(201, self.service.start_run(job_id).to_json(_detail(r)))

    def get(self, r: Request, job_id: str, run_id: str) -> Response:
        return Response(200, self.service.run(job_id, run_id).to_json(_detail(r)))

    def stop(self, r: Request, job_id: str, run_id: str) -> Response:
        self.service.stop_run(job_id, run_id)
        return Response(200, {})
