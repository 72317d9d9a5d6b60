"""One task as the API shows it, built from the scheduler's record of it plus
what the app layer remembers (which app and version launched it, and when).

`view_of` reads the scheduler's task record whether it is a dict (Mesos v1
JSON style, `task_id` possibly `{"value": ...}`) or an object with attributes,
so the app layer depends only on the few facts it needs: id, state, agent,
host, granted GPU UUIDs, message.
"""
import calendar
import time
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional, Tuple

TERMINAL_STATES = frozenset({
    "TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_LOST", "TASK_ERROR",
    "TASK_DROPPED", "TASK_GONE", "TASK_GONE_BY_OPERATOR", "TASK_UNKNOWN"})
# Counted as not running for scaling (Marathon's unreachableStrategy, default
# inactiveAfterSeconds 0: replace at once), but not forgotten.
INACTIVE_STATES = frozenset({"TASK_UNREACHABLE"})
QUEUED = "TASK_STAGING"
SCHEDULER_PENDING = "PENDING"   # framework.scheduler: not launched (yet, or again)


def _get(record: Any, *names: str) -> Any:
    for name in names:
        value = record.get(name) if isinstance(record, dict) else getattr(record, name, None)
        if value is not None:
            return value
    return None


def _text(value: Any) -> Optional[str]:
    if isinstance(value, dict):
        value = value.get("value")
    return None if value is None else str(value)


def _parse_time(text: str) -> float:
    try:
        return calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + text[19:-1])
    except (ValueError, TypeError):
        return 0.0


@dataclass(frozen=True)
class TaskView:
    task_id: str
    app_id: str = ""
    version: str = ""
    config_version: str = ""
    state: str = QUEUED
    agent_id: Optional[str] = None
    host: Optional[str] = None
    gpu_uuids: Tuple[str, ...] = ()
    message: Optional[str] = None
    staged_at: str = ""
    started_at: Optional[str] = None
    from_scheduler: bool = False
    variant: Optional[Mapping[str, Any]] = None    # the image variant it runs (pinned)

    @classmethod
    def queued(cls, task_id: str, meta: dict) -> "TaskView":
        return cls(task_id).with_meta(meta)

    def with_meta(self, meta: dict) -> "TaskView":
        return replace(self, app_id=meta["appId"], version=meta["version"],
                       config_version=meta["configVersion"], staged_at=meta["stagedAt"])

    @property
    def alive(self) -> bool:
        return self.state not in TERMINAL_STATES and self.state not in INACTIVE_STATES

    @property
    def launched(self) -> bool:
        """Placed on an agent (queued tasks show in /v2/queue instead)."""
        return self.agent_id is not None

    @property
    def staged_seconds(self) -> float:
        return _parse_time(self.staged_at)

    def to_json(self, service_ports=(), with_gpus: bool = False) -> dict:
        """Marathon's task JSON; `gpuUuids` only when asked for (clients that
        build objects from every key must not see fields Marathon lacks)."""
        out = {"id": self.task_id, "appId": self.app_id, "host": self.host or "",
               "slaveId": self.agent_id or "", "state": self.state,
               "stagedAt": self.staged_at, "version": self.version,
               "ports": [], "servicePorts": list(service_ports), "ipAddresses": []}
        if self.started_at:
            out["startedAt"] = self.started_at
        if with_gpus:
            out["gpuUuids"] = list(self.gpu_uuids)
            if self.variant:
                out["imageVariant"] = dict(self.variant)
        return out


def view_of(record: Any) -> Optional[TaskView]:
    """The scheduler's task record as a (partial) TaskView, None if it has no id."""
    task_id = _text(_get(record, "task_id", "id"))
    if not task_id:
        return None
    state = _text(_get(record, "state")) or QUEUED
    if state == SCHEDULER_PENDING:      # waiting for an offer (or a retry): queued, on no agent yet
        return TaskView(task_id=task_id, state=QUEUED, message=_text(_get(record, "message")),
                        from_scheduler=True)
    gpus = _get(record, "gpu_uuids", "gpus") or ()
    if isinstance(gpus, str):
        gpus = tuple(u for u in gpus.split(",") if u)
    return TaskView(task_id=task_id, state=state,
                    agent_id=_text(_get(record, "agent_id", "slave_id")),
                    host=_text(_get(record, "hostname", "host")),
                    gpu_uuids=tuple(str(g) for g in gpus if not isinstance(g, (int, float))),
                    message=_text(_get(record, "message")),
                    from_scheduler=True, variant=_get(record, "variant") or None)
