"""Offer matching: which pending tasks go into which offers.

Resources are whole GPUs plus cpus, mem and disk (counted in thousandths, as
Mesos does, so 10 x 0.1 cpus fit exactly in 1 cpu). Several tasks may go into
one offer; what a task takes is subtracted before the next is placed.
Constraints are Marathon's (`framework.tasks.constraints`), checked against the
instances of the same app already running and those placed in this round.

GPU agents are kept for GPU work (Marathon's `--gpu_scheduling_behavior`):
`restricted` (the default) keeps a task without GPUs off offers that still hold
GPUs, `unrestricted` lets it in. A task's label `GPU_SCHEDULING_BEHAVIOR`
overrides the framework's choice. Either way offers are tried with the fewest
GPUs first, so small GPU tasks leave whole big agents to big ones.

Speed: 10,000 tasks are not matched one by one. Interchangeable tasks (same
resources, constraints and GPU behaviour; same app too when a constraint
depends on where the app already runs) form one group, placed together:
- the offers a group may use at all (LIKE, UNLIKE, IS, CLUSTER with a value)
  are worked out once per distinct constraint set, the regexes once per
  distinct attribute value;
- a group packs as many tasks into an offer as fit in one step, and a cursor
  per (offer list, task shape) skips offers already too full for that shape;
- UNIQUE / MAX_PER / CLUSTER rule an offer out for the rest of the group;
  GROUP_BY picks the least used value from a heap.

Ports: a task's port requests (framework.tasks.ports) come out of the offer's
`ports` ranges: any ports picked at random, fixed ones exactly; the ports each
placed task got are in its slot's `host_ports` (by task id), in request order.
Tasks asking for no port pay nothing for this.

GPU health: offered GPUs the agent daemon reports not healthy and free
(framework.gpus.gpu_health) are taken off the offer before anything is placed.

Shared GPUs: a task asking for a share (0 < gpus < 1) goes only on an agent's
gpu_shares_<index> resources (one per shared GPU, in slots of the agent's
gpu_share_granularity; isolator/sharing/plan.py), never on whole `gpus`; its
share must be a whole number of slots and at most the agent's gpu_share_max.
Within an offer it takes the fullest GPU it fits on (emptier GPUs stay free for
larger shares); which one is in its slot's `shared` (task id -> index, slots).

Image variants: given a `variants` selector (framework.images.variant_selection),
a task whose image it knows goes only to offers whose agent can run one of
the image's variants; tasks of one image group together, and which variant
each agent runs is worked out once per kind of agent (its platform_features).
"""
import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

from isolator.api import MIG_PROFILE_ATTRIBUTE, MIG_RESOURCE_PREFIX

from framework.tasks.constraints import Constraint, PlacedValues, meets, offer_fields
from framework.tasks.ports import PortRanges, wanted
from framework.tasks.task_spec import TaskSpec, TaskSpecError
from isolator.api import GRANULARITY_ATTRIBUTE, MAX_SHARE_ATTRIBUTE, SHARE_RESOURCE_PREFIX

if TYPE_CHECKING:
    from framework.images.variant_selection import Selector

RESTRICTED = "restricted"
UNRESTRICTED = "unrestricted"
GPU_SCHEDULING_BEHAVIORS = (RESTRICTED, UNRESTRICTED)
GPU_SCHEDULING_LABEL = "GPU_SCHEDULING_BEHAVIOR"

# Marathon's NoOfferMatchReason, in the order its matcher checks them
# (processedOffersSummary.rejectSummaryLastOffers in /v2/queue)
REJECT_REASONS = ("UnfulfilledRole", "UnfulfilledConstraint", "NoCorrespondingReservationFound",
                  "AgentMaintenance", "InsufficientCpus", "InsufficientMemory",
                  "InsufficientDisk", "InsufficientGpus", "InsufficientPorts",
                  "DeclinedScarceResources")

# Operators whose answer depends only on the offer, not on earlier placements.
_STATIC_OPERATORS = frozenset({"LIKE", "UNLIKE", "IS"})
_MILLI = 1000
_UNLIMITED = 1 << 30  # a task asking for no resources at all


