"""`/v1/jobs/{jobId}/schedules` and `.../schedules/{scheduleId}`."""
from datetime import datetime, timezone

from framework.jobs.api.jobs import JOB_PATH
from framework.jobs.core.job_service import JobService
from framework.jobs.state.schedule_spec import read_one
from framework.http.json_reader import parse_body
from framework.http.routing import Request, Response, Router


def register(router: Router, service: JobService) -> None:
    s = SchedulesResource(service)
    router.add(JOB_PATH + r"/schedules", GET=s.list, POST=s.create)
    router.add(JOB_PATH + r"/schedules/(?P<schedule_id>[^/]+)", GET=s.get, PUT=s.replace,
               DELETE=s.delete)


class SchedulesResource:
    def __init__(self, service: JobService) -> None:
        self.service = service

    def list(self, r: Request, job_id: str) -> Response:
        now = datetime.now(timezone.utc)
        return Response(200, [s.to_json(now) for s in self.service.job(job_id).schedules])

    def create(self, r: Request, job_id: str) -> Response:
        self.service.job(job_id)
        schedule = self.service.add_schedule(job_id, read_one(parse_body(r.body)))
        return Response(201, schedule.to_json(datetime.now(timezone.utc)))

    def get(self, r: Request, job_id: str, schedule_id: str) -> Response:
        schedule = self.service.schedule(job_id, schedule_id)
        return Response(200, schedule.to_json(datetime.now(timezone.utc)))

    def replace(self, r: Request, job_id: str, schedule_id: str) -> Response:
        self.service.schedule(job_id, schedule_id)
        schedule = self.service.replace_schedule(job_id, schedule_id,
                                                 read_one(parse_body(r.body)))
        return Response(200, schedule.to_json(datetime.now(timezone.utc)))

    def delete(self, r: Request, job_id: str, schedule_id: str) -> Response:
        self.service.delete_schedule(job_id, schedule_id)
        return Response(200, {})
