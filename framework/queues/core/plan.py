"""One pass of the queue policy: what to admit and in which order, what to preempt and
why, and why every other unit waits and where it stands in its queue.

Order inside a queue: priority (higher first), then arrival, strictly: a unit never
passes one ahead of it in its own queue, so priorities mean what they say and a big
gang is not starved by small work behind it. Across queues, two phases:

1. Guarantees. Work that fits within its queue's guarantee goes first, the queue
   furthest below its guarantee first. If the GPUs are not free, the free ones are kept
   for it and borrowed ones are reclaimed (`reclaim.choose_victims`): notices are given
   and the GPUs come back at the deadline, to this queue. Notices already given count
   (GPUs on their way), so running the pass again preempts nothing more.
2. Borrowing. Work above its queue's guarantee, up to the queue's limit, by fair share
   (`fair_share.fair_key`: lowest first). When the head of that order does not fit the
   free GPUs, borrowing stops for everyone until it does (no backfill: the fair order
   holds, and a gang waiting for room collects it).

Nothing is preempted except for a queue owed its guarantee (a guarantee cut only makes
the overflow borrowed). Placement on agents is the scheduler's: this pass counts GPUs.
"""
import time
from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from framework.queues.core.fair_share import RecentUse, fair_key
from framework.queues.core.reclaim import VictimKey, choose_victims, least_work_lost
from framework.queues.state.gpu_units import amount_json, describe
from framework.queues.state.notice import PreemptionNotice, grace_seconds
from framework.queues.state.queue import Queue, queues_by_name
from framework.queues.state.work import RunningUnit, WaitingUnit

ZERO = Fraction(0)


@dataclass(frozen=True)
class Preemption:
    unit: RunningUnit
    notice: PreemptionNotice           # to every task of the unit, then SIGKILL at deadline


# why a unit waits, as a word for /metrics and the bench (the reason says it in full)
RECLAIMING = "reclaiming"              # within its guarantee; borrowed GPUs on their way
OWED = "owed"                          # within its guarantee; nothing can be reclaimed
AT_LIMIT = "at-limit"                  # its queue would pass its limit
NEVER_FITS = "never-fits"              # more than its queue's limit or the cluster
NEXT = "next-by-fair-share"            # borrows next, when enough GPUs are free
CLUSTER_FULL = "cluster-full"          # another queue borrows next
BEHIND = "behind"                      # its queue's first waiting unit waits


@dataclass(frozen=True)
class Waiting:
    unit: WaitingUnit
    position: int                      # 1: first of its queue's waiting work
    reason: str                        # why it waits, in words
    kind: str                          # one of the words above

    @property
    def text(self) -> str:
        return f"{ordinal(self.position)} in queue {self.unit.queue}: {self.reason}"

    def to_json(self) -> Dict[str, Any]:
        return {"id": self.unit.id, "queue": self.unit.queue, "gpus": amount_json(self.unit.gpus),
                "priority": self.unit.priority, "position": self.position, "why": self.kind,
                "reason": self.text}


@dataclass(frozen=True)
class QueueStatus:
    """A queue's figures for the API, the dashboard and /metrics."""
    queue: Queue
    held: Fraction                     # GPUs its running work holds
    borrowed: Fraction                 # held above its guarantee
    lent: Fraction                     # its unused guarantee other queues' work holds
    waiting: int
    waiting_gpus: Fraction
    fair_key: float

    def to_json(self) -> Dict[str, Any]:
        """A queue as `GET /v1/queues` lists it: its definition and its use."""
        return {**self.queue.to_json(),
                "use": {"gpus": amount_json(self.held)},
                "borrowed": {"gpus": amount_json(self.borrowed)},
                "lent": {"gpus": amount_json(self.lent)},
                "waiting": {"units": self.waiting, "gpus": amount_json(self.waiting_gpus)}}


