"""Which running units give borrowed GPUs back to a queue below its guarantee.

Rules: a unit is whole (a gang is preempted with all of its tasks or not at all);
only preemptible units not already under notice; only from a queue above its
guarantee at the moment it is chosen (a queue at or below its guarantee is never
touched); lowest priority first, then least work lost: GPUs x time since the last
checkpoint (else since start). Units are taken in order of work lost per GPU freed
(time since the last save), keeping the cheapest set that covers the need; never more
than needed (a chosen unit whose GPUs the others already cover is dropped); and never
a preemption that cannot cover the need (killing work that still leaves the owed unit
waiting helps nobody).
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
                         and u.queue in queues and u.gpus > 0), key=lambda u: order(u, now))
    if order is least_work_lost:
        chosen = _cheapest_cover(need, candidates, holding, queues, now)
    else:
        chosen = _first_cover(need, candidates, holding, queues)
    if not chosen:
        return ()
    return tuple(_without_extra(chosen, need, now))


def _allowed(unit: RunningUnit, left: Mapping[str, Fraction],
             queues: Mapping[str, Queue]) -> bool:
    """Only from a queue still above its guarantee once the others chosen are gone."""
    return left.get(unit.queue, 0) > queues[unit.queue].guarantee


def _first_cover(need, candidates, holding, queues) -> List[RunningUnit]:
    """Units in order until they cover the need (the baseline's way)."""
    left, chosen, freed = dict(holding), [], Fraction(0)
    for unit in candidates:
        if freed >= need:
            break
        if _allowed(unit, left, queues):
            chosen.append(unit)
            freed += unit.gpus
            left[unit.queue] = left.get(unit.queue, 0) - unit.gpus
    return chosen if freed >= need else []


def _cheapest_cover(need, candidates, holding, queues, now) -> List[RunningUnit]:
    """A greedy cover by ratio (work lost per GPU, the sort order) that keeps every unit
    completing the cover as a candidate ending instead of stopping at the first: the
    cheapest set wins, among those reaching the lowest priority. Sets of whole units."""
    left, chosen, freed, cost = dict(holding), [], Fraction(0), 0.0
    best, best_key = None, None
    for unit in candidates:
        if not _allowed(unit, left, queues):
            continue
        lost = unit.work_lost(now)
        if freed + unit.gpus >= need:                    # an ending: keep the cheapest
            key = (max([u.priority for u in chosen] + [unit.priority]), cost + lost)
            if best_key is None or key < best_key:
                best, best_key = chosen + [unit], key
            continue
        chosen.append(unit)
        freed += unit.gpus
        cost += lost
        left[unit.queue] = left.get(unit.queue, 0) - unit.gpus
    return best or []


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
