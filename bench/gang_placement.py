"""Gang placement at scale, in this process, over simulated offer rounds.

A cluster of agents with 8 GPUs each receives random gangs (2 to 8 members of 1, 2,
4 or 8 GPUs: 2 to 64 GPUs a gang) at a rate above what it can run (--load 1.5: a queue builds); each runs
a random number of rounds once all of its members run. Now and then an agent is lost
for a while. Each round, every agent with free GPUs makes one offer, and the waiting
work is placed by the project's own code:

- gangs (ours): framework/scheduling/gang_placement.py: all members or none, the head
  gang holding what it could use; a lost agent ends its gangs whole, which wait again;
- first-come (the baseline): every member placed on its own by the same Matcher, in
  queue order, as Marathon places app instances; a lost agent's members wait again
  while the others keep their GPUs.

Printed side by side: useful GPU utilisation (GPUs of gangs whose members all run,
over the cluster's GPUs), time to start (arrival to all members running, in rounds:
a round is an offer cycle, about 1 s), gangs started, gangs partly placed for longer
than the bound (30 rounds) and the longest, the GPUs partial gangs hold idle, gangs
deadlocked at the end (partly placed, never
started), and the CPU time of a placement round. Never asserts.

    .venv/bin/python bench/gang_placement.py [--agents 200] [--gangs 500] [--losses 10]
"""
import argparse
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from framework.scheduling import gang_placement  # noqa: E402
from framework.scheduling.agent_inventory import AgentInventory  # noqa: E402
from framework.scheduling.matching import Matcher  # noqa: E402
from framework.tasks.ports import PortRequest  # noqa: E402
from framework.tasks.task_spec import TaskSpec  # noqa: E402

GPUS = 8
BOUND = 30                     # rounds a gang may be partly placed (about 30 s)
LOSS_ROUNDS = 20               # how long a lost agent stays away


@dataclass
class Gang:
    name: str
    members: int
    gpus: int                  # each member's
    arrival: int
    duration: int
    placed: dict = field(default_factory=dict)    # rank -> agent index
    started: int = -1          # the round all members first ran
    ends: int = -1
    partial_since: int = -1
    over_bound: bool = False

    def specs(self, ranks) -> list[TaskSpec]:
        return [TaskSpec(id=f"{self.name}.{r}", app_id=self.name, cmd="train", cpus=1,
                         mem=1024, gpus=self.gpus, ports=(PortRequest(),), gang=self.name,
                         gang_size=self.members, rank=r) for r in ranks]


def workload(agents: int, count: int, seed: int, load: float) -> list[Gang]:
    rng = random.Random(seed)
    gangs = []
    for k in range(count):
        gpus = rng.choice((1, 2, 4, 8))
        members = rng.randint(2, 8)
        gangs.append(Gang(f"g{k}", members, gpus, 0, rng.randint(20, 120)))
    mean_gpus = statistics.mean(g.members * g.gpus for g in gangs)
    mean_duration = statistics.mean(g.duration for g in gangs)
    rate = load * agents * GPUS / (mean_gpus * mean_duration)    # gangs per round
    t = 0.0
    for gang in gangs:
        t += rng.expovariate(rate)
        gang.arrival = int(t)
    return gangs


def offers(free: list[int], up: list[bool]) -> list[dict]:
    return [{"id": {"value": f"o{i}"}, "agent_id": {"value": f"a{i}"}, "hostname": f"n{i}",
             "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 64}},
                           {"name": "mem", "type": "SCALAR", "scalar": {"value": 1 << 20}},
                           {"name": "gpus", "type": "SCALAR", "scalar": {"value": free[i]}},
                           {"name": "ports", "type": "RANGES",
                            "ranges": {"range": [{"begin": 31000, "end": 31999}]}}]}
            for i in range(len(free)) if up[i] and free[i] > 0]


