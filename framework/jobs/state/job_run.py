"""A job's run and its history, as the store keeps them and Metronome shows them.

A run is STARTING (its tasks wait for offers), ACTIVE (all of them launched),
then SUCCESS (every task finished) or FAILED (a task failed and the restart policy
allows no other attempt, or it was stopped, or it did not start within
maxLaunchDelay). Each attempt starts `instances` tasks (one gang when more than one)
with ids `<jobId>_<runId>.<attempt>.<rank>`. The run keeps the job's run spec as it
was when the run was created: an update of the job does not change a run.
"""
import random
import string
import time
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from framework.jobs.state.job_spec import JobSpec, from_stored, to_stored
from framework.jobs.state.timestamps import iso

RUN_KIND = "job_run"              # the store's kinds: runs (key <jobId>/<runId>),
HISTORY_KIND = "job_history"      # each job's history (key: the job id)
JOB_KIND = "job"                  # jobs (key: the job id)

STARTING, ACTIVE, SUCCESS, FAILED = "STARTING", "ACTIVE", "SUCCESS", "FAILED"
ACTIVE_STATUSES = (STARTING, ACTIVE)
HISTORY_LENGTH = 20               # finished runs kept per job, each of success and failure


def new_run_id(now: Optional[float] = None) -> str:
    """Metronome's run ids: the UTC time to the second and 5 random letters/digits."""
    stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime(now or time.time()))
    return stamp + "".join(random.choices(string.ascii_letters + string.digits, k=5))


@dataclass(frozen=True)
class RunTask:
    """One task of the run as the API shows it (its last known state)."""
    id: str
    rank: int
    status: str = "TASK_CREATED"
    started_at: Optional[float] = None
    completed_at: Optional[float] = None
    host: Optional[str] = None
    gpus: tuple[str, ...] = ()
    message: str = ""

    def to_json(self, detail: bool = False) -> dict:
        out = {"id": self.id, "startedAt": iso(self.started_at),
               "completedAt": iso(self.completed_at), "status": _metronome_state(self.status)}
        if detail:
            out.update(rank=self.rank, host=self.host, gpus=list(self.gpus), state=self.status,
                       message=self.message)
        return out


def _metronome_state(state: str) -> str:
    """Metronome's task states (TaskState.scala): the others are FAILED, a task
    waiting for an offer is CREATED."""
    if state in ("TASK_STAGING", "TASK_STARTING", "TASK_RUNNING", "TASK_FINISHED",
                 "TASK_FAILED", "TASK_KILLED"):
        return state
    if state in ("PENDING", "TASK_CREATED"):
        return "TASK_CREATED"
    if state in ("TASK_KILLING", "TASK_UNREACHABLE"):
        return "TASK_RUNNING"
    return "TASK_FAILED"


