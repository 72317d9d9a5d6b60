"""Jobs and their runs: what /v1 changes and reads, kept in memory under one lock,
written to the state store before it is acted on, and driven by one thread that
advances the runs (core/run_driver.py) and starts the runs schedules make due
(core/schedules.py). Only the leading instance drives; every method that changes
state is the leader's (the others forward the API to it)."""
import logging
import threading
import time
from typing import Any, Callable, Optional

from framework.jobs.core import schedules as schedule_rules
from framework.jobs.core.run_driver import RunDriver
from framework.jobs.core.task_specs import check
from framework.jobs.state.job_run import (ACTIVE_STATUSES, FAILED, HISTORY_LENGTH, RunTask,
                                          JobHistory, JobRun, new_run_id)
from framework.jobs.state.job_spec import JobSpec
from framework.jobs.state.job_store import JobStore
from framework.jobs.state.schedule_spec import ScheduleSpec
from framework.http.validation import ApiError
from framework.tasks.task_spec import TaskSpecError

log = logging.getLogger(__name__)


def not_found(what: str, ident: str) -> ApiError:
    return ApiError(404, {"message": f"{what} not found", "id": ident})


class JobService:
    def __init__(self, store: Any, scheduler: Any, leading: Callable[[], bool] = lambda: True,
                 default_user: Optional[str] = None, policy: Any = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.lock = threading.RLock()
        self.store = JobStore(store)
        self.scheduler = scheduler
        self.leading = leading
        self.default_user = default_user
        self.policy = policy
        self.clock = clock
        self.driver = RunDriver(scheduler, default_user, clock)
        self.jobs, self.runs, self.histories, self.marks = self.store.load()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.finished_counts = {"SUCCESS": 0, "FAILED": 0}
        self.on_gang_wait: Callable[[float], None] = lambda seconds: None   # /metrics
        if scheduler is not None:
            scheduler.on_update(lambda record: self._wake.set())
        log.info("jobs: %d job(s), %d active run(s) on record", len(self.jobs),
                 sum(r.active for r in self.runs.values()))

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> "JobService":
        self._thread = threading.Thread(target=self._loop, name="jobs", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(1.0)
            self._wake.clear()
            if self._stop.is_set() or not self.leading() or self.scheduler is None:
                continue
            try:
                self.advance()
            except Exception:
                log.exception("jobs pass failed")

    def advance(self) -> None:
        """One pass: every active run, then the schedules."""
        with self.lock:
            for key in [k for k, r in self.runs.items() if r.active]:
                self._advance_run(key)
            schedule_rules.due(self, self.clock())

    def _advance_run(self, key: str) -> None:
        run = self.runs[key]
        after = self.driver.advance(run)
        if after == run:
            return
        if after.gang_wait_seconds is not None and run.gang_wait_seconds is None:
            self.on_gang_wait(after.gang_wait_seconds)
        if after.active:
            self.store.put_run(after)
            self.runs[key] = after
            return
        self.finished_counts[after.status] += 1
        if after.job_id not in self.jobs:          # its job was deleted: nothing to keep
            self.store.delete_run(after)
            del self.runs[key]
            self.driver.forget_tasks(after)
            return
        history = self.histories.get(after.job_id, JobHistory()).record(after)
        with self.store.transaction():
            self.store.put_run(after)
            self.store.put_history(after.job_id, history)
        self.runs[key] = after
        self.histories[after.job_id] = history
        self.driver.forget_tasks(after)
        self._prune(after.job_id)

    def _prune(self, job_id: str) -> None:
        ended = sorted((r for r in self.runs.values() if r.job_id == job_id and not r.active),
                       key=lambda r: r.created_at)
        for run in ended[:-HISTORY_LENGTH]:
            self.store.delete_run(run)
            del self.runs[run.key]

    # -- jobs ----------------------------------------------------------------------------
    def create(self, job: JobSpec) -> JobSpec:
        self._check(job)
        with self.lock:
            if job.id in self.jobs:
                raise ApiError(409, {"message": "Job with this id already exists"})
            self.store.put_job(job)
            self.jobs[job.id] = job
            schedule_rules.arm(self, job, self.clock())
        log.info("job %s created", job.id)
        return job

    def update(self, job: JobSpec, schedules: bool = False) -> JobSpec:
        """Replace a job's spec; its schedules stay, unless `schedules` (v0): then the
        body's replace them."""
        self._check(job)
        with self.lock:
            old = self.job(job.id)
            if not schedules:
                job = job.with_schedules(old.schedules)
            with self.store.transaction():
                self.store.put_job(job)
                for gone in {s.id for s in old.schedules} - {s.id for s in job.schedules}:
                    self.store.delete_mark(f"{job.id}/{gone}")
                    self.marks.pop(f"{job.id}/{gone}", None)
            self.jobs[job.id] = job
            schedule_rules.arm(self, job, self.clock())
        return job

    def delete(self, job_id: str, stop_runs: bool) -> JobSpec:
        with self.lock:
            job = self.job(job_id)
            active = self.active_runs(job_id)
            if active and not stop_runs:
                raise ApiError(409, {"message": "There are active job runs. Override with "
                                                "stopCurrentJobRuns=true"})
            for run in active:
                self.stop_run(job_id, run.id)
            with self.store.transaction():
                self.store.delete_job(job_id)
                for schedule in job.schedules:
                    self.store.delete_mark(f"{job_id}/{schedule.id}")
            del self.jobs[job_id]
            self.histories.pop(job_id, None)
        log.info("job %s deleted", job_id)
        return job

    def job(self, job_id: str) -> JobSpec:
        with self.lock:
            job = self.jobs.get(job_id)
            if job is None:
                raise not_found("Job", job_id)
            return job

    def _check(self, job: JobSpec) -> None:
        """What the TaskSpec and the Docker policy refuse, as a 422 naming the field."""
        try:
            check(job, self.default_user)
        except TaskSpecError as e:
            raise ApiError(422, {"message": "Object is not valid",
                                 "details": [{"path": "/run", "errors": [str(e)]}]}) from None
        docker = job.run.docker
        refusals = []
        if self.policy is not None and docker is not None:
            if docker.privileged and self.policy.refuses_privileged():
                refusals.append(("/run/docker/privileged", "privileged containers are refused "
                                 "(mesos-gpu framework --allow_docker_parameters privileged)"))
            for key, value in docker.parameters:
                if self.policy.refuses_parameter(key, value):
                    refusals.append(("/run/docker/parameters", f"{key} grants host access "
                                     f"(mesos-gpu framework --allow_docker_parameters {key})"))
        if self.policy is not None and job.run.volumes and self.policy.refuses_host_volumes():
            refusals.append(("/run/volumes", "host volumes are refused (mesos-gpu framework "
                             "--allow_docker_parameters volume)"))
        if refusals:
            raise ApiError(422, {"message": "Object is not valid", "details": [
                {"path": p, "errors": [e]} for p, e in refusals]})

    # -- runs ----------------------------------------------------------------------------
    def start_run(self, job_id: str, scheduled: bool = False) -> JobRun:
        with self.lock:
            job = self.job(job_id)
            now = self.clock()
            run = JobRun(id=new_run_id(now), job=job, created_at=now, attempt_started_at=now,
                         reason="scheduled" if scheduled else "")
            run = run.but(tasks=tuple(RunTask(run.attempt_task_id(rank), rank)
                                      for rank in range(job.run.instances)))
            self.store.put_run(run)           # stored first: its tasks are submitted next
            self.runs[run.key] = run
        log.info("run %s started (%d task(s))", run.key, job.run.instances)
        self._wake.set()
        return run

    def stop_run(self, job_id: str, run_id: str) -> JobRun:
        with self.lock:
            self.job(job_id)
            run = self.runs.get(f"{job_id}/{run_id}")
            if run is None or not run.active:
                raise not_found("Job Run", run_id)
            run = run.but(stopping=True, reason="stopped by request")
            self.store.put_run(run)
            self.runs[run.key] = run
        self._wake.set()
        return run

    def active_runs(self, job_id: str) -> list[JobRun]:
        with self.lock:
            return sorted((r for r in self.runs.values() if r.job_id == job_id and r.active),
                          key=lambda r: r.created_at)

    def run(self, job_id: str, run_id: str) -> JobRun:
        with self.lock:
            self.job(job_id)
            run = self.runs.get(f"{job_id}/{run_id}")
            if run is None:
                raise not_found("Job Run", run_id)
            return run

    def task_records(self) -> list:
        """The scheduler's records of the active runs' tasks (the dashboard's GPU tiles)."""
        if self.scheduler is None:
            return []
        with self.lock:
            ids = [t.id for run in self.runs.values() if run.active for t in run.tasks]
        return [r for r in (self.scheduler.task(i) for i in ids) if r is not None]

    def history(self, job_id: str) -> JobHistory:
        with self.lock:
            return self.histories.get(job_id, JobHistory())

    def all_runs(self) -> list[JobRun]:
        with self.lock:
            return sorted(self.runs.values(), key=lambda r: r.created_at)

    # -- schedules -------------------------------------------------------------------------
    def add_schedule(self, job_id: str, schedule: ScheduleSpec) -> ScheduleSpec:
        with self.lock:
            job = self.job(job_id)
            if any(s.id == schedule.id for s in job.schedules):
                raise ApiError(409, {"message": f"A schedule with id {schedule.id} already "
                                                "exists"})
            job = job.with_schedules(job.schedules + (schedule,))
            self.store.put_job(job)
            self.jobs[job_id] = job
            schedule_rules.arm(self, job, self.clock())
        return schedule

    def replace_schedule(self, job_id: str, schedule_id: str,
                         schedule: ScheduleSpec) -> ScheduleSpec:
        with self.lock:
            job = self.job(job_id)
            self.schedule(job_id, schedule_id)
            if schedule.id != schedule_id:
                raise ApiError(422, {"message": "Object is not valid", "details": [
                    {"path": "/id", "errors": [f"must be the path's {schedule_id}"]}]})
            job = job.with_schedules(tuple(schedule if s.id == schedule_id else s
                                           for s in job.schedules))
            self.store.put_job(job)
            self.jobs[job_id] = job
        return schedule

    def delete_schedule(self, job_id: str, schedule_id: str) -> None:
        with self.lock:
            job = self.job(job_id)
            self.schedule(job_id, schedule_id)
            job = job.with_schedules(tuple(s for s in job.schedules if s.id != schedule_id))
            with self.store.transaction():
                self.store.put_job(job)
                self.store.delete_mark(f"{job_id}/{schedule_id}")
            self.jobs[job_id] = job
            self.marks.pop(f"{job_id}/{schedule_id}", None)

    def schedule(self, job_id: str, schedule_id: str) -> ScheduleSpec:
        for schedule in self.job(job_id).schedules:
            if schedule.id == schedule_id:
                return schedule
        raise not_found("Schedule", schedule_id)

    # -- figures -----------------------------------------------------------------------------
    def counts(self) -> dict:
        with self.lock:
            out = dict.fromkeys(("STARTING", "ACTIVE"), 0)
            for run in self.runs.values():
                if run.status in ACTIVE_STATUSES:
                    out[run.status] += 1
            out.update({"SUCCESS": self.finished_counts["SUCCESS"],
                        "FAILED": self.finished_counts[FAILED]})
            return out
