"""One task as the framework knows it, and the one vocabulary of its states.

The scheduler keeps one `TaskRecord` per task (stored under RECORD_KIND, keyed
by the task id); the Marathon API shows the same record, never a copy of its
own. The states are Mesos's (`TASK_STAGING` ... `TASK_GONE_BY_OPERATOR`) plus
one of ours, PENDING: waiting for an offer (or for its retry back-off to end).

Three words, used the same way from the scheduler to the API:

- *pending*: not handed to Mesos (Marathon's queue shows it);
- *launched*: handed to Mesos for an agent and not ended (it may be running,
  starting, or unreachable);
- *terminal*: ended; Mesos will not report on it again.

And *alive* for what counts toward an app's instances: launched or pending, but
not TASK_UNREACHABLE (Marathon's unreachableStrategy with its default
`inactiveAfterSeconds: 0` replaces such a task at once, without forgetting it).
"""
import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional

from framework.tasks.task_spec import TaskSpec

RECORD_KIND = "task"           # the store's kind for task records (layout 2)

PENDING = "PENDING"
RUNNING = "TASK_RUNNING"
STAGING = "TASK_STAGING"
UNREACHABLE = "TASK_UNREACHABLE"
# Marathon counts TASK_UNKNOWN (the master has never heard of the task) as
# ended too: nothing will run it.
TERMINAL_STATES = frozenset({
    "TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_ERROR", "TASK_LOST", "TASK_DROPPED",
    "TASK_GONE", "TASK_GONE_BY_OPERATOR", "TASK_UNKNOWN"})
# Ended for a reason another attempt may not meet (an agent or its executor went away).
RETRYABLE_STATES = frozenset({"TASK_FAILED", "TASK_LOST", "TASK_DROPPED", "TASK_GONE",
                              "TASK_UNKNOWN"})
# Ended badly: counted as an app's task failure (back-off, lastTaskFailure).
FAILED_STATES = frozenset({"TASK_FAILED", "TASK_ERROR", "TASK_LOST", "TASK_DROPPED", "TASK_GONE"})


def is_terminal(state: str) -> bool:
    return state in TERMINAL_STATES


def is_launched(state: str) -> bool:
    return state != PENDING and state not in TERMINAL_STATES


def is_alive(state: str) -> bool:
    return state not in TERMINAL_STATES and state != UNREACHABLE


def attempt_task_id(spec_id: str, attempt: int) -> str:
    """The Mesos task id of a launch attempt: `<id>`, then `<id>.retry1`, ..."""
    return spec_id if attempt <= 1 else f"{spec_id}.retry{attempt - 1}"


@dataclass
class TaskRecord:
    """What the framework knows of one task (copies are handed out).

    `app_version` and `config_version` say which version of its app launched
    it (the API's instance keeper replaces tasks of an older configuration);
    `staged_at` is when it was submitted, `started_at` when it first ran.
    """
    spec: TaskSpec
    state: str = PENDING
    mesos_task_id: str = ""
    agent_id: Optional[str] = None
    hostname: Optional[str] = None
    agent_fields: dict[str, str] = field(default_factory=dict)
    role: str = ""
    gpus: list[str] = field(default_factory=list)
    variant: dict = field(default_factory=dict)   # the image variant launched (pinned)
    ports: list[int] = field(default_factory=list)  # the host ports it was given
    healthy: Optional[bool] = None                # its executor's health check says (None: no word)
    health: dict = field(default_factory=dict)    # that check's details (framework.tasks.health_check)
    gpu_usage: dict = field(default_factory=dict)  # its executor's last report (framework.gpus.gpu_usage)
    message: str = ""
    reason: str = ""
    attempts: int = 0
    not_before: float = 0.0
    kill_requested: bool = False
    retries: bool = True          # a failed launch is tried again (False: its owner decides)
    kill_sent_at: float = 0.0
    app_version: str = ""
    config_version: str = ""
    staged_at: float = field(default_factory=time.time)
    started_at: Optional[float] = None
    updated: float = field(default_factory=time.time)

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def app_id(self) -> str:
        return self.spec.app_id

    @property
    def pending(self) -> bool:
        return self.state == PENDING

    @property
    def launched(self) -> bool:
        return is_launched(self.state)

    @property
    def terminal(self) -> bool:
        return is_terminal(self.state)

    @property
    def alive(self) -> bool:
        return is_alive(self.state)

    def copy(self) -> "TaskRecord":
        return replace(self, agent_fields=dict(self.agent_fields), gpus=list(self.gpus),
                       variant=dict(self.variant), ports=list(self.ports),
                       health=dict(self.health), gpu_usage=dict(self.gpu_usage))

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["spec"] = self.spec.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "TaskRecord":
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        values["spec"] = TaskSpec.from_json(data["spec"])
        return cls(**values)
