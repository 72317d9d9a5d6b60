"""Teams' queues over a day of simulated time, through the queue policy (framework/queues).

Four teams (weights 4:3:2:1, guarantees 3/4 of the cluster in the same ratio) keep work
waiting (a closed loop: each refills its backlog as work starts). The first half of the
day all four stay busy: each team's GPU share is measured there (after a warm-up of a
16th of the day). In the second half the teams pause in turn, a tenth of the day each:
back from a pause, a team is below its guarantee while the others borrowed its GPUs,
and reclaims them. --seeds traces are run and their figures pooled.

Work: services (non-preemptible single tasks), training gangs of 2-8 tasks x 8 GPUs (at
most a quarter of the agents), single tasks of 1, 2 or 4 GPUs, a 0.25 share or a 1g MIG
device (1/7); a fifth of it at a low priority (--low-priority); most report checkpoints
every 10-40 min, some never. Agents of 8 GPUs; a gang's tasks take whole free slots on
agents (best fit), all or none; a pass runs every --cycle seconds after anything changes
(at least once a minute); a preempted unit is killed at its deadline (grace), loses the
work since its last checkpoint and goes back to its queue with its first arrival.

The same trace runs three ways, side by side: our victim choice (least work lost), the
baseline "youngest first" (Marathon's killSelection), and no preemption at all (Mesos
alone: a queue below its guarantee waits for borrowed work to end). Printed: each
team's GPU share while all are busy vs its weight (target within 5 %); reclaim latency
of a queue below its guarantee, from a unit's first pass owed GPUs within its queue's
guarantee to its admission, and to its start on agents (target p95 within grace + 10 s);
GPU-hours lost to preemption (target: half of youngest-first's); partial gangs ever left
(must be 0).
Simulated time, real policy code; placement is this script's best fit, not Mesos's.

    .venv/bin/python bench/queue_trace.py [--agents 200] [--hours 24] [--grace 30] [--seeds 3]
"""
import argparse
import heapq
import random
import sys
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from framework.queues.core.fair_share import RecentUse  # noqa: E402
from framework.queues.core.plan import OWED, RECLAIMING, plan  # noqa: E402
from framework.queues.core.reclaim import VICTIM_ORDERS  # noqa: E402
from framework.queues.state.queue import Queue  # noqa: E402
from framework.queues.state.work import RunningUnit, WaitingUnit  # noqa: E402

TEAMS = (("team-a", 4), ("team-b", 3), ("team-c", 2), ("team-d", 1))
START = 1_800_000_000.0
GPUS_PER_AGENT = 8
TICK = 60.0                     # a pass at least this often (teams refill their backlogs)


@dataclass
class Work:
    id: str
    team: str
    tasks: int
    per_task: Fraction          # GPUs of each task
    duration: float             # seconds of work left to do
    checkpoint_every: Optional[float]
    preemptible: bool
    priority: int
    arrived_at: float

    @property
    def gpus(self) -> Fraction:
        return self.per_task * self.tasks


