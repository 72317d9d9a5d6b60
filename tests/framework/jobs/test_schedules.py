"""Schedules over the real SQLite state store: cron in a time zone, a schedule that
fell due while the framework was down (started within startingDeadlineSeconds,
skipped past it), concurrencyPolicy FORBID, disabled schedules, and the marks that
survive a restart."""
from datetime import datetime, timezone

import pytest

from framework.jobs.core import schedules
from framework.jobs.core.job_service import JobService
from framework.jobs.state import cron
from framework.jobs.state.job_spec import read_job
from framework.http.validation import ApiError
from framework.state.state_store import StateStore


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


def job(**schedule):
    return read_job({"id": "nightly", "run": {"cmd": "true", "cpus": 0.1, "mem": 32, "disk": 0},
                     "schedules": [{"id": "night", "cron": "0 2 * * *",
                                    "timezone": "Europe/Paris", **schedule}]})


def service(store, now):
    return JobService(store, None, clock=lambda: now[0])


def test_a_schedule_due_while_down_starts_within_its_deadline_and_not_past_it(tmp_path):
    now = [at("2026-01-10T00:00:00")]
    store = StateStore(tmp_path)
    jobs = service(store, now)
    jobs.create(job(startingDeadlineSeconds=3600))
    # down from midnight; 02:00 Paris is 01:00 UTC; back at 01:30 UTC: 30 min late
    now[0] = at("2026-01-10T01:30:00")
    jobs = service(store, now)                     # a restart: marks come from the store
    schedules.due(jobs, now[0])
    assert len(jobs.active_runs("nightly")) == 1
    schedules.due(jobs, now[0])                    # once per due time
    assert len(jobs.active_runs("nightly")) == 1
    now[0] = at("2026-01-11T03:30:00")             # 2 h 30 late: past the deadline
    schedules.due(jobs, now[0])
    assert len(jobs.active_runs("nightly")) == 1


def test_forbid_and_disabled_start_nothing(tmp_path):
    now = [at("2026-01-10T00:00:00")]
    jobs = service(StateStore(tmp_path), now)
    jobs.create(job(concurrencyPolicy="FORBID"))
    jobs.start_run("nightly")
    now[0] = at("2026-01-10T01:00:30")
    schedules.due(jobs, now[0])
    assert len(jobs.active_runs("nightly")) == 1   # the one started by hand
    other = service(StateStore(tmp_path / "b"), [at("2026-01-10T00:00:00")])
    other.create(job(enabled=False))
    schedules.due(other, at("2026-01-10T01:00:30"))
    assert other.active_runs("nightly") == []


def test_cron_in_a_time_zone_and_bad_ones_named():
    spec = job().schedules[0]
    upcoming = spec.next_run(datetime(2026, 7, 1, 12, tzinfo=timezone.utc))
    assert upcoming.isoformat() == "2026-07-02T02:00:00+02:00"      # summer time
    assert cron.parse("*/15 9-17 * * MON-FRI").next_after(
        datetime(2026, 1, 10, 12, 0)).isoformat() == "2026-01-12T09:00:00"   # a Saturday
    with pytest.raises(ApiError) as bad:
        read_job({"id": "j", "run": {"cmd": "x", "cpus": 1, "mem": 32, "disk": 0},
                  "schedules": [{"id": "s", "cron": "61 * * * *", "timezone": "Mars/Base"}]})
    details = {d["path"]: d["errors"] for d in bad.value.body["details"]}
    assert details["/schedules(0)/cron"] == ["minute: 61 is outside 0-59"]
    assert "'Mars/Base' is not an IANA time zone" in details["/schedules(0)/timezone"][0]


def test_a_job_id_too_long_for_its_sandboxes_is_refused_naming_the_limit():
    with pytest.raises(ApiError) as bad:
        read_job({"id": "a" * 201, "run": {"cmd": "x", "cpus": 1, "mem": 32, "disk": 0}})
    assert bad.value.body["details"] == [{"path": "/id", "errors": [
        "at most 200 characters: its tasks' ids and their sandbox directories (255 bytes at "
        "most) are made of it"]}]
    assert read_job({"id": "a" * 200, "run": {"cmd": "x", "cpus": 1, "mem": 32,
                                              "disk": 0}}).id == "a" * 200
