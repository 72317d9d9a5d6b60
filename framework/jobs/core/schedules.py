"""Schedules: a run starts when a schedule's cron falls due, in its time zone.

Each schedule keeps when it last fell due (stored, kind job_schedule), so a
schedule that fell due while the framework was down is seen when it is back: the
run starts if it is still within startingDeadlineSeconds of the due time, and is
skipped (logged) otherwise, as Metronome does. concurrencyPolicy FORBID skips a due
time while a run of the job is active; disabled schedules never start runs.
"""
import logging
from datetime import datetime, timezone
from typing import Any

log = logging.getLogger(__name__)


def arm(service: Any, job: Any, now: float) -> None:
    """A schedule new to the framework starts counting from now."""
    for schedule in job.schedules:
        key = f"{job.id}/{schedule.id}"
        if key not in service.marks:
            service.store.put_mark(key, now)
            service.marks[key] = now


def due(service: Any, now: float) -> None:
    """Start the runs the schedules made due since their last mark. Under the lock."""
    for job in list(service.jobs.values()):
        for schedule in job.schedules:
            key = f"{job.id}/{schedule.id}"
            last = service.marks.get(key)
            if last is None:
                arm(service, job, now)
                continue
            upcoming = schedule.next_run(datetime.fromtimestamp(last, timezone.utc))
            if upcoming is None or upcoming.timestamp() > now:
                continue
            # the latest due time not after now: the earlier ones were missed
            latest = upcoming
            while True:
                following = schedule.next_run(latest)
                if following is None or following.timestamp() > now:
                    break
                latest = following
            service.store.put_mark(key, latest.timestamp())
            service.marks[key] = latest.timestamp()
            late = now - latest.timestamp()
            if not schedule.enabled:
                continue
            if late > schedule.starting_deadline_seconds:
                log.warning("schedule %s: due at %s, %.0f s ago, past its startingDeadline"
                            "Seconds (%d): not started", key, latest.isoformat(), late,
                            schedule.starting_deadline_seconds)
                continue
            if schedule.concurrency_policy == "FORBID" and service.active_runs(job.id):
                log.info("schedule %s: due, but a run is active (concurrencyPolicy FORBID)",
                         key)
                continue
            log.info("schedule %s: due at %s, starting a run", key, latest.isoformat())
            service.start_run(job.id, scheduled=True)
