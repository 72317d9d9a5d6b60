"""`/v1/jobs` and `/v1/jobs/{jobId}` (and v0's `/v0/scheduled-jobs[/{jobId}]`, a job
with its schedules): create, list, read, replace, delete jobs, with
`?embed=activeRuns|schedules|history|historySummary` (or the dcos-metronome client's
`activeRuns=true`...)."""
from framework.jobs.core.job_service import JobService
from framework.jobs.state.job_spec import JobSpec, read_job
from framework.http.json_reader import parse_body
from framework.http.routing import Request, Response, Router

JOB_PATH = r"/v1/jobs/(?P<job_id>[^/]+)"
EMBEDS = ("activeRuns", "schedules", "history", "historySummary")


def register(router: Router, service: JobService) -> None:
    j = JobsResource(service)
    router.add(r"/v1/jobs", GET=j.list, POST=j.create)
    router.add(JOB_PATH, GET=j.get, PUT=j.replace, DELETE=j.delete)
    # Metronome's v0: a job with its schedules, created and replaced as one
    router.add(r"/v0/scheduled-jobs", POST=j.create)
    router.add(r"/v0/scheduled-jobs/(?P<job_id>[^/]+)", PUT=j.replace_with_schedules)


def embeds(r: Request) -> set:
    wanted = {e for value in r.query.get("embed", ()) for e in value.split(",")}
    return {e for e in EMBEDS if e in wanted or r.flag(e)}


def detail(r: Request) -> bool:
    """Our fields of a run (attempt, reason, ranks) unless the client is a strict one
    (Accept: application/json alone, as dcos-metronome sends it); ?detail=true asks
    for them anyway."""
    return r.flag("detail") or "application/json" not in r.accept or "," in r.accept


class JobsResource:
    def __init__(self, service: JobService) -> None:
        self.service = service

    def view(self, job: JobSpec, wanted: set, detail: bool = False) -> dict:
        out = job.to_json(schedules="schedules" in wanted)
        if "schedules" in wanted:
            out["schedules"] = [s.to_json(_now()) for s in job.schedules]
        if "activeRuns" in wanted:
            out["activeRuns"] = [r.to_json(detail) for r in self.service.active_runs(job.id)]
        if "history" in wanted:
            out["history"] = self.service.history(job.id).to_json()
        if "historySummary" in wanted:
            out["historySummary"] = self.service.history(job.id).summary_json()
        return out

    def list(self, r: Request) -> Response:
        wanted = embeds(r)
        with self.service.lock:
            return Response(200, [self.view(j, wanted, detail(r))
                                  for j in self.service.jobs.values()])

    def create(self, r: Request) -> Response:
        job = self.service.create(read_job(parse_body(r.body)))
        return Response(201, job.to_json(schedules=bool(job.schedules)))

    def get(self, r: Request, job_id: str) -> Response:
        return Response(200, self.view(self.service.job(job_id), embeds(r), detail(r)))

    def replace(self, r: Request, job_id: str) -> Response:
        self.service.job(job_id)                 # 404 before the body's 422
        job = self.service.update(read_job(parse_body(r.body), job_id))
        return Response(200, job.to_json())

    def replace_with_schedules(self, r: Request, job_id: str) -> Response:
        self.service.job(job_id)
        job = self.service.update(read_job(parse_body(r.body), job_id), schedules=True)
        return Response(200, job.to_json(schedules=True))

    def delete(self, r: Request, job_id: str) -> Response:
        job = self.service.delete(job_id, r.flag("stopCurrentJobRuns"))
        return Response(200, job.to_json())


def _now():
    from datetime import datetime, timezone
    return datetime.now(timezone.utc)
