"""A queue: a team's GPU guarantee and limit, its weight in fair share, its named
priorities; read from and written to the JSON `PUT /v1/queues/{name}` takes:

    {"guarantee": {"gpus": 8}, "limit": {"gpus": 16}, "weight": 1,
     "priorities": {"high": 100, "low": -100}}

A queue is a Mesos role (its name is the role's); its guarantee and limit are the
role's quota where Mesos enforces them (`mesos_quota.py`). Only `gpus` is counted
here, in the unit of `gpu_units.py`: CPU and memory quota stay the Mesos role's own.
No limit means up to the whole cluster. A bad body raises QueueError naming the field.
"""
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Dict, Mapping, Optional, Tuple

from framework.queues.state.errors import QueueError
from framework.queues.state.gpu_units import amount_json, read_amount

DEFAULT_QUEUE = "*"                # the framework's role: work naming no queue runs there
DEFAULT_PRIORITY = 0
# a Mesos role name, one level (hierarchical roles eng/web are refused by name below)
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_PRIORITY_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
MAX_PRIORITY = 1_000_000
MAX_WEIGHT = 1000
FIELDS = ("name", "guarantee", "limit", "weight", "priorities")
RESOURCES = ("gpus",)


@dataclass(frozen=True)
class Queue:
    name: str
    guarantee: Fraction = Fraction(0)          # GPUs the queue gets back when it wants them
    limit: Optional[Fraction] = None           # GPUs it may hold at most; None: no limit
    weight: float = 1.0                        # its part of what is shared above guarantees
    priorities: Tuple[Tuple[str, int], ...] = field(default=())   # named levels, sorted

    def __post_init__(self):
        check_name(self.name)
        if self.name == DEFAULT_QUEUE and self.guarantee:
            raise QueueError("guarantee.gpus", "the default queue (role *) cannot have a "
                             "guarantee: Mesos refuses quota for role *")
        if self.limit is not None and self.limit < self.guarantee:
            raise QueueError("limit.gpus", f"{amount_json(self.limit)} is below the "
                             f"guarantee of {amount_json(self.guarantee)} GPUs")
        if not (isinstance(self.weight, (int, float)) and not isinstance(self.weight, bool)
                and math.isfinite(self.weight) and 0 < self.weight <= MAX_WEIGHT):
            raise QueueError("weight", f"must be a number above 0 and at most {MAX_WEIGHT}, "
                             f"got {self.weight!r}")

    def priority(self, value: object, field_name: str = "priority") -> int:
        """A unit's priority inside this queue: an integer, or one of its named levels."""
        if isinstance(value, str):
            for name, level in self.priorities:
                if name == value:
                    return level
            known = ", ".join(n for n, _ in self.priorities) or "none"
            raise QueueError(field_name, f"queue {self.name} has no priority {value!r} "
                             f"(its named priorities: {known})")
        return _check_priority(value, field_name)

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name,
                "guarantee": {"gpus": amount_json(self.guarantee)},
                "limit": {} if self.limit is None else {"gpus": amount_json(self.limit)},
                "weight": int(self.weight) if self.weight.is_integer() else self.weight,
                "priorities": dict(self.priorities)}


def default_queue(name: str = DEFAULT_QUEUE) -> Queue:
    """The queue of work that names none: the framework's role, no guarantee, no limit."""
    return Queue(name=name)


def check_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise QueueError("name", f"must be a non-empty string, got {name!r}")
    if name == DEFAULT_QUEUE:
        return name
    if "/" in name:
        raise QueueError("name", f"{name!r}: hierarchical roles are not supported as "
                         "queues; name one level, such as team-a")
    if not _NAME.match(name):
        raise QueueError("name", f"{name!r} is not a Mesos role name: letters, digits, "
                         "'_', '.', '-', at most 64, not starting with '.' or '-'")
    return name


def queue_from_json(name: str, body: object) -> Queue:
    """The queue `name` from a PUT body; the body may repeat the name, never differ."""
    if not isinstance(body, dict):
        raise QueueError("", "the queue must be a JSON object such as "
                         '{"guarantee": {"gpus": 8}, "limit": {"gpus": 16}, "weight": 1}', 400)
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise QueueError(unknown[0], f"is not a field of a queue (fields: {', '.join(FIELDS)})")
    check_name(name)
    if "name" in body and body["name"] != name:
        raise QueueError("name", f"{body['name']!r} differs from the queue's name {name!r} "
                         "in the path")
    guarantee = _resources(body.get("guarantee", {}), "guarantee")
    limit = _resources(body.get("limit", {}), "limit")
    weight = body.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise QueueError("weight", f"must be a number above 0, got {weight!r}")
    return Queue(name=name, guarantee=guarantee if guarantee is not None else Fraction(0),
                 limit=limit, weight=float(weight),
                 priorities=_priorities(body.get("priorities", {})))


def _resources(value: object, name: str) -> Optional[Fraction]:
    if not isinstance(value, dict):
        raise QueueError(name, f'must be an object such as {{"gpus": 8}}, got {value!r}')
    for resource in value:
        if resource not in RESOURCES:
            raise QueueError(f"{name}.{resource}", "queues count only gpus; set CPU and "
                             "memory quota on the Mesos role itself (UPDATE_QUOTA)")
    if "gpus" not in value:
        return None
    return read_amount(value["gpus"], f"{name}.gpus")


def _priorities(value: object) -> Tuple[Tuple[str, int], ...]:
    if not isinstance(value, dict):
        raise QueueError("priorities", f'must be an object such as {{"high": 100}}, '
                         f"got {value!r}")
    for name, level in value.items():
        if not _PRIORITY_NAME.match(name):
            raise QueueError(f"priorities.{name}", "a priority's name is lower-case "
                             "letters, digits and '-', starting with a letter")
        _check_priority(level, f"priorities.{name}")
    return tuple(sorted(value.items()))


def _check_priority(value: object, field_name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_PRIORITY:
        raise QueueError(field_name, f"must be an integer from -{MAX_PRIORITY} to "
                         f"{MAX_PRIORITY}, got {value!r}")
    return value


def queues_by_name(queues: Mapping[str, Queue] | Tuple[Queue, ...]) -> Dict[str, Queue]:
    """Queues by name, the default queue included when missing."""
    found = dict(queues) if isinstance(queues, Mapping) else {q.name: q for q in queues}
    found.setdefault(DEFAULT_QUEUE, default_queue())
    return found
