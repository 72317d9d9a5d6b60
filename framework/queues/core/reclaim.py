"""Which running units give borrowed GPUs back to a queue below its guarantee.

Rules: a unit is whole (a gang is preempted with all of its tasks or not at all);
only preemptible units not already under notice; only from a queue above its
guarantee at the moment it is chosen (a queue at or below its guarantee is never
touched); lowest priority first, then least work lost per GPU freed (time since the
last checkpoint, else since start: the ratio that makes a greedy cover cheap), then the
youngest; never more than needed (a chosen unit whose GPUs the others already cover is
dropped); and never a preemption that cannot cover the need (killing work that still
leaves the owed unit waiting helps nobody).
"""
from fractions import Fraction
from typing import Callable, Dict, Iterable, List, Mapping, Sequence, Tuple

from framework.queues.state.queue import Queue
from framework.queues.state.work import RunningUnit

VictimKey = Callable[[RunningUnit, float], tuple]


def least_work_lost(unit: RunningUnit, now: float) -> tuple:
    return (unit.priority, now - unit.unsaved_since(), -unit.started_at, unit.id)


def youngest_first(unit: RunningUnit, now: float) -> tuple:
    """Marathon's killSelection YOUNGEST_FIRST (the bench's baseline)."""
    return (unit.priority, -unit.started_at, unit.id)


VICTIM_ORDERS: Dict[str, VictimKey] = {"least-work-lost": least_work_lost,
                                        "youngest-first": youngest_first}


def choose_victims(need: Fraction, running: Iterable[RunningUnit],
                   holding: Mapping[str, Fraction], queues: Mapping[str, Queue],
                   now: float, order: VictimKey = least_work_lost) -> Tuple[RunningUnit, ...]:
    """Units whose GPUs together cover `need`, or () when no allowed set does.
    `holding`: GPUs each queue holds net of what is already on its way back."""
    if need <= 0:
        return ()
    candidates = sorted((u for u in running if u.preemptible and not u.under_notice
                         and u.queue in queues), key=lambda u: order(u, now))
    left = dict(holding)
    chosen: List[RunningUnit] = []
    freed = Fraction(0)
    for unit in candidates:
        if freed >= need:
            break
        if left.get(unit.queue, 0) <= queues[unit.queue].guarantee or unit.gpus == 0:
            continue
        chosen.append(unit)
        freed += unit.gpus
        left[unit.queue] = left.get(unit.queue, 0) - unit.gpus
    if freed < need:
        return ()
    chosen = _without_extra(chosen, need, now)
    if order is least_work_lost:
        chosen = _one_cheaper_unit(chosen, candidates, need, holding, queues, now)
    return tuple(chosen)


def _without_extra(chosen: Sequence[RunningUnit], need: Fraction,
                   now: float) -> List[RunningUnit]:
    """Drop units the others cover, costliest first, so none is preempted for nothing."""
    kept = list(chosen)
    freed = sum((u.gpus for u in kept), Fraction(0))
    for unit in sorted(chosen, key=lambda u: (-u.work_lost(now), u.id)):
        if freed - unit.gpus >= need:
            kept.remove(unit)
            freed -= unit.gpus
    return kept


def _one_cheaper_unit(chosen: List[RunningUnit], candidates: Sequence[RunningUnit],
                      need: Fraction, holding: Mapping[str, Fraction],
                      queues: Mapping[str, Queue], now: float) -> List[RunningUnit]:
    """One unit alone, of no higher priority than the set's highest, that covers the need
    with less work lost (a greedy cover by ratio can miss it)."""
    top = max(u.priority for u in chosen)
    cost = sum(u.work_lost(now) for u in chosen)
    best = None
    for unit in candidates:
        if unit.priority > top or unit.gpus < need or \
                holding.get(unit.queue, 0) <= queues[unit.queue].guarantee:
            continue
        lost = unit.work_lost(now)
        if lost < cost and (best is None or lost < best.work_lost(now)):
            best = unit
    return [best] if best is not None else chosen