@dataclass(frozen=True)
class JobRun:
    id: str
    job: JobSpec                     # as it was when the run was created
    status: str = STARTING
    created_at: float = field(default_factory=time.time)
    completed_at: Optional[float] = None
    attempt: int = 1
    attempt_started_at: float = field(default_factory=time.time)
    tasks: tuple[RunTask, ...] = ()  # the current attempt's
    past_tasks: tuple[str, ...] = ()  # ids of earlier attempts' tasks
    stopping: bool = False
    reason: str = ""                 # why it waits, or why it ended
    gang_wait_seconds: Optional[float] = None   # created (attempt start) to all launched

    @property
    def job_id(self) -> str:
        return self.job.id

    @property
    def key(self) -> str:
        return f"{self.job.id}/{self.id}"

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_STATUSES

    def task_ids(self) -> list[str]:
        return [t.id for t in self.tasks]

    def attempt_task_id(self, rank: int) -> str:
        return f"{self.job.id}_{self.id}.{self.attempt}.{rank}"

    def to_json(self, detail: bool = True) -> dict:
        out = {"id": self.id, "jobId": self.job.id, "status": self.status,
               "createdAt": iso(self.created_at), "completedAt": iso(self.completed_at),
               "tasks": [t.to_json() for t in self.tasks]}
        if detail:
            out.update(attempt=self.attempt, instances=self.job.run.instances,
                       reason=self.reason, ranks=[t.to_json(True) for t in self.tasks])
        return out

    def stored(self) -> dict:
        return {"id": self.id, "job": to_stored(self.job), "status": self.status,
                "created_at": self.created_at, "completed_at": self.completed_at,
                "attempt": self.attempt, "attempt_started_at": self.attempt_started_at,
                "tasks": [t.__dict__ | {"gpus": list(t.gpus)} for t in self.tasks],
                "past_tasks": list(self.past_tasks), "stopping": self.stopping,
                "reason": self.reason, "gang_wait_seconds": self.gang_wait_seconds}

    @classmethod
    def from_stored(cls, data: dict) -> "JobRun":
        tasks = tuple(RunTask(**{**t, "gpus": tuple(t.get("gpus", ()))}) for t in data["tasks"])
        return cls(id=data["id"], job=from_stored(data["job"]), status=data["status"],
                   created_at=data["created_at"], completed_at=data.get("completed_at"),
                   attempt=data["attempt"], attempt_started_at=data["attempt_started_at"],
                   tasks=tasks, past_tasks=tuple(data.get("past_tasks", ())),
                   stopping=data.get("stopping", False), reason=data.get("reason", ""),
                   gang_wait_seconds=data.get("gang_wait_seconds"))

    def but(self, **changes: Any) -> "JobRun":
        return replace(self, **changes)


@dataclass(frozen=True)
class FinishedRun:
    id: str
    created_at: float
    finished_at: float
    tasks: tuple[str, ...]

    def to_json(self) -> dict:
        return {"id": self.id, "createdAt": iso(self.created_at),
                "finishedAt": iso(self.finished_at), "tasks": list(self.tasks)}


@dataclass(frozen=True)
class JobHistory:
    success_count: int = 0
    failure_count: int = 0
    last_success_at: Optional[float] = None
    last_failure_at: Optional[float] = None
    successful: tuple[FinishedRun, ...] = ()
    failed: tuple[FinishedRun, ...] = ()

    def record(self, run: JobRun) -> "JobHistory":
        done = FinishedRun(run.id, run.created_at, run.completed_at or time.time(),
                           tuple(run.past_tasks) + tuple(run.task_ids()))
        if run.status == SUCCESS:
            return replace(self, success_count=self.success_count + 1,
                           last_success_at=done.finished_at,
                           successful=((done,) + self.successful)[:HISTORY_LENGTH])
        return replace(self, failure_count=self.failure_count + 1,
                       last_failure_at=done.finished_at,
                       failed=((done,) + self.failed)[:HISTORY_LENGTH])

    def summary_json(self) -> dict:
        return {"successCount": self.success_count, "failureCount": self.failure_count,
                "lastSuccessAt": iso(self.last_success_at),
                "lastFailureAt": iso(self.last_failure_at)}

    def to_json(self) -> dict:
        return {**self.summary_json(),
                "successfulFinishedRuns": [r.to_json() for r in self.successful],
                "failedFinishedRuns": [r.to_json() for r in self.failed]}

    def stored(self) -> dict:
        return {"success_count": self.success_count, "failure_count": self.failure_count,
                "last_success_at": self.last_success_at, "last_failure_at": self.last_failure_at,
                "successful": [r.__dict__ | {"tasks": list(r.tasks)} for r in self.successful],
                "failed": [r.__dict__ | {"tasks": list(r.tasks)} for r in self.failed]}

    @classmethod
    def from_stored(cls, data: dict) -> "JobHistory":
        def runs(items):
            return tuple(FinishedRun(**{**r, "tasks": tuple(r["tasks"])}) for r in items)
        return cls(data["success_count"], data["failure_count"], data.get("last_success_at"),
                   data.get("last_failure_at"), runs(data.get("successful", ())),
                   runs(data.get("failed", ())))
