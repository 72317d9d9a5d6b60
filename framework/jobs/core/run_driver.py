"""One pass over a run: its tasks' records from the scheduler into the run, and
what follows from them.

- a task of the attempt not known to the scheduler is submitted (the first time,
  and after a crash between storing the run and submitting: write-ahead);
- all tasks finished: SUCCESS;
- a task failed, was lost or became unreachable: the whole gang ends (the others
  are killed at once) and, once every task has ended, the restart policy decides:
  ON_FAILURE starts a new attempt while activeDeadlineSeconds (from the run's
  creation) allows, NEVER fails the run. A gang that ended before any of its
  tasks ran because a launch was lost (framework failover mid-launch, an offer
  gone) is started again whatever the policy, up to LAUNCH_RETRIES times;
- stopped: every task killed, then FAILED;
- not all launched within maxLaunchDelay of the attempt's start: FAILED.
"""
import logging
import time
from typing import Any, Callable, Optional

from framework.jobs.core.task_specs import task_spec
from framework.jobs.state.job_run import ACTIVE, FAILED, STARTING, SUCCESS, JobRun, RunTask
from framework.scheduling.task_record import PENDING, UNREACHABLE, TaskRecord

log = logging.getLogger(__name__)

LAUNCH_RETRIES = 3
_LAUNCH_LOST = frozenset({"TASK_LOST", "TASK_DROPPED", "TASK_UNKNOWN", "TASK_GONE"})


class RunDriver:
    def __init__(self, scheduler: Any, default_user: Optional[str] = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.scheduler = scheduler
        self.default_user = default_user
        self.clock = clock

    def advance(self, run: JobRun) -> JobRun:
        """The run after looking at its tasks (the same run when nothing changed)."""
        if not run.active:
            return run
        now = self.clock()
        records = {t.id: self.scheduler.task(t.id) for t in run.tasks}
        if not run.stopping:
            for task in run.tasks:
                if records[task.id] is None:
                    records[task.id] = self.scheduler.submit(
                        task_spec(run.job, run, task.rank, self.default_user), retries=False)
        tasks = tuple(_view(t, records[t.id]) for t in run.tasks)
        run = run.but(tasks=tasks)
        states = [r.state if r is not None else "TASK_KILLED" for r in records.values()]
        # an unreachable task was told to die: its gang does not wait for its agent
        ended = [r is None or r.terminal or r.state == UNREACHABLE for r in records.values()]
        if run.stopping:
            self._kill(records)
            if all(ended):
                return self._finish(run, FAILED, run.reason or "stopped", now)
            return run
        failed = [r for r in records.values() if r is not None
                  and ((r.terminal and r.state != "TASK_FINISHED") or r.state == UNREACHABLE)]
        # the cause is what ended on its own, not the ranks this driver killed for it
        failed = [r for r in failed if not r.kill_requested] or failed
        if failed:
            self._kill(records)
            if not all(ended):
                return run.but(reason=f"task {failed[0].id} {failed[0].state}: "
                                      f"{failed[0].message}; ending the gang")
            return self._after_failure(run, failed, records, now)
        if all(s == "TASK_FINISHED" for s in states):
            return self._finish(run, SUCCESS, "every task finished", now)
        waiting = [r for r in records.values() if r.state == PENDING]
        if not waiting:
            if run.status == STARTING:
                return run.but(status=ACTIVE, reason="",
                               gang_wait_seconds=now - run.attempt_started_at)
            return run
        if now - run.attempt_started_at > run.job.run.max_launch_delay:
            self._kill(records)
            return run.but(stopping=True, reason=f"not started within maxLaunchDelay "
                                                 f"({run.job.run.max_launch_delay} s): "
                                                 f"{waiting[0].message}")
        return run.but(reason=waiting[0].message)

    def _after_failure(self, run: JobRun, failed: list, records: dict, now: float) -> JobRun:
        cause = f"task {failed[0].id} {failed[0].state}: {failed[0].message}"
        lost_launch = all(r.started_at is None and r.state in _LAUNCH_LOST for r in failed)
        restart = run.job.run.restart
        deadline = restart.active_deadline_seconds
        if lost_launch and run.attempt <= LAUNCH_RETRIES:
            log.warning("run %s: launch lost (%s); starting the gang again", run.key, cause)
        elif restart.policy == "ON_FAILURE" and (deadline is None
                                                 or now < run.created_at + deadline):
            log.warning("run %s: %s; restarting (ON_FAILURE)", run.key, cause)
        else:
            why = cause if restart.policy == "NEVER" else \
                f"{cause}; activeDeadlineSeconds ({deadline} s) passed"
            return self._finish(run, FAILED, why, now)
        self._forget(records)
        nxt = run.but(attempt=run.attempt + 1, attempt_started_at=now, status=STARTING,
                      past_tasks=run.past_tasks + tuple(run.task_ids()),
                      reason=f"attempt {run.attempt} ended ({cause}); starting attempt "
                             f"{run.attempt + 1}")
        return nxt.but(tasks=tuple(RunTask(nxt.attempt_task_id(rank), rank)
                                   for rank in range(run.job.run.instances)))

    def _finish(self, run: JobRun, status: str, reason: str, now: float) -> JobRun:
        log.info("run %s: %s (%s)", run.key, status, reason)
        return run.but(status=status, completed_at=now, reason=reason)

    def forget_tasks(self, run: JobRun) -> None:
        """The scheduler's records of an ended run's tasks (after it is stored)."""
        self._forget({t.id: self.scheduler.task(t.id) for t in run.tasks})

    def _kill(self, records: dict) -> None:
        for task_id, record in records.items():
            if record is not None and not record.terminal and not record.kill_requested:
                try:
                    self.scheduler.kill(task_id)
                except Exception as e:
                    log.warning("kill %s: %s", task_id, e)

    def _forget(self, records: dict) -> None:
        for task_id, record in records.items():
            if record is not None:
                try:
                    self.scheduler.forget(task_id)
                except Exception as e:
                    log.debug("forget %s: %s", task_id, e)


def _view(task: RunTask, record: Optional[TaskRecord]) -> RunTask:
    if record is None:
        return task
    completed = record.updated if record.terminal else None
    return RunTask(task.id, task.rank, record.state, record.started_at, completed,
                   record.hostname, tuple(record.gpus), record.message)