def gpu_behavior(spec: TaskSpec, default: str = RESTRICTED) -> str:
    """The task's GPU scheduling behaviour: its label when it names one, else the
    framework's. As in Marathon 1.10 (`ResourceMatcher`), any other value of the
    label (its old default `undefined` among them) means the framework's."""
    chosen = spec.labels.get(GPU_SCHEDULING_LABEL, default)
    return chosen if chosen in GPU_SCHEDULING_BEHAVIORS else default


def _is_static(constraint: Constraint) -> bool:
    return constraint.operator in _STATIC_OPERATORS or (
        constraint.operator == "CLUSTER" and bool(constraint.value))


@dataclass
class OfferSlot:
    """An offer's unreserved resources, shrinking as tasks are placed in it."""
    offer_id: str
    agent_id: str
    hostname: str
    cpus: int  # thousandths
    mem: int
    disk: int
    gpus: int
    fields: dict[str, str]
    order: int
    tasks: list[TaskSpec] = field(default_factory=list)
    mig: dict[str, int] = field(default_factory=dict)   # MIG profile -> devices (mixed node)
    ports: PortRanges = field(default_factory=PortRanges)
    host_ports: dict[str, tuple] = field(default_factory=dict)   # task id -> its host ports
    shares: dict[int, int] = field(default_factory=dict)   # shared GPU index -> free slots
    shared: dict[str, tuple] = field(default_factory=dict)  # task id -> (GPU index, slots)

    @property
    def holds_gpus(self) -> bool:
        """Whole GPUs or slots of a shared GPU left: an offer for GPU work."""
        return self.gpus > 0 or any(self.shares.values())

    def slots_for(self, fraction: float) -> int:
        """The slots a share of `fraction` takes on this agent's shared GPUs; 0 when it
        cannot go here (no shared GPU, not a multiple of the granularity, above the
        largest share)."""
        try:
            granularity = float(self.fields.get(GRANULARITY_ATTRIBUTE, ""))
            largest = float(self.fields.get(MAX_SHARE_ATTRIBUTE, "1"))
        except ValueError:
            return 0
        if not granularity > 0 or fraction > largest + 1e-9:
            return 0
        slots = fraction / granularity
        return round(slots) if abs(slots - round(slots)) < 1e-6 and round(slots) >= 1 else 0

    @classmethod
    def from_offer(cls, offer: Mapping[str, Any], order: int = 0,
                   unusable_gpus: int = 0, unusable_shared: frozenset = frozenset()
                   ) -> "OfferSlot":
        """`unusable_gpus`: offered whole GPUs no task can get, `unusable_shared`: NVML
        indices of shared GPUs no share can go on (not healthy, framework.gpus.gpu_health)."""
        amounts = unreserved_scalars(offer)
        return cls(offer_id=offer["id"]["value"], agent_id=offer["agent_id"]["value"],
                   hostname=offer.get("hostname", ""),
                   cpus=round(amounts.get("cpus", 0.0) * _MILLI),
                   mem=round(amounts.get("mem", 0.0) * _MILLI),
                   disk=round(amounts.get("disk", 0.0) * _MILLI),
                   gpus=max(0, int(amounts.get("gpus", 0.0)) - unusable_gpus),
                   fields=offer_fields(offer), order=order, ports=PortRanges.from_offer(offer),
                   shares={i: n for i, n in shares_of(amounts).items()
                           if i not in unusable_shared},
                   mig={name[len(MIG_RESOURCE_PREFIX):]: int(value)
                        for name, value in amounts.items()
                        if name.startswith(MIG_RESOURCE_PREFIX) and value >= 1})


    def mig_pool(self, profile: str) -> Optional[str]:
        """The resource MIG devices of `profile` come from here: mig-<profile> on a
        mixed node, gpus on a single node of that profile; None: none here."""
        if profile in self.mig:
            return MIG_RESOURCE_PREFIX + profile
        if self.fields.get(MIG_PROFILE_ATTRIBUTE) == profile:
            return "gpus"
        return None

    def gpus_for(self, profile: str) -> int:
        """How many devices a task of this MIG profile ("": whole GPUs) may still get."""
        if not profile:
            # a single node's gpus are MIG devices: only a task naming the profile takes them
            return 0 if MIG_PROFILE_ATTRIBUTE in self.fields else self.gpus
        pool = self.mig_pool(profile)
        return 0 if pool is None else self.mig[profile] if pool != "gpus" else self.gpus


