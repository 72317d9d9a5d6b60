"""The preemption notice and the checkpoint report, as data both sides read.

A preempted unit's tasks all get the same notice: the executor writes the notice file
in each task's sandbox (atomically), then sends SIGTERM; at the deadline, SIGKILL. The
grace period is the task's `taskKillGracePeriodSeconds` (Marathon's and Metronome's
field), else GRACE_DEFAULT_SECONDS. What a task reads:

- at launch, in its environment: MESOS_GPU_PREEMPTION_FILE (where a notice will
  appear), MESOS_GPU_PREEMPTION_GRACE_SECONDS, MESOS_GPU_CHECKPOINT_FILE (where it
  reports checkpoints). The deadline itself cannot be an environment variable of the
  running task (a process's environment is fixed when it starts), so it is in the file,
  and MESOS_GPU_PREEMPTION_DEADLINE is set for what starts after the notice (a hook).
- on SIGTERM, the notice file: {"deadline": "2026-11-27T12:00:30.000Z",
  "deadline_epoch": 1795780830.0, "grace_seconds": 30, "reason": "...", "unit": "...",
  "queue": "team-c", "reclaimed_for": "team-a"}.

A checkpoint report (MESOS_GPU_CHECKPOINT_FILE, or the API): a JSON number (epoch
seconds), a string (Marathon's time format), {"time": ..., "step": N}, or empty (`touch`).
"""
import errno
import os
import stat
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple, Union

from common import json_depth
from framework.tasks.timestamps import format_timestamp, parse_timestamp

PREEMPTION_FILE = "mesos-gpu-preemption.json"       # in the task's sandbox
CHECKPOINT_FILE = "mesos-gpu-checkpoint.json"        # in the task's sandbox
PREEMPTION_FILE_ENV = "MESOS_GPU_PREEMPTION_FILE"
PREEMPTION_GRACE_ENV = "MESOS_GPU_PREEMPTION_GRACE_SECONDS"
PREEMPTION_DEADLINE_ENV = "MESOS_GPU_PREEMPTION_DEADLINE"
CHECKPOINT_FILE_ENV = "MESOS_GPU_CHECKPOINT_FILE"
GRACE_DEFAULT_SECONDS = 30.0       # enough to save a model's state; Slurm's GraceTime idea
GRACE_MAX_SECONDS = 3600.0
CHECKPOINT_MAX_BYTES = 4096
CLOCK_SKEW_SECONDS = 60.0          # a checkpoint this far in the future is refused


def grace_seconds(task_kill_grace: Optional[float]) -> float:
    """The notice a task gets: its taskKillGracePeriodSeconds, else the default."""
    if task_kill_grace is None:
        return GRACE_DEFAULT_SECONDS
    return min(max(0.0, float(task_kill_grace)), GRACE_MAX_SECONDS)


@dataclass(frozen=True)
class PreemptionNotice:
    unit: str
    tasks: Tuple[str, ...]             # every task of the unit (a gang's all)
    queue: str                         # the queue it ran in
    reclaimed_for: str                 # the queue owed the GPUs
    given_at: float
    grace_seconds: float

    @property
    def deadline(self) -> float:
        return self.given_at + self.grace_seconds

    @property
    def reason(self) -> str:
        return (f"GPUs borrowed by queue {self.queue} are reclaimed for queue "
                f"{self.reclaimed_for}, below its guarantee")

    def to_json(self) -> Dict[str, Any]:
        """The notice file's content (and the API's view of a preemption)."""
        return {"unit": self.unit, "tasks": list(self.tasks), "queue": self.queue,
                "reclaimed_for": self.reclaimed_for, "reason": self.reason,
                "given_at": format_timestamp(self.given_at),
                "grace_seconds": self.grace_seconds,
                "deadline": format_timestamp(self.deadline), "deadline_epoch": self.deadline}


def notice_from_json(doc: Any) -> PreemptionNotice:
    """A notice file read back (the executor after a restart; a task in Python)."""
    if not isinstance(doc, dict):
        raise ValueError("a preemption notice is a JSON object")
    given_at = parse_timestamp(doc.get("given_at", ""))
    grace = doc.get("grace_seconds")
    if given_at is None or isinstance(grace, bool) or not isinstance(grace, (int, float)):
        raise ValueError("a preemption notice needs given_at (a timestamp) and grace_seconds")
    tasks = doc.get("tasks")
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) for t in tasks):
        raise ValueError("a preemption notice names its tasks")
    return PreemptionNotice(unit=str(doc.get("unit", "")), tasks=tuple(tasks),
                            queue=str(doc.get("queue", "")),
                            reclaimed_for=str(doc.get("reclaimed_for", "")),
                            given_at=given_at, grace_seconds=float(grace))


