"""Short builders of the policy's inputs for the tests."""
from fractions import Fraction
from typing import Optional

from framework.queues.state.queue import Queue
from framework.queues.state.work import RunningUnit, WaitingUnit

NOW = 1_795_780_800.0          # 2026-11-27T12:00:00Z


def queue(name: str, guarantee=0, limit=None, weight=1.0) -> Queue:
    return Queue(name, Fraction(guarantee), None if limit is None else Fraction(limit), weight)


def running(id: str, queue: str, gpus, started: float = NOW - 3600, priority: int = 0,
            checkpoint: Optional[float] = None, tasks: int = 1, preemptible: bool = True,
            grace: Optional[float] = None, deadline: Optional[float] = None,
            reclaimed_for: str = "") -> RunningUnit:
    return RunningUnit(id=id, queue=queue, gpus=gpus, started_at=started,
                       tasks=tuple(f"{id}.{k}" for k in range(tasks)), priority=priority,
                       last_checkpoint=checkpoint, preemptible=preemptible,
                       kill_grace_seconds=grace, notice_deadline=deadline,
                       reclaimed_for=reclaimed_for)


def waiting(id: str, queue: str, gpus, arrived: float = NOW - 60, priority: int = 0,
            tasks: int = 1) -> WaitingUnit:
    return WaitingUnit(id=id, queue=queue, gpus=gpus, priority=priority, arrived_at=arrived,
                       tasks=tasks)


def given_notice(unit: RunningUnit, notice) -> RunningUnit:
    """`unit` as the next pass sees it once its notice was given."""
    from dataclasses import replace
    return replace(unit, notice_deadline=notice.deadline, reclaimed_for=notice.reclaimed_for)