def share_reason(fraction: float, offers: Sequence[Mapping[str, Any]]) -> Optional[str]:
    """Why no offer can take a share of `fraction` for good (None: some agent could,
    once it has slots free): no shared GPU offered, or none whose granularity and
    largest share allow this fraction."""
    slots = [OfferSlot.from_offer(o) for o in offers]
    sharing = [s for s in slots if GRANULARITY_ATTRIBUTE in s.fields]
    if not sharing:
        return (f"gpus {fraction:g} is a share of a GPU and no offered agent has a shared "
                "GPU (mesos-gpu agent --shared_gpus)")
    if not any(s.slots_for(fraction) for s in sharing):
        allowed = sorted({(s.fields.get(GRANULARITY_ATTRIBUTE), s.fields.get(MAX_SHARE_ATTRIBUTE))
                          for s in sharing})
        return (f"gpus {fraction:g}: no offered agent shares GPUs in that size (their "
                "granularity and largest share: "
                + ", ".join(f"{g} up to {m}" for g, m in allowed) + ")")
    return None


def shares_of(amounts: Mapping[str, float]) -> dict[int, int]:
    """Shared GPU index -> slots offered, from the gpu_shares_<index> resources."""
    out = {}
    for name, value in amounts.items():
        index = name[len(SHARE_RESOURCE_PREFIX):] if name.startswith(SHARE_RESOURCE_PREFIX) else ""
        if index.isdigit() and value >= 1:
            out[int(index)] = int(value)
    return out


def unreserved_scalars(offer: Mapping[str, Any]) -> dict[str, float]:
    """Scalar resources of an offer that are not reserved for a role (only
    those are used: a task's resources are then plain `{name, scalar}`)."""
    totals: dict[str, float] = {}
    for resource in offer.get("resources", ()):
        if resource.get("type", "SCALAR") != "SCALAR" or "scalar" not in resource:
            continue
        if resource.get("reservations") or resource.get("reservation") \
                or resource.get("role", "*") != "*" or resource.get("disk") \
                or resource.get("revocable") is not None:
            continue
        totals[resource["name"]] = totals.get(resource["name"], 0.0) + resource["scalar"]["value"]
    return totals


@dataclass(frozen=True)
class _Shape:
    cpus: int
    mem: int
    disk: int
    gpus: int
    ports: int = 0                     # ports of any number
    fixed_ports: tuple[int, ...] = ()  # ports of a given number
    share: float = 0.0                 # a share of one shared GPU
    mig_profile: str = ""              # gpus are MIG devices of this profile


@dataclass
class _Group:
    """Interchangeable pending tasks, in queue order."""
    shape: _Shape
    static: tuple[Constraint, ...]
    dynamic: tuple[Constraint, ...]
    behavior: str
    app_id: str
    tasks: list[TaskSpec]
    image: Optional[str] = None   # an image with variants: only agents that run one


@dataclass
class MatchResult:
    placements: dict[str, list[TaskSpec]]  # offer id -> tasks, in placement order
    slots: dict[str, OfferSlot]            # offer id -> what is left of it
    unplaced: list[TaskSpec]

    def host_ports(self) -> dict[str, tuple]:
        """Task id -> the host ports it was given (tasks with port requests only)."""
        out: dict[str, tuple] = {}
        for offer_id in self.placements:
            out.update(self.slots[offer_id].host_ports)
        return out

    def shared_gpus(self) -> dict[str, tuple]:
        """Task id -> (shared GPU index, slots) for the tasks placed on a share."""
        out: dict[str, tuple] = {}
        for offer_id in self.placements:
            out.update(self.slots[offer_id].shared)
        return out


