"""A job's schedule as Metronome's schedulespec.schema.json has it: cron with a time
zone, startingDeadlineSeconds (how late a due run may still start: one due while
the framework was down starts when it is back, if within the deadline), and
concurrencyPolicy ALLOW or FORBID (no new run while one is active)."""
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Optional
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from framework.jobs.state import cron
from framework.http.json_reader import Reader, child
from framework.http.validation import Violations

POLICIES = ("ALLOW", "FORBID")
_FIELDS = {"id", "cron", "timezone", "startingDeadlineSeconds", "concurrencyPolicy", "enabled",
           "nextRunAt"}


@dataclass(frozen=True)
class ScheduleSpec:
    id: str
    cron: str
    timezone: str = "UTC"
    starting_deadline_seconds: int = 900
    concurrency_policy: str = "ALLOW"
    enabled: bool = True

    def next_run(self, after: datetime) -> Optional[datetime]:
        zone = ZoneInfo(self.timezone)
        found = cron.parse(self.cron).next_after(after.astimezone(zone))
        return found

    def to_json(self, now: Optional[datetime] = None) -> dict:
        from framework.jobs.state.timestamps import iso
        out = {"id": self.id, "cron": self.cron, "timezone": self.timezone,
               "startingDeadlineSeconds": self.starting_deadline_seconds,
               "concurrencyPolicy": self.concurrency_policy, "enabled": self.enabled}
        if now is not None:
            upcoming = self.next_run(now)
            if upcoming is not None:
                out["nextRunAt"] = iso(upcoming.timestamp())
        return out


def read_schedule(value: Any, path: str, v: Violations) -> Optional[ScheduleSpec]:
    from framework.jobs.state.job_spec import JOB_ID
    r = Reader(v)
    table = r.obj(value, path)
    if table is None:
        return None
    for key in table:
        if key not in _FIELDS:
            v.rule(child(path, key), "unknown field (Metronome's schedule schema has no such "
                                     "field)")
    ident = r.string(table.get("id"), child(path, "id"), 1)
    if ident is not None and not JOB_ID.fullmatch(ident) or ident is not None and "." in ident:
        v.rule(child(path, "id"), "must be lowercase letters, digits and dashes, not starting "
                                  "or ending with a dash")
    text = r.string(table.get("cron"), child(path, "cron"), 1)
    if text is not None:
        try:
            cron.parse(text)
        except cron.CronError as e:
            v.rule(child(path, "cron"), str(e))
    zone = r.optional(table, "timezone", path, r.string, "UTC")
    if zone is not None:
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            v.rule(child(path, "timezone"), f"{zone!r} is not an IANA time zone")
    deadline = r.optional(table, "startingDeadlineSeconds", path,
                          lambda x, p: r.integer(x, p, 1), 900)
    policy = r.optional(table, "concurrencyPolicy", path, lambda x, p: r.enum(x, p, POLICIES),
                        "ALLOW")
    enabled = r.optional(table, "enabled", path, r.boolean, True)
    if None in (ident, text, zone, deadline, policy, enabled):
        return None
    return ScheduleSpec(ident, text, zone, deadline, policy, enabled)


def read_one(body: Any) -> ScheduleSpec:
    v = Violations()
    spec = read_schedule(body, "/", v)
    v.raise_if_any()
    return spec