@dataclass(frozen=True)
class Plan:
    admit: Tuple[WaitingUnit, ...]     # in the order the scheduler places them
    preempt: Tuple[Preemption, ...]
    waiting: Tuple[Waiting, ...]       # each queue's in order
    queues: Tuple[QueueStatus, ...]

    def why(self, unit_id: str) -> Optional[Waiting]:
        for item in self.waiting:
            if item.unit.id == unit_id:
                return item
        return None


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def clock(seconds: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(seconds))


def queue_order(waiting: Iterable[WaitingUnit]) -> Dict[str, List[WaitingUnit]]:
    """Each queue's waiting units: priority (higher first), then arrival, then id."""
    by_queue: Dict[str, List[WaitingUnit]] = defaultdict(list)
    for unit in waiting:
        by_queue[unit.queue].append(unit)
    for units in by_queue.values():
        units.sort(key=lambda u: (-u.priority, u.arrived_at, u.id))
    return by_queue


def plan(queues: Union[Mapping[str, Queue], Sequence[Queue]],
         running: Sequence[RunningUnit], waiting: Sequence[WaitingUnit],
         capacity: Union[int, Fraction], now: float, recent: Optional[RecentUse] = None,
         victim_order: VictimKey = least_work_lost) -> Plan:
    """The pass (see the module's docstring). `queues`: with the figures that hold
    (`mesos_quota.effective_quota`); `capacity`: GPUs of the cluster's healthy agents;
    `recent`: what `RecentUse.advance` keeps between passes."""
    return _Pass(queues_by_name(queues), running, waiting, Fraction(capacity), now,
                 recent, victim_order).run()