def launch_environment(sandbox: str, task_kill_grace: Optional[float]) -> Dict[str, str]:
    """What every task of a queue gets at launch, so it knows where to look."""
    return {PREEMPTION_FILE_ENV: f"{sandbox}/{PREEMPTION_FILE}",
            CHECKPOINT_FILE_ENV: f"{sandbox}/{CHECKPOINT_FILE}",
            PREEMPTION_GRACE_ENV: f"{grace_seconds(task_kill_grace):g}"}


def notice_environment(notice: PreemptionNotice) -> Dict[str, str]:
    """For a process started after the notice (a checkpoint hook): the deadline."""
    return {PREEMPTION_DEADLINE_ENV: format_timestamp(notice.deadline),
            PREEMPTION_GRACE_ENV: f"{notice.grace_seconds:g}"}


@dataclass(frozen=True)
class CheckpointReport:
    time: float                        # seconds since the epoch
    step: Optional[int] = None         # the task's own step or epoch number, if it said


class CheckpointReportError(ValueError):
    pass


def parse_checkpoint(content: Union[bytes, str], modified_at: float,
                     now: float) -> CheckpointReport:
    """A checkpoint report from the sandbox file's content (and its modification time,
    for an empty file) or an API body; CheckpointReportError says what is wrong."""
    if isinstance(content, bytes):
        if len(content) > CHECKPOINT_MAX_BYTES:
            raise CheckpointReportError(f"larger than {CHECKPOINT_MAX_BYTES} bytes")
        try:
            content = content.decode()
        except UnicodeDecodeError:
            raise CheckpointReportError("not UTF-8 text") from None
    if not content.strip():
        return _checked(CheckpointReport(time=modified_at), now)
    try:
        doc = json_depth.loads(content)
    except ValueError as e:
        raise CheckpointReportError(f"not JSON ({e}); write a time such as "
                                    '{"time": "2026-11-27T12:00:00Z", "step": 1200}') from None
    return _checked(checkpoint_from_json(doc), now)


def checkpoint_from_json(doc: Any) -> CheckpointReport:
    step = None
    if isinstance(doc, dict):
        unknown = sorted(set(doc) - {"time", "step"})
        if unknown:
            raise CheckpointReportError(f"{unknown[0]}: not a field of a checkpoint report "
                                        "(fields: time, step)")
        if "time" not in doc:
            raise CheckpointReportError("time: missing")
        step = doc.get("step")
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)
                                 or step < 0):
            raise CheckpointReportError(f"step: must be a non-negative integer, got {step!r}")
        doc = doc["time"]
    if isinstance(doc, str):
        seconds = parse_timestamp(doc)
        if seconds is None:
            raise CheckpointReportError(f"time: {doc!r} is not a time such as "
                                        "2026-11-27T12:00:00.000Z")
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool) and doc == doc \
            and 0 < doc < 1e11:
        seconds = float(doc)
    else:
        raise CheckpointReportError(f"time: {doc!r} is neither seconds since the epoch nor "
                                    "a timestamp")
    return CheckpointReport(time=seconds, step=step)


def _checked(report: CheckpointReport, now: float) -> CheckpointReport:
    if report.time > now + CLOCK_SKEW_SECONDS:
        raise CheckpointReportError(f"time: {format_timestamp(report.time)} is in the future "
                                    f"(now {format_timestamp(now)})")
    return report


def read_checkpoint_file(path: str, now: float) -> Optional[CheckpointReport]:
    """The report in a task's checkpoint file, None when it wrote none. The task owns its
    sandbox, so the file is opened without following a link and without blocking, and
    must be a regular file (a FIFO there would hang the reader, a link would read what
    the task may not)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CheckpointReportError(f"{path} is a symbolic link; write the file itself") \
                from None
        raise CheckpointReportError(f"{path}: {e.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CheckpointReportError(f"{path} is not a regular file")
        content = os.read(fd, CHECKPOINT_MAX_BYTES + 1)
    finally:
        os.close(fd)
    return parse_checkpoint(content, info.st_mtime, now)
