"""Gangs: tasks placed and launched all together or not at all, over the offers of
one round plus those held for the gang at the head of the queue (at most HOLD_SECONDS,
then declined with a short filter), packed onto the fewest nodes, constraints holding
for the gang as a whole. Why holding and this order: ARCHITECTURE.md, "Gangs"."""
import copy
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

from framework.scheduling.agent_inventory import AgentSeen
from framework.scheduling.matching import Matcher, OfferSlot
from framework.tasks.ports import PortRanges
from framework.tasks.task_spec import TaskSpec

_ANY_PORTS = PortRanges.from_offer({"resources": [{"name": "ports", "type": "RANGES", "ranges": {
    "range": [{"begin": 1, "end": 65535}]}}]})
HOLD_SECONDS = 10.0           # longest an offer is held for a gang being placed
RELEASE_REFUSE_SECONDS = 1.0  # a released offer comes back this soon


@dataclass
class GangRound:
    """What one round of gang placement decided."""
    placements: dict[str, list[TaskSpec]] = field(default_factory=dict)  # offer id -> members
    held: set[str] = field(default_factory=set)          # offers kept for the head gang
    reasons: dict[str, str] = field(default_factory=dict)  # gang -> why it waits
    placed: list[str] = field(default_factory=list)      # gangs placed, in order


def gangs_of(specs: Iterable[TaskSpec]) -> tuple[list[list[TaskSpec]], list[TaskSpec]]:
    """The complete gangs among waiting tasks (every member waits), ranks in order,
    and the tasks that are no gang's. Members of an incomplete gang (a member still
    running, or not yet submitted) are neither: they wait."""
    members: dict[str, list[TaskSpec]] = {}
    single = []
    for spec in specs:
        if spec.gang and spec.gang_size > 1:
            members.setdefault(spec.gang, []).append(spec)
        else:
            single.append(spec)
    gangs = [sorted(m, key=lambda s: s.rank) for m in members.values()
             if len(m) == m[0].gang_size]
    return gangs, single


def place(matcher: Matcher, gangs: Sequence[list[TaskSpec]], slots: list[OfferSlot],
          agents: Sequence[AgentSeen] = (), variants: Any = None) -> GangRound:
    """Place `gangs` (queue order) into `slots`, which keep what the placed gangs took."""
    out = GangRound()
    reserved: set[str] = set()
    refused: dict[tuple, str] = {}      # gangs of one kind: slots only shrink in a round
    for gang in gangs:
        name = gang[0].gang
        kind = _kind(gang)
        if kind in refused:
            out.reasons[name] = refused[kind]
            continue
        free = [s for s in slots if s.offer_id not in reserved]
        chosen = _place_one(matcher, gang, free, variants)
        if chosen is not None:
            by_id = {s.offer_id: s for s in slots}
            for slot in chosen:
                original = by_id[slot.offer_id]
                taken = [t for t in slot.tasks if t.gang == name]
                original.__dict__.update(slot.__dict__)
                out.placements.setdefault(slot.offer_id, []).extend(taken)
            out.placed.append(name)
            continue
        capacity = matcher.capacity(gang[0], free, variants)
        out.reasons[name] = refused[kind] = _reason(gang, capacity, free, agents, matcher)
        if not reserved and could_ever_fit(matcher, gang[0], agents):
            reserved = set(capacity)           # the head gang holds what it could use
            out.held = set(reserved)
            refused.clear()                    # later gangs see fewer offers than it did
    return out


def _kind(gang: list[TaskSpec]) -> tuple:
    """What decides whether a gang fits: its size and its members' shape and rules."""
    head = gang[0]
    return (len(gang), head.cpus, head.mem, head.disk, head.gpus, head.mig_profile,
            head.constraints, head.image, head.labels.get("GPU_SCHEDULING_BEHAVIOR"),
            len(head.ports))


def _place_one(matcher: Matcher, gang: list[TaskSpec], slots: list[OfferSlot],
               variants: Any) -> Optional[list[OfferSlot]]:
    """Copies of the slots the whole gang went into, or None (nothing changed)."""
    head = gang[0]
    capacity = matcher.capacity(head, slots, variants)
    if sum(capacity.values()) < len(gang):
        return None
    by_id = {s.offer_id: s for s in slots}
    if matcher.has_dynamic(head):
        candidates = [by_id[o] for o in capacity]        # the constraints choose
    else:
        candidates = [by_id[o] for o in _fewest_nodes(capacity, len(gang))]
    trial = [copy.deepcopy(s) for s in candidates]
    result = matcher.match_slots(gang, trial, None, variants)
    if result.unplaced:
        return None
    return [s for s in trial if any(t.gang == head.gang for t in s.tasks)]


def _fewest_nodes(capacity: dict[str, int], members: int) -> list[str]:
    """Offers to pack `members` onto: the tightest single one that takes all, else
    the roomiest first until all fit."""
    whole = [o for o, n in capacity.items() if n >= members]
    if whole:
        return [min(whole, key=lambda o: capacity[o])]
    chosen, room = [], 0
    for offer_id in sorted(capacity, key=lambda o: -capacity[o]):
        chosen.append(offer_id)
        room += capacity[offer_id]
        if room >= members:
            break
    return chosen


def could_ever_fit(matcher: Matcher, spec: TaskSpec, agents: Sequence[AgentSeen]) -> bool:
    """Whether the agents seen, all of their GPUs free, have room for the gang (by
    GPUs and static constraints: cpus and memory are not known whole). An agent's GPUs
    are the most it was seen with: a GPU whose task just ended is in no offer yet."""
    if not spec.whole_gpus:
        return True
    slots = [_whole_agent(a, i) for i, a in enumerate(agents) if a.lost_at is None]
    per_agent = matcher.capacity(spec, slots)
    return sum(per_agent.values()) >= spec.gang_size


def _whole_agent(agent: AgentSeen, order: int) -> OfferSlot:
    return OfferSlot(offer_id=agent.agent_id, agent_id=agent.agent_id, hostname=agent.hostname,
                     cpus=1 << 40, mem=1 << 40, disk=1 << 40,
                     gpus=max(agent.gpus, agent.most_gpus),
                     fields=dict(agent.fields), order=order, ports=_ANY_PORTS)


def _reason(gang: list[TaskSpec], capacity: dict[str, int], slots: Sequence[OfferSlot],
            agents: Sequence[AgentSeen], matcher: Matcher) -> str:
    """Why a gang waits, in words an operator acts on."""
    head = gang[0]
    size = len(gang)
    what = f"{head.whole_gpus} GPU(s) each" if head.whole_gpus else \
        f"{head.cpus:g} cpus, {head.mem:g} MB each"
    constrained = ", ".join(str(c) for c in head.constraints)
    if not could_ever_fit(matcher, head, agents):
        total = sum(matcher.capacity(head, [_whole_agent(a, i) for i, a in enumerate(agents)
                                            if a.lost_at is None]).values())
        return (f"gang of {size} ({what}): the agents seen have room for {total} of them "
                f"even when free" + (f" ({constrained})" if constrained else ""))
    fits = sum(capacity.values())
    nodes = sum(1 for n in capacity.values() if n)
    where = f" on {nodes} node(s)" if nodes else ""
    return (f"gang of {size} ({what}): the offers place {min(fits, size)} of {size}{where}"
            + (f" qualifying for {constrained}" if constrained else "")
            + "; waiting for the rest to free up (no member starts before all can)")