class Matcher:
    """Places pending tasks into offers; one `match` call per batch of offers."""

    def __init__(self, gpu_scheduling: str = RESTRICTED) -> None:
        if gpu_scheduling not in GPU_SCHEDULING_BEHAVIORS:
            raise TaskSpecError(f"gpu_scheduling: must be one of "
                                f"{', '.join(GPU_SCHEDULING_BEHAVIORS)}, got {gpu_scheduling!r}")
        self.gpu_scheduling = gpu_scheduling

    def match(self, pending: Sequence[TaskSpec], offers: Sequence[Mapping[str, Any]],
              placed: Optional[Mapping[str, Iterable[Mapping[str, str]]]] = None,
              variants: Optional["Selector"] = None,
              unusable_gpus: Optional[Mapping[str, int]] = None,
              unusable_shared: Optional[Mapping[str, frozenset]] = None) -> MatchResult:
        """`placed`: app id -> the `offer_fields` of the agents its running
        instances sit on (for UNIQUE, CLUSTER, GROUP_BY, MAX_PER); `variants`:
        the images whose variants decide where their tasks may run;
        `unusable_gpus`: agent id -> offered GPUs that are not healthy;
        `unusable_shared`: agent id -> indices of its shared GPUs that are not healthy."""
        return self.match_slots(pending, self.slots(offers, unusable_gpus, unusable_shared),
                                placed, variants)

    @staticmethod
    def slots(offers: Sequence[Mapping[str, Any]],
              unusable_gpus: Optional[Mapping[str, int]] = None,
              unusable_shared: Optional[Mapping[str, frozenset]] = None) -> list[OfferSlot]:
        """The offers as slots to place into, less what is not healthy."""
        unusable, sick_shared = unusable_gpus or {}, unusable_shared or {}
        return [OfferSlot.from_offer(o, i, unusable.get(o["agent_id"]["value"], 0),
                                     sick_shared.get(o["agent_id"]["value"], frozenset()))
                for i, o in enumerate(offers)]

    def match_slots(self, pending: Sequence[TaskSpec], slots: list[OfferSlot],
                    placed: Optional[Mapping[str, Iterable[Mapping[str, str]]]] = None,
                    variants: Optional["Selector"] = None) -> MatchResult:
        """`match` on slots some of which others (gangs) may have filled already."""
        return _Round(self, slots, placed or {}, variants).run(pending)

    def capacity(self, spec: TaskSpec, slots: Sequence[OfferSlot],
                 variants: Optional["Selector"] = None) -> dict[str, int]:
        """Offer id -> how many tasks like `spec` it can still take, for the offers its
        static constraints (and image variants) allow; the others are left out."""
        round_ = _Round(self, list(slots), {}, variants)
        group = round_._groups([spec])[0]
        return {s.offer_id: n for s in round_._eligible(group)
                if (n := round_._fits(s, group.shape, group.behavior)) > 0}

    def unplaced_reason(self, spec: TaskSpec, slots: Sequence[OfferSlot],
                        variants: Optional["Selector"] = None) -> Optional[str]:
        """Why no offer of `slots` (what is left of them) takes `spec`, in words an
        operator acts on; None when it is not for a reason this can see (dynamic
        constraints, ports, image variants: their own messages)."""
        round_ = _Round(self, list(slots), {}, variants)
        group = round_._groups([spec])[0]
        qualified = [s for s in slots if round_._static_ok(group.static, s)]
        if group.static and not qualified:
            return (f"no offered agent ({len(slots)} offered) qualifies for "
                    + ", ".join(str(c) for c in group.static))
        if spec.whole_gpus:
            largest = max((s.gpus_for(spec.mig_profile) for s in qualified), default=0)
            if largest < spec.whole_gpus:
                kind = f"{spec.mig_profile} MIG devices" if spec.mig_profile else "GPUs"
                return (f"needs {spec.whole_gpus} {kind} on one node; the largest free block "
                        f"offered is {largest} (of {len(qualified)} offered agent(s))")
        elif group.behavior == RESTRICTED and qualified and all(s.holds_gpus for s in qualified):
            return (f"asks no GPU and the {len(qualified)} offered agent(s) have GPUs "
                    f"(restricted GPU scheduling; label {GPU_SCHEDULING_LABEL}=unrestricted "
                    f"lets it there)")
        cpus = max((s.cpus for s in qualified), default=0) / _MILLI
        mem = max((s.mem for s in qualified), default=0) / _MILLI
        if cpus < spec.cpus or mem < spec.mem:
            return (f"needs {spec.cpus:g} cpus and {spec.mem:g} MB on one node; the most "
                    f"offered is {cpus:g} cpus, {mem:g} MB")
        return None

    def reject_summary(self, spec: TaskSpec, slots: Sequence[OfferSlot]) -> list[dict]:
        """Marathon's rejectSummaryLastOffers for `spec` over `slots`: for each reason in
        its order, the offers that reached that check and those declined by it."""
        round_ = _Round(self, list(slots), {}, None)
        group = round_._groups([spec])[0]
        shape = group.shape
        declined = dict.fromkeys(REJECT_REASONS, 0)
        for slot in slots:
            if not round_._static_ok(group.static, slot):
                reason = "UnfulfilledConstraint"
            elif slot.cpus < shape.cpus:
                reason = "InsufficientCpus"
            elif slot.mem < shape.mem:
                reason = "InsufficientMemory"
            elif slot.disk < shape.disk:
                reason = "InsufficientDisk"
            elif (shape.gpus and slot.gpus_for(shape.mig_profile) < shape.gpus) or (
                    shape.share and not round_._fits(slot, shape, "")):
                reason = "InsufficientGpus"
            elif (shape.ports or shape.fixed_ports) and not round_._fits(slot, shape, ""):
                reason = "InsufficientPorts"
            elif group.behavior == RESTRICTED and slot.holds_gpus:
                reason = "DeclinedScarceResources"
            else:
                continue
            declined[reason] += 1
        out, processed = [], len(slots)
        for reason in REJECT_REASONS:
            out.append({"reason": reason, "declined": declined[reason], "processed": processed})
            processed -= declined[reason]
        return out

    def has_dynamic(self, spec: TaskSpec) -> bool:
        """A constraint of `spec` depends on where its fellows are placed."""
        return any(not _is_static(c) for c in spec.constraints)