def simulate(agents: int, gangs: list[Gang], losses: int, seed: int, whole: bool) -> dict:
    rng = random.Random(seed + 1)
    matcher = Matcher()
    free, up, back = [GPUS] * agents, [True] * agents, [0] * agents
    horizon = max(g.arrival for g in gangs) * 3 + 500
    loss_rounds = sorted(rng.sample(range(1, max(2, horizon // 3)), losses))
    inventory = AgentInventory()
    inventory.saw_offers(offers(free, up), {})
    known = inventory.agents()
    useful = idle = 0
    longest = 0                 # the longest a gang stayed partly placed
    cpu: list[float] = []
    queue: list[Gang] = []
    pending = sorted(gangs, key=lambda g: g.arrival)
    now = 0
    while now < horizon and (pending or queue or any(g.ends > now for g in gangs)):
        while pending and pending[0].arrival <= now:
            queue.append(pending.pop(0))
        for i in range(agents):                     # agents coming back
            if not up[i] and back[i] <= now:
                up[i], free[i] = True, GPUS
        while loss_rounds and loss_rounds[0] <= now:
            loss_rounds.pop(0)
            lost = rng.choice([i for i in range(agents) if up[i]])
            up[lost], back[lost] = False, now + LOSS_ROUNDS
            for gang in gangs:
                if lost not in gang.placed.values():
                    continue
                # ours ends the whole gang; first-come loses only the members there
                for rank in [r for r, agent in gang.placed.items() if whole or agent == lost]:
                    agent = gang.placed.pop(rank)
                    if agent != lost:
                        free[agent] += gang.gpus
                gang.started = gang.ends = -1          # its work is lost either way
                if gang not in queue:
                    queue.insert(0, gang)
        for gang in gangs:                           # completions
            if gang.ends == now and gang.started >= 0:
                for agent in gang.placed.values():
                    free[agent] += gang.gpus
                gang.placed = {}
        batch = offers(free, up)
        if queue and batch:
            start = time.process_time()
            slots = matcher.slots(batch)
            if whole:
                waiting = [g.specs(range(g.members)) for g in queue]
                result = gang_placement.place(matcher, waiting, slots, known)
                placements = result.placements
            else:
                waiting = [s for g in queue for s in
                           g.specs([r for r in range(g.members) if r not in g.placed])]
                placements = matcher.match_slots(waiting, slots).placements
            cpu.append(time.process_time() - start)
            by_name = {g.name: g for g in queue}
            for offer_id, specs in placements.items():
                agent = int(offer_id[1:])
                for spec in specs:
                    by_name[spec.gang].placed[spec.rank] = agent
                    free[agent] -= spec.whole_gpus
        for gang in list(queue):
            if len(gang.placed) == gang.members:
                gang.started = now if gang.started < 0 else gang.started
                gang.first_start = getattr(gang, "first_start", now)
                gang.ends = now + gang.duration
                gang.partial_since = -1
                queue.remove(gang)
            elif gang.placed:
                if gang.partial_since < 0:
                    gang.partial_since = now
                longest = max(longest, now - gang.partial_since)
                if now - gang.partial_since > BOUND:
                    gang.over_bound = True
            else:
                gang.partial_since = -1
        useful += sum(g.members * g.gpus for g in gangs
                      if g.started >= 0 and g.started <= now < g.ends)
        idle += sum(len(g.placed) * g.gpus for g in queue)       # held by partial gangs
        now += 1
    waits = sorted(g.first_start - g.arrival for g in gangs if hasattr(g, "first_start"))
    return {"utilisation": useful / (agents * GPUS * now),
            "idle": idle / (agents * GPUS * now), "longest": longest,
            "p50": _quantile(waits, 0.5), "p99": _quantile(waits, 0.99),
            "started": len(waits),
            "over_bound": sum(g.over_bound for g in gangs),
            "deadlocked": sum(1 for g in gangs if g.placed and g.started < 0),
            "cpu_ms": 1000 * _quantile(sorted(cpu), 0.5), "rounds": now}


def _quantile(values, q):
    if not values:
        return float("nan")
    return values[min(len(values) - 1, math.ceil(q * len(values)) - 1)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=200)
    p.add_argument("--gangs", type=int, default=500)
    p.add_argument("--losses", type=int, default=10)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--load", type=float, default=1.5,
                   help="GPUs asked per round over the GPUs there are (default 1.5: a queue "
                        "builds, as when a team submits a sweep)")
    a = p.parse_args(argv)
    for name in ("agents", "gangs"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1")
    if not a.load > 0:
        p.error("--load must be above 0")
    if not 0 <= a.losses < a.agents:
        p.error("--losses must be 0 or more and fewer than --agents")
    print(f"gang placement: {a.agents} agents x {GPUS} GPUs, {a.gangs} gangs of 2-64 GPUs, "
          f"{a.losses} agent losses ({LOSS_ROUNDS} rounds each), load {a.load:g}, seed {a.seed}", flush=True)
    ours = simulate(a.agents, workload(a.agents, a.gangs, a.seed, a.load), a.losses, a.seed, True)
    base = simulate(a.agents, workload(a.agents, a.gangs, a.seed, a.load), a.losses, a.seed, False)
    print(f"{'':34}{'gangs (ours)':>14}{'first-come':>14}{'ratio':>9}")

    def row(label, key, fmt="{:.2f}", ratio=True):
        x, y = ours[key], base[key]
        r = f"{x / y:.2f}x" if ratio and y and not math.isnan(y) and not math.isnan(x) else "-"
        print(f"{label:34}{fmt.format(x):>14}{fmt.format(y):>14}{r:>9}")
    row("useful GPU utilisation", "utilisation")
    row("time to start p50 (rounds)", "p50", "{:.0f}")
    row("time to start p99 (rounds)", "p99", "{:.0f}")
    row("gangs started", "started", "{}")
    row("GPUs held idle by partial gangs", "idle", "{:.3f}", False)
    row("longest partly placed (rounds)", "longest", "{}", False)
    row(f"partly placed over {BOUND} rounds", "over_bound", "{}", False)
    row("deadlocked at the end", "deadlocked", "{}", False)
    row("CPU per placement round p50 (ms)", "cpu_ms", "{:.1f}")
    row("rounds simulated", "rounds", "{}", False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
