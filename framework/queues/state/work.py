"""Units of work as the queue policy sees them: a single task or a whole gang, never a
part of one (a gang is admitted, preempted and requeued whole, so its notice names all
of its tasks). The integration adapts runs, gangs and app instances to these; the
policy needs nothing else of them. Times are seconds since the epoch; GPUs are in the
unit of `gpu_units.py`.
"""
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional, Tuple, Union

Number = Union[int, float, Fraction]


def _gpus(value: Number) -> Fraction:
    amount = Fraction(repr(value)) if isinstance(value, float) else Fraction(value)
    if amount < 0:
        raise ValueError(f"gpus: {value!r} is negative")
    return amount


@dataclass(frozen=True)
class WaitingUnit:
    """Work waiting for GPUs: a run, a gang of runs, or an app's instance."""
    id: str
    queue: str
    gpus: Fraction
    priority: int = 0
    arrived_at: float = 0.0            # when it entered the queue (a preempted run: its
                                       # first arrival, so requeueing never sends it back)
    tasks: int = 1                     # a gang's size (1: a single task)

    def __post_init__(self):
        if not self.id:
            raise ValueError("id: a unit of work needs one")
        object.__setattr__(self, "gpus", _gpus(self.gpus))
        if self.tasks < 1:
            raise ValueError(f"tasks: {self.tasks} (a unit has at least one task)")


@dataclass(frozen=True)
class RunningUnit:
    """Work holding GPUs. `notice_deadline` is set once a preemption notice was given:
    its GPUs are on their way back, to the queue `reclaimed_for`, and it is never chosen
    again (a second notice would shorten a deadline the task already read)."""
    id: str
    queue: str
    gpus: Fraction
    started_at: float
    tasks: Tuple[str, ...]             # every task of the unit: all get the notice
    priority: int = 0
    last_checkpoint: Optional[float] = None     # reported by the task (API or sandbox file)
    preemptible: bool = True
    kill_grace_seconds: Optional[float] = None  # taskKillGracePeriodSeconds, when set
    notice_deadline: Optional[float] = None
    reclaimed_for: str = ""

    def __post_init__(self):
        if not self.id:
            raise ValueError("id: a unit of work needs one")
        if not self.tasks:
            raise ValueError(f"tasks: unit {self.id} names none (a gang names all of its)")
        object.__setattr__(self, "gpus", _gpus(self.gpus))

    @property
    def under_notice(self) -> bool:
        return self.notice_deadline is not None

    def unsaved_since(self) -> float:
        """Since when its work would be lost: its last checkpoint, else its start."""
        if self.last_checkpoint is None:
            return self.started_at
        return max(self.started_at, self.last_checkpoint)

    def work_lost(self, at: float) -> float:
        """GPU-seconds lost if it is killed at `at` (GPUs x time since it last saved)."""
        return float(self.gpus) * max(0.0, at - self.unsaved_since())