class _Round:
    """The state of one matching pass."""

    def __init__(self, matcher: Matcher, slots: list[OfferSlot],
                 placed: Mapping[str, Iterable[Mapping[str, str]]],
                 variants: Optional["Selector"] = None) -> None:
        self.matcher = matcher
        self.variants = variants
        # fewest GPUs first: small GPU tasks and (unrestricted) CPU tasks go there first
        self.slots = sorted(slots, key=lambda s: (s.gpus, s.order))
        self.placed_fields = placed
        self.placed_values: dict[tuple[str, str], PlacedValues] = {}
        self.eligible_cache: dict[tuple, list[OfferSlot]] = {}
        self.verdicts: dict[tuple[Constraint, Optional[str]], bool] = {}
        self.cursors: dict[tuple, int] = {}
        self._queue_position: dict[int, int] = {}

    def run(self, pending: Sequence[TaskSpec]) -> MatchResult:
        unplaced: list[TaskSpec] = []
        for group in self._groups(pending):
            self._place_group(group)
            unplaced.extend(group.tasks)
        unplaced.sort(key=lambda spec: self._queue_position[id(spec)])
        placements = {s.offer_id: s.tasks for s in self.slots if s.tasks}
        return MatchResult(placements, {s.offer_id: s for s in self.slots}, unplaced)

    def _groups(self, pending: Sequence[TaskSpec]) -> list[_Group]:
        groups: dict[tuple, _Group] = {}
        for position, spec in enumerate(pending):
            self._queue_position[id(spec)] = position
            static = tuple(c for c in spec.constraints if _is_static(c))
            dynamic = tuple(c for c in spec.constraints if not _is_static(c))
            any_ports, fixed_ports = wanted(spec.ports) if spec.ports else (0, ())
            shape = _Shape(round(spec.cpus * _MILLI), round(spec.mem * _MILLI),
                           round(spec.disk * _MILLI), spec.whole_gpus, any_ports, fixed_ports,
                           spec.share, spec.mig_profile)
            behavior = gpu_behavior(spec, self.matcher.gpu_scheduling) if not spec.gpus else ""
            app = spec.app_id if dynamic else ""
            image = spec.image if self.variants is not None \
                and self.variants.handles(spec.image) else None
            key = (shape, static, dynamic, behavior, app, image)
            group = groups.get(key)
            if group is None:
                groups[key] = group = _Group(shape, static, dynamic, behavior, app, [], image)
            group.tasks.append(spec)
        return list(groups.values())  # dicts keep insertion order: queue order

    # -- which offers a group may use at all -----------------------------------------

    def _eligible(self, group: _Group) -> list[OfferSlot]:
        key = (group.static, group.shape.gpus > 0, group.shape.share, group.shape.mig_profile,
               group.image)
        found = self.eligible_cache.get(key)
        if found is None:
            found = [s for s in self.slots
                     if (s.gpus_for(group.shape.mig_profile) > 0 or not group.shape.gpus)
                     and (not group.shape.share or s.slots_for(group.shape.share))
                     and self._static_ok(group.static, s)]
            if group.image is not None:
                found = [s for s in found if self.variants.servable(group.image, s.fields)]
            self.eligible_cache[key] = found
        return found

    def _static_ok(self, static: tuple[Constraint, ...], slot: OfferSlot) -> bool:
        for constraint in static:
            value = slot.fields.get(constraint.field)
            verdict = self.verdicts.get((constraint, value))
            if verdict is None:
                verdict = self.verdicts[(constraint, value)] = meets(constraint, value)
            if not verdict:
                return False
        return True

    # -- placing ------------------------------------------------------------------------

    def _place_group(self, group: _Group) -> None:
        offers = self._eligible(group)
        if not group.dynamic:
            self._pack(group, offers)
        elif any(c.operator == "GROUP_BY" for c in group.dynamic):
            self._place_grouped_by(group, offers)
        else:
            self._place_one_by_one(group, offers)

    def _fits(self, slot: OfferSlot, shape: _Shape, behavior: str) -> int:
        """How many tasks of this shape the slot can still take (0: none)."""
        if behavior == RESTRICTED and slot.holds_gpus:
            return 0
        most = _UNLIMITED
        if shape.cpus:
            most = slot.cpus // shape.cpus
        if shape.mem:
            most = min(most, slot.mem // shape.mem)
        if shape.disk:
            most = min(most, slot.disk // shape.disk)
        if shape.gpus:
            most = min(most, slot.gpus_for(shape.mig_profile) // shape.gpus)
        if shape.share:
            need = slot.slots_for(shape.share)
            most = min(most, sum(free // need for free in slot.shares.values()) if need else 0)
        if shape.fixed_ports:             # a given port can be taken once
            if not slot.ports.has_all(shape.fixed_ports):
                return 0
            most = min(most, 1)
        if shape.ports:
            most = min(most, (slot.ports.count - len(shape.fixed_ports)) // shape.ports)
        return most

    def _take(self, slot: OfferSlot, group: _Group, count: int) -> None:
        shape = group.shape
        slot.cpus -= shape.cpus * count
        slot.mem -= shape.mem * count
        slot.disk -= shape.disk * count
        pool = slot.mig_pool(shape.mig_profile) if shape.mig_profile else "gpus"
        if pool == "gpus":
            slot.gpus -= shape.gpus * count
        elif shape.gpus:
            slot.mig[shape.mig_profile] -= shape.gpus * count
        taken, group.tasks = group.tasks[:count], group.tasks[count:]
        slot.tasks.extend(taken)
        if taken and taken[0].ports:
            for spec in taken:
                slot.host_ports[spec.id] = slot.ports.take(spec.ports)
        if shape.share:
            need = slot.slots_for(shape.share)
            for spec in taken:        # the fullest GPU it fits on, then the lowest index
                index = min((i for i, free in slot.shares.items() if free >= need),
                            key=lambda i: (slot.shares[i], i))
                slot.shares[index] -= need
                slot.shared[spec.id] = (index, need)
        for constraint in group.dynamic:
            values = self._placed(group.app_id, constraint.field)
            for _ in range(count):
                values.add(slot.fields.get(constraint.field))

    def _pack(self, group: _Group, offers: list[OfferSlot]) -> None:
        """No constraint depends on earlier placements: fill offers in order.
        Offers too full for this shape stay behind the shared cursor."""
        key = (group.static, group.shape, group.behavior, group.image)
        start = self.cursors.get(key, 0)
        restricted_skipped = False
        index = start
        while group.tasks and index < len(offers):
            slot = offers[index]
            count = self._fits(slot, group.shape, group.behavior)
            if count:
                self._take(slot, group, min(count, len(group.tasks)))
                if self._fits(slot, group.shape, group.behavior):
                    break  # the group ran out before the offer did
            elif group.behavior == RESTRICTED and slot.holds_gpus:
                restricted_skipped = True  # not "full": a later GPU task may empty it
            if not restricted_skipped:
                start = index + 1
            index += 1
        self.cursors[key] = start

    def _placed(self, app_id: str, field_name: str) -> PlacedValues:
        key = (app_id, field_name)
        values = self.placed_values.get(key)
        if values is None:
            values = PlacedValues(fields.get(field_name)
                                  for fields in self.placed_fields.get(app_id, ()))
            self.placed_values[key] = values
        return values

    def _dynamic_ok(self, group: _Group, slot: OfferSlot) -> bool:
        for constraint in group.dynamic:
            if not meets(constraint, slot.fields.get(constraint.field),
                         self._placed(group.app_id, constraint.field)):
                return False
        return True

    def _place_one_by_one(self, group: _Group, offers: list[OfferSlot]) -> None:
        """UNIQUE, MAX_PER, CLUSTER: once an offer is refused it stays refused
        for this app (counts only grow), so each offer is passed once."""
        for slot in offers:
            while group.tasks and self._fits(slot, group.shape, group.behavior) \
                    and self._dynamic_ok(group, slot):
                self._take(slot, group, 1)
            if not group.tasks:
                return

    def _place_grouped_by(self, group: _Group, offers: list[OfferSlot]) -> None:
        """GROUP_BY: always try the value with the fewest instances. Offers that
        are full, or refused by another constraint, are dropped for good; if
        GROUP_BY refuses even the least used value it refuses all of them."""
        spread = next(c for c in group.dynamic if c.operator == "GROUP_BY")
        buckets: dict[str, deque[OfferSlot]] = {}
        for slot in offers:
            value = slot.fields.get(spread.field)
            if value is not None:  # an offer without the field never matches GROUP_BY
                buckets.setdefault(value, deque()).append(slot)
        placed = self._placed(group.app_id, spread.field)
        heap = [(placed.counts.get(value, 0), i, value) for i, value in enumerate(buckets)]
        heapq.heapify(heap)
        while group.tasks and heap:
            count, order, value = heapq.heappop(heap)
            bucket = buckets[value]
            while bucket and (not self._fits(bucket[0], group.shape, group.behavior)
                              or self._refused_by_others(group, bucket[0], spread)):
                bucket.popleft()
            if not bucket:
                continue
            if not self._dynamic_ok(group, bucket[0]):
                return
            self._take(bucket[0], group, 1)
            heapq.heappush(heap, (count + 1, order, value))

    def _refused_by_others(self, group: _Group, slot: OfferSlot, spread: Constraint) -> bool:
        """A dynamic constraint other than `spread` refuses the slot (for good:
        UNIQUE, MAX_PER and CLUSTER never change their mind as counts grow)."""
        for constraint in group.dynamic:
            if constraint.operator != "GROUP_BY" and not meets(
                    constraint, slot.fields.get(constraint.field),
                    self._placed(group.app_id, constraint.field)):
                return True
        return False
