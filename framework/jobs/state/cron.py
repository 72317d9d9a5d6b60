"""Cron expressions as Metronome takes them: five fields (minute hour day-of-month
month day-of-week), each `*`, numbers, ranges `a-b`, lists `a,b` and steps `*/n`,
`a-b/n`; day-of-week 0-7 (0 and 7 are Sunday); names of months and days (JAN, MON).
When both day fields are restricted, either matching is enough (Vixie cron)."""
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Optional

_NAMES = {3: ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV",
              "DEC"],
          4: ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]}
_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_FIELD_NAMES = ("minute", "hour", "day of month", "month", "day of week")


class CronError(ValueError):
    """An expression that is not cron; the message names the field."""


@dataclass(frozen=True)
class Cron:
    text: str
    minutes: frozenset
    hours: frozenset
    days: frozenset
    months: frozenset
    weekdays: frozenset          # 0 Sunday .. 6 Saturday
    any_day: bool
    any_weekday: bool

    def matches(self, when: datetime) -> bool:
        if when.minute not in self.minutes or when.hour not in self.hours \
                or when.month not in self.months:
            return False
        day_ok = when.day in self.days
        weekday_ok = (when.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return day_ok and weekday_ok
        return day_ok or weekday_ok

    def next_after(self, when: datetime) -> Optional[datetime]:
        """The first minute strictly after `when` (aware, in the schedule's zone) that
        matches; None when none does within 5 years (Feb 30)."""
        t = when.replace(second=0, microsecond=0) + timedelta(minutes=1)
        end = when + timedelta(days=366 * 5)
        while t < end:
            if t.month not in self.months:
                t = (t.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(day=1)
                continue
            if not self._day_ok(t):
                t = t.replace(hour=0, minute=0) + timedelta(days=1)
                continue
            if t.hour not in self.hours:
                t = t.replace(minute=0) + timedelta(hours=1)
                continue
            if self.matches(t):
                return t
            t += timedelta(minutes=1)
        return None

    def _day_ok(self, t: datetime) -> bool:
        day_ok = t.day in self.days
        weekday_ok = (t.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return day_ok and weekday_ok
        return day_ok or weekday_ok


def parse(text: str) -> Cron:
    parts = text.split()
    if len(parts) != 5:
        raise CronError(f"{text!r} is not a cron expression: it needs 5 fields (minute hour "
                        f"day-of-month month day-of-week), it has {len(parts)}")
    sets = [_field(p, i) for i, p in enumerate(parts)]
    weekdays = frozenset(d % 7 for d in sets[4])
    return Cron(text, sets[0], sets[1], sets[2], sets[3], weekdays,
                parts[2] == "*", parts[4] == "*")


def _value(token: str, i: int) -> int:
    names = _NAMES.get(i)
    if names and token.upper() in names:
        return names.index(token.upper()) + (1 if i == 3 else 0)
    if not token.isdigit():
        raise CronError(f"{_FIELD_NAMES[i]}: {token!r} is not a number")
    low, high = _BOUNDS[i]
    number = int(token)
    if not low <= number <= high:
        raise CronError(f"{_FIELD_NAMES[i]}: {number} is outside {low}-{high}")
    return number


def _field(text: str, i: int) -> frozenset:
    low, high = _BOUNDS[i]
    out: set = set()
    for item in text.split(","):
        base, _, step_text = item.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f"{_FIELD_NAMES[i]}: step {step_text!r} is not a number above 0")
            step = int(step_text)
        if base == "*":
            start, stop = low, high
        elif "-" in base:
            a, _, b = base.partition("-")
            start, stop = _value(a, i), _value(b, i)
            if start > stop:
                raise CronError(f"{_FIELD_NAMES[i]}: range {base!r} runs backwards")
        else:
            start = stop = _value(base, i)
            if step_text:
                stop = high
        out.update(range(start, stop + 1, step))
    return frozenset(out)