@dataclass
class Started:
    work: Work
    at: float
    slots: List[int]            # the agent of each task
    token: int                  # which end event is this run's
    deadline: Optional[float] = None
    reclaimed_for: str = ""

    def saved(self, now: float) -> float:
        """The last checkpoint at `now`, or the start."""
        every = self.work.checkpoint_every
        if not every:
            return self.at
        return self.at + int((now - self.at) // every) * every


class Trace:
    """Each team's stream of work, the same for every policy (one seeded generator each)."""

    def __init__(self, seed: int, agents: int, low_priority: float):
        self.rngs = {team: random.Random(f"{seed}-{team}") for team, _ in TEAMS}
        self.count, self.low_priority = 0, low_priority
        self.gang_sizes = [n for n in (2, 2, 4, 4, 8) if n <= max(2, agents // 4)]

    def next(self, team: str, now: float) -> Work:
        rng = self.rngs[team]
        self.count += 1
        kind = rng.random()
        if kind < 0.55:                                   # a training gang
            tasks, per_task = rng.choice(self.gang_sizes), Fraction(GPUS_PER_AGENT)
            duration = rng.uniform(1, 4) * 3600
            every = rng.uniform(600, 2400) if rng.random() < 0.8 else None
        else:                                             # a single task
            per_task = rng.choice((Fraction(1), Fraction(2), Fraction(4), Fraction(1, 4),
                                   Fraction(1, 7)))
            tasks, duration = 1, rng.uniform(0.25, 2) * 3600
            every = rng.uniform(600, 1800) if rng.random() < 0.5 else None
        priority = -10 if rng.random() < self.low_priority else 0
        return Work(f"{team}-{self.count}", team, tasks, per_task, duration, every, True,
                    priority, now)


class Simulation:
    def __init__(self, args, order: str, preempt: bool, seed: int):
        self.args, self.order, self.preempt = args, VICTIM_ORDERS[order], preempt
        capacity = args.agents * GPUS_PER_AGENT
        self.capacity = Fraction(capacity)
        total_weight = sum(w for _, w in TEAMS)
        self.queues = [Queue(team, guarantee=Fraction(capacity * 3 * w, 4 * total_weight),
                             weight=w)
                       for team, w in TEAMS]
        self.weights = dict(TEAMS)
        self.free = [Fraction(GPUS_PER_AGENT)] * args.agents
        self.trace = Trace(seed, args.agents, args.low_priority)
        self.seeds = 1
        self.end = START + args.hours * 3600
        # the first half of the day every team is busy (fair share is measured there);
        # in the second, the teams pause in turn for a tenth of the day each (long enough
        # for their work to end): while one pauses the others borrow its guarantee, and
        # when it is back it reclaims
        half, pause = args.hours * 1800, args.hours * 360
        self.fair_until = START + half
        self.quiet = {team: [(START + half + k * pause, START + half + (k + 1) * pause)]
                      for k, (team, _) in enumerate(TEAMS)}
        self.waiting: Dict[str, Work] = {}
        self.running: Dict[str, Started] = {}
        self.events: list = []
        self.tokens = 0
        self.recent = RecentUse(half_life=args.half_life)
        self.busy_held = {team: 0.0 for team, _ in TEAMS}
        self.owed_since: Dict[str, float] = {}
        self.latencies: List[float] = []              # owed -> started on agents
        self.admit_latencies: List[float] = []        # owed -> admitted by the policy
        self.admitted_owed: set = set()
        self.lost_gpu_seconds = 0.0
        self.preemptions = 0
        self.partial_gangs = 0
        self.unplaced = 0
        self.passes, self.pass_cpu = 0, 0.0
        self.held_seconds = 0.0
        for team, _ in TEAMS:                             # each team's two services
            for k in range(2):
                work = Work(f"{team}-svc{k}", team, 1, Fraction(4), 10 * 86400, None, False,
                            100, START)
                self.waiting[work.id] = work

    # -- the loop ---------------------------------------------------------------------
    def run(self) -> "Simulation":
        now = START
        while now < self.end:
            self._apply_events(now)
            self._arrivals(now)
            self._pass(now)
            later = self._next_pass(now)
            self._account(now, min(later, self.end))
            now = later
        return self

    def _next_pass(self, now: float) -> float:
        cycle = self.args.cycle
        nxt = min(self.events[0][0] if self.events else self.end, now + TICK)
        return max(now + cycle, -(-nxt // cycle) * cycle)

    def _apply_events(self, now: float) -> None:
        while self.events and self.events[0][0] <= now:
            at, _, kind, unit_id, token = heapq.heappop(self.events)
            run = self.running.get(unit_id)
            if run is None or run.token != token:
                continue
            if kind == "end":
                self._stop(unit_id)
            else:                                         # the deadline: SIGKILL
                self._kill(unit_id, at)

    def _stop(self, unit_id: str) -> Started:
        run = self.running.pop(unit_id)
        for agent in run.slots:
            self.free[agent] += run.work.per_task
        return run

    def _kill(self, unit_id: str, at: float) -> None:
        run = self._stop(unit_id)
        saved = run.saved(at)
        self.lost_gpu_seconds += float(run.work.gpus) * (at - saved)
        run.work.duration -= saved - run.at              # back to its queue, from its save
        self.waiting[unit_id] = run.work
        self.preemptions += 1

    def _arrivals(self, now: float) -> None:
        for team, _ in TEAMS:
            if any(start <= now < end for start, end in self.quiet[team]):
                continue
            backlog = sum(w.gpus for w in self.waiting.values() if w.team == team)
            while backlog < self.capacity * self.args.backlog:
                work = self.trace.next(team, now)
                self.waiting[work.id] = work
                backlog += work.gpus

    def _units(self, now: float):
        running = [RunningUnit(id=r.work.id, queue=r.work.team, gpus=r.work.gpus,
                               started_at=r.at,
                               tasks=tuple(f"{r.work.id}.{k}" for k in range(r.work.tasks)),
                               priority=r.work.priority,
                               last_checkpoint=r.saved(now) if r.work.checkpoint_every else None,
                               preemptible=r.work.preemptible and self.preempt,
                               kill_grace_seconds=self.args.grace, notice_deadline=r.deadline,
                               reclaimed_for=r.reclaimed_for)
                   for r in self.running.values()]
        waiting = [WaitingUnit(id=w.id, queue=w.team, gpus=w.gpus, priority=w.priority,
                               arrived_at=w.arrived_at, tasks=w.tasks)
                   for w in self.waiting.values()]
        return running, waiting

    def _pass(self, now: float) -> None:
        running, waiting = self._units(now)
        self.recent = self.recent.advance(self._held(), now,
                                          {w.team for w in self.waiting.values()})
        cpu = time.process_time()
        result = plan(self.queues, running, waiting, self.capacity, now, self.recent, self.order)
        self.pass_cpu += time.process_time() - cpu
        self.passes += 1
        for preemption in result.preempt:
            run = self.running[preemption.unit.id]
            run.deadline, run.reclaimed_for = preemption.notice.deadline, \
                preemption.notice.reclaimed_for
            heapq.heappush(self.events, (run.deadline, self._token(), "kill", run.work.id,
                                         run.token))
        for item in result.waiting:
            if item.kind in (RECLAIMING, OWED):
                self.owed_since.setdefault(item.unit.id, now)
            elif item.unit.id in self.owed_since and item.unit.id not in self.admitted_owed:
                # no longer owed (work of its queue ahead of it took the guarantee): it
                # waits to borrow now, which is no reclaim
                del self.owed_since[item.unit.id]
        for unit in result.admit:
            if unit.id in self.owed_since and unit.id not in self.admitted_owed:
                self.admitted_owed.add(unit.id)
                self.admit_latencies.append(now - self.owed_since[unit.id])
        for unit in result.admit:
            if not self._start(self.waiting[unit.id], now) and self.args.hold:
                break                   # the GPUs freed from now on are held for it
        self._check_gangs()

    def _start(self, work: Work, now: float) -> bool:
        slots = self._place(work)
        if slots is None:
            self.unplaced += 1                            # fragmented: the next pass retries
            return False
        del self.waiting[work.id]
        token = self._token()
        self.running[work.id] = Started(work, now, slots, token)
        heapq.heappush(self.events, (now + work.duration, token, "end", work.id, token))
        if work.id in self.owed_since:
            self.latencies.append(now - self.owed_since.pop(work.id))
        return True

    def _place(self, work: Work) -> Optional[List[int]]:
        free, slots = list(self.free), []
        for _ in range(work.tasks):
            fits = [(free[a], a) for a in range(len(free)) if free[a] >= work.per_task]
            if not fits:
                return None
            _, agent = min(fits)
            free[agent] -= work.per_task
            slots.append(agent)
        self.free = free
        return slots

    def _token(self) -> int:
        self.tokens += 1
        return self.tokens

    def _held(self) -> Dict[str, Fraction]:
        held: Dict[str, Fraction] = {team: Fraction(0) for team, _ in TEAMS}
        for run in self.running.values():
            held[run.work.team] += run.work.gpus
        return held

    def _check_gangs(self) -> None:
        """A gang is all running or all gone: its tasks are counted on the agents."""
        for run in self.running.values():
            if len(run.slots) != run.work.tasks:
                self.partial_gangs += 1

    def _account(self, now: float, until: float) -> None:
        span = until - now
        held = self._held()
        self.held_seconds += float(sum(held.values())) * span
        waiting_teams = {w.team for w in self.waiting.values()}
        warm = START + self.args.hours * 3600 / 16 <= now < self.fair_until
        if warm and len(waiting_teams) == len(TEAMS):      # all busy: every team waits
            for team in held:
                self.busy_held[team] += float(held[team]) * span

    # -- figures ----------------------------------------------------------------------
    def absorb(self, other: "Simulation") -> "Simulation":
        """This run's figures pooled with another trace's."""
        for team in self.busy_held:
            self.busy_held[team] += other.busy_held[team]
        self.latencies += other.latencies
        self.admit_latencies += other.admit_latencies
        for name in ("lost_gpu_seconds", "preemptions", "partial_gangs", "unplaced", "passes",
                     "pass_cpu", "held_seconds", "seeds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self

    def shares(self) -> Dict[str, float]:
        total = sum(self.busy_held.values()) or 1.0
        return {team: held / total for team, held in self.busy_held.items()}


def percentile(values: List[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=200)
    p.add_argument("--hours", type=float, default=24)
    p.add_argument("--grace", type=float, default=30, help="taskKillGracePeriodSeconds")
    p.add_argument("--cycle", type=float, default=5, help="seconds between passes")
    p.add_argument("--backlog", type=float, default=0.15,
                   help="GPUs each team keeps waiting, as a part of the cluster")
    p.add_argument("--half-life", type=float, default=3600, help="of recent use, seconds")
    p.add_argument("--low-priority", type=float, default=0.2,
                   help="the part of the work at a low priority (taken first when reclaiming)")
    p.add_argument("--hold", action="store_true",
                   help="after an admission that found no room on the agents, place nothing "
                        "more in that pass (as a gang's offers are held), instead of placing "
                        "what fits")
    p.add_argument("--seed", type=int, default=1, help="of the first trace")
    p.add_argument("--seeds", type=int, default=3, help="traces run, figures pooled")
    a = p.parse_args(argv)
    if a.agents < 1 or a.seeds < 1:
        p.error("--agents and --seeds must be at least 1")
    if a.hours <= 0 or a.grace < 0 or a.cycle <= 0 or a.backlog <= 0 or a.half_life <= 0:
        p.error("--hours, --cycle, --backlog and --half-life must be above 0, --grace not below")
    if not 0 <= a.low_priority <= 1:
        p.error("--low-priority is a part of the work, from 0 to 1")
    runs: Dict[str, Simulation] = {}
    for name, order, preempt in (("least work lost", "least-work-lost", True),
                                 ("youngest first", "youngest-first", True),
                                 ("no preemption", "least-work-lost", False)):
        for seed in range(a.seed, a.seed + a.seeds):
            wall = time.monotonic()
            run = Simulation(a, order, preempt, seed).run()
            print(f"[{name}, seed {seed}: {run.passes} passes in "
                  f"{time.monotonic() - wall:.1f} s]", file=sys.stderr, flush=True)
            runs[name] = runs[name].absorb(run) if name in runs else run
    report(a, runs)
    return 0


def report(a, runs: Dict[str, Simulation]) -> None:
    ours, young, none = runs["least work lost"], runs["youngest first"], runs["no preemption"]
    capacity = a.agents * GPUS_PER_AGENT
    print(f"queue trace: {a.agents} agents x {GPUS_PER_AGENT} GPUs ({capacity} GPUs), "
          f"{a.hours:g} h simulated, teams {', '.join(f'{t} w{w}' for t, w in TEAMS)}, "
          f"grace {a.grace:g} s, a pass every {a.cycle:g} s, {a.seeds} traces pooled, "
          f"{100 * a.low_priority:g} % of the work at a low priority"
          f"{', held for what found no room' if a.hold else ''}")
    names = list(runs)
    print(f"{'':34}" + "".join(f"{n:>17}" for n in names))
    total_weight = sum(w for _, w in TEAMS)
    worst = {n: 0.0 for n in names}
    for team, weight in TEAMS:
        target = weight / total_weight
        cells = []
        for n in names:
            share = runs[n].shares()[team]
            worst[n] = max(worst[n], abs(share / target - 1))
            cells.append(f"{100 * share:16.1f}%")
        print(f"{f'share while all busy, {team} ({100 * target:.0f} %)':34}" + "".join(cells))
    print(f"{'worst share off its weight':34}" +
          "".join(f"{100 * worst[n]:16.1f}%" for n in names) + "   (target: within 5 %)")
    for label, p, kind in (("reclaim -> admitted p50 s", 50, "admit_latencies"),
                           ("reclaim -> admitted p95 s", 95, "admit_latencies"),
                           ("reclaim -> placed p50 s", 50, "latencies"),
                           ("reclaim -> placed p95 s", 95, "latencies")):
        print(f"{label:34}" + "".join(f"{percentile(getattr(runs[n], kind), p):17.0f}"
                                      for n in names))
    print(f"{'reclaims measured':34}" +
          "".join(f"{len(runs[n].admit_latencies):17d}" for n in names)
          + f"   (target p95: grace + 10 = {a.grace + 10:g} s)")
    print(f"{'preemptions':34}" + "".join(f"{runs[n].preemptions:17d}" for n in names))
    print(f"{'GPU-hours lost to preemption':34}" +
          "".join(f"{runs[n].lost_gpu_seconds / 3600:17.1f}" for n in names))
    day = capacity * a.hours * 3600
    print(f"{'GPU use of the cluster':34}" +
          "".join(f"{100 * runs[n].held_seconds / day / runs[n].seeds:16.1f}%" for n in names))
    print(f"{'admissions not placed (fragments)':34}" +
          "".join(f"{runs[n].unplaced:17d}" for n in names))
    print(f"{'partial gangs left':34}" + "".join(f"{runs[n].partial_gangs:17d}" for n in names))
    print(f"{'policy CPU per pass ms':34}" +
          "".join(f"{1000 * runs[n].pass_cpu / max(1, runs[n].passes):17.2f}" for n in names))
    lost = ours.lost_gpu_seconds
    ratio = young.lost_gpu_seconds / lost if lost else float("inf")
    print(f"ratio GPU-hours lost, youngest first / ours: {ratio:.2f}x (target: at least 2x)")
    p95, base = percentile(ours.admit_latencies, 95), percentile(none.admit_latencies, 95)
    print(f"ratio reclaim -> admitted p95, no preemption / ours: "
          f"{base / p95 if p95 else float('inf'):.2f}x")


if __name__ == "__main__":
    sys.exit(main())