class _Pass:
    def __init__(self, queues, running, waiting, capacity, now, recent, victim_order):
        self.queues: Dict[str, Queue] = queues
        self.running, self.now, self.recent = list(running), now, recent
        self.victim_order = victim_order
        self.capacity = capacity
        self.held: Dict[str, Fraction] = defaultdict(Fraction)
        self.incoming: Dict[str, Fraction] = defaultdict(Fraction)   # on their way, by owed
        self.incoming_from: Dict[str, set] = defaultdict(set)
        self.deadline: Dict[str, float] = {}
        self.leaving: Dict[str, Fraction] = defaultdict(Fraction)    # under notice, by holder
        for unit in self.running:
            self.held[unit.queue] += unit.gpus
            if unit.under_notice:
                self.leaving[unit.queue] += unit.gpus
                owed = unit.reclaimed_for
                self.incoming[owed] += unit.gpus
                self.incoming_from[owed].add(unit.queue)
                self.deadline[owed] = max(self.deadline.get(owed, 0.0), unit.notice_deadline)
        self.free = max(ZERO, capacity - sum(self.held.values(), ZERO))
        self.use = dict(self.held)                       # held + admitted + kept for
        self.order = queue_order(waiting)
        self.position = {u.id: i + 1 for units in self.order.values()
                         for i, u in enumerate(units)}
        self.pending = {q: list(units) for q, units in self.order.items()}
        self.admitted: List[WaitingUnit] = []
        self.admitted_ids: set = set()
        self.preempted: List[Preemption] = []
        self.reasons: Dict[str, Tuple[str, str]] = {}
        self.blocked: Dict[str, str] = {}               # queue -> the unit it waits behind
        self.waits_for: Dict[str, str] = {}             # queue -> its first unit owed GPUs

    # -- the two phases ---------------------------------------------------------------
    def run(self) -> Plan:
        self._refuse_what_never_fits()
        self._guarantees()
        self._borrowing()
        return self._result()

    def _refuse_what_never_fits(self) -> None:
        for name, units in self.pending.items():
            queue = self.queues.get(name)
            for unit in list(units):
                if queue is None:
                    why = f"queue {name} does not exist"
                elif queue.limit is not None and unit.gpus > queue.limit:
                    why = (f"asks for {describe(unit.gpus)}, more than queue {name}'s limit "
                           f"of {describe(queue.limit)}: it can never run there")
                elif unit.gpus > self.capacity:
                    why = (f"asks for {describe(unit.gpus)}, more than the cluster's "
                           f"{describe(self.capacity)}")
                else:
                    continue
                units.remove(unit)
                self.reasons[unit.id] = (NEVER_FITS, why)

    def _guarantees(self) -> None:
        while True:
            owed = [(self._owed_ratio(q), q) for q, units in self.pending.items()
                    if units and q not in self.blocked
                    and self.use.get(q, ZERO) + units[0].gpus <= self.queues[q].guarantee]
            if not owed:
                return
            _, name = min(owed)
            unit = self.pending[name].pop(0)
            if unit.gpus <= self.free:
                self._admit(unit)
            else:
                self._reclaim_for(unit)

    def _owed_ratio(self, name: str) -> Tuple[float, str]:
        guarantee = self.queues[name].guarantee      # 0: only work needing no GPU fits
        return (float(self.use.get(name, ZERO) / guarantee) if guarantee else 0.0), name

    def _reclaim_for(self, unit: WaitingUnit) -> None:
        """`unit` fits its guarantee but not the free GPUs: keep those for it, count the
        GPUs already on their way to its queue, reclaim the rest."""
        name = unit.queue
        from_free = min(self.free, unit.gpus)
        self.free -= from_free
        from_incoming = min(self.incoming[name], unit.gpus - from_free)
        self.incoming[name] -= from_incoming
        shortfall = unit.gpus - from_free - from_incoming
        self.use[name] = self.use.get(name, ZERO) + unit.gpus
        # the queue's next units within its guarantee reclaim in this same pass (one grace
        # period for a whole backlog, not one per unit); none of it borrows meanwhile
        self.waits_for.setdefault(name, unit.id)
        if shortfall <= 0:
            self.reasons[unit.id] = (RECLAIMING, self._on_their_way(
                unit, self.incoming_from[name], self.deadline[name]))
            return
        holding = {q: self.held[q] - self.leaving[q] for q in self.held}
        victims = choose_victims(shortfall, self.running, holding, self.queues, self.now,
                                 self.victim_order)
        if not victims:
            self.blocked[name] = unit.id                 # nothing behind it goes first
            self.reasons[unit.id] = (OWED,
                f"within its guarantee of {describe(self.queues[name].guarantee)}, waiting "
                f"for {describe(shortfall)} more: none can be reclaimed (no other queue "
                f"holds preemptible work above its guarantee); free GPUs are kept for it")
            return
        deadline = 0.0
        for victim in victims:
            notice = PreemptionNotice(unit=victim.id, tasks=victim.tasks, queue=victim.queue,
                                      reclaimed_for=name, given_at=self.now,
                                      grace_seconds=grace_seconds(victim.kill_grace_seconds))
            self.preempted.append(Preemption(victim, notice))
            self.leaving[victim.queue] += victim.gpus
            deadline = max(deadline, notice.deadline)
            self.running = [u for u in self.running if u.id != victim.id]
        over = sum((v.gpus for v in victims), ZERO) - shortfall
        self.incoming[name] += over                      # more than needed: later units'
        self.incoming_from[name] |= {v.queue for v in victims}
        self.deadline[name] = max(self.deadline.get(name, 0.0), deadline)
        self.reasons[unit.id] = (RECLAIMING, self._on_their_way(
            unit, {v.queue for v in victims}, deadline))

    def _on_their_way(self, unit: WaitingUnit, sources: Iterable[str], deadline: float) -> str:
        return (f"waiting for {describe(unit.gpus)} reclaimed from "
                f"{', '.join(sorted(sources)) or 'work that ends'}; notice given, "
                f"deadline {clock(deadline)}")

    def _borrowing(self) -> None:
        for name, first in self.waits_for.items():
            self.blocked.setdefault(name, first)
        while True:
            heads = []
            for name, units in self.pending.items():
                if not units or name in self.blocked:
                    continue
                queue, unit = self.queues[name], units[0]
                if queue.limit is not None and self.use.get(name, ZERO) + unit.gpus > queue.limit:
                    self.reasons[unit.id] = (AT_LIMIT, f"queue {name} at its limit of "
                                             f"{describe(queue.limit)} "
                                             f"({describe(self.use.get(name, ZERO))} held)")
                    self.blocked[name] = unit.id
                    units.pop(0)
                    continue
                heads.append((self._key_with(name, unit.gpus), name))
            if not heads:
                return
            _, name = min(heads)
            unit = self.pending[name][0]
            if unit.gpus > self.free:
                self._cluster_full(name, unit)
                return
            self.pending[name].pop(0)
            self._admit(unit)

    def _key_with(self, name: str, gpus: Fraction) -> float:
        """The queue's fair key counting half of the unit it would take: keys compared
        before admission favour queues of small weight (each overshoots by its unit, a
        big part of a small share), after admission queues of small units; half way is
        unbiased (measured: the bench's smallest team went from 5 % over to 2 % under)."""
        use, half = self.use.get(name, ZERO), gpus / 2
        recent = self.recent.of(name) if self.recent else None
        past = float(use if recent is None else recent) + float(half)
        return fair_key(use + half, past, self.queues[name].weight)

    def _cluster_full(self, first: str, unit: WaitingUnit) -> None:
        self.pending[first].pop(0)
        self.reasons[unit.id] = (NEXT, f"next by fair share, waiting for {describe(unit.gpus)}: "
                                 f"{describe(self.free)} free; borrowing waits until they are")
        self.blocked[first] = unit.id
        self.free = ZERO
        for name, units in self.pending.items():
            if units and name not in self.blocked:
                head = units.pop(0)
                guarantee = describe(self.queues[name].guarantee)
                self.reasons[head.id] = (CLUSTER_FULL, f"the cluster is full; queue {name} is "
                                         f"above its guarantee of {guarantee} and queue "
                                         f"{first} borrows next by fair share")
                self.blocked[name] = head.id

    def _admit(self, unit: WaitingUnit) -> None:
        self.free -= unit.gpus
        self.use[unit.queue] = self.use.get(unit.queue, ZERO) + unit.gpus
        self.admitted.append(unit)
        self.admitted_ids.add(unit.id)

    # -- the answer -------------------------------------------------------------------
    def _result(self) -> Plan:
        waiting = []
        for name, units in self.order.items():
            for unit in units:
                if unit.id in self.admitted_ids:
                    continue
                kind, why = self.reasons.get(unit.id, (BEHIND, ""))
                if kind == BEHIND:
                    ahead = self.blocked.get(name)
                    why = (f"behind {ahead}, which waits" if ahead else
                           "behind work of higher priority or earlier arrival")
                waiting.append(Waiting(unit, self.position[unit.id], why, kind))
        return Plan(tuple(self.admitted), tuple(self.preempted), tuple(waiting),
                    self._statuses())

    def _statuses(self) -> Tuple[QueueStatus, ...]:
        guaranteed = sum((q.guarantee for q in self.queues.values()), ZERO)
        borrowed = {n: max(ZERO, self.held[n] - q.guarantee) for n, q in self.queues.items()}
        unused = {n: max(ZERO, q.guarantee - self.held[n]) for n, q in self.queues.items()}
        # borrowers use GPUs nobody is guaranteed first; the rest is lent, pro rata
        lent_total = max(ZERO, sum(borrowed.values(), ZERO) - max(ZERO, self.capacity - guaranteed))
        unused_total = sum(unused.values(), ZERO)
        statuses = []
        for name in sorted(self.queues):
            queue = self.queues[name]
            lent = lent_total * unused[name] / unused_total if unused_total else ZERO
            left = [u for u in self.order.get(name, []) if u.id not in self.admitted_ids]
            recent = self.recent.of(name) if self.recent else None
            statuses.append(QueueStatus(queue, self.held[name], borrowed[name],
                                        min(lent, unused[name]), len(left),
                                        sum((u.gpus for u in left), ZERO),
                                        fair_key(self.held[name], recent, queue.weight)))
        return tuple(statuses)
