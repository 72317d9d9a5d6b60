"""Placement speed: the grouped matcher against a naive first-fit loop.

Pending tasks of mixed shapes (0, 1, 2 or 8 GPUs; 0.5 to 4 cpus) and mixed
constraints (LIKE on gpu_type, UNIQUE hostname, MAX_PER rack, GROUP_BY rack,
none) go against offers from agents with mixed GPU types (K80 x2, P100 x4,
V100 x8, CPU-only). The baseline is the obvious loop: for each task, the first
offer that fits and meets every constraint, evaluated with the same Marathon
rules. Both run in this process, on the same input; CPU time is process time.

Prints, for two or more sizes: CPU seconds, tasks placed, tasks placed per
second, the matcher's CPU time divided by offers x log2(tasks) (flat when cost
grows no faster than that), and the speed-up. Never asserts.

    .venv/bin/python bench/placement.py [--sizes 2500x250,10000x1000] [--no-baseline]
"""
import argparse
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from framework.tasks.constraints import PlacedValues, meets_all, offer_fields  # noqa: E402
from framework.scheduling.matching import Matcher, unreserved_scalars  # noqa: E402
from framework.tasks.task_spec import TaskSpec  # noqa: E402

AGENT_KINDS = [  # (gpu_type, gpus, cpus, mem MB, share of agents)
    ("tesla_k80", 2, 8, 32768, 0.3),
    ("tesla_p100", 4, 16, 65536, 0.2),
    ("tesla_v100", 8, 32, 131072, 0.2),
    ("none", 0, 16, 65536, 0.3),
]
CONSTRAINT_SETS = [
    [],
    [["gpu_type", "LIKE", "tesla_(k80|v100)"]],
    [["hostname", "UNIQUE"]],
    [["rack", "MAX_PER", "20"]],
    [["rack", "GROUP_BY"]],
    [["gpu_type", "UNLIKE", "tesla_k80"], ["rack", "IS", "rack-3"]],
]
SHAPES = [(0.5, 512, 0), (1, 2048, 0), (1, 4096, 1), (2, 8192, 2), (4, 16384, 8), (2, 1024, 0)]


def make_offers(count: int, rng: random.Random) -> list[dict]:
    weights = [kind[4] for kind in AGENT_KINDS]
    offers = []
    for i in range(count):
        gpu_type, gpus, cpus, mem, _ = rng.choices(AGENT_KINDS, weights)[0]
        resources = [{"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}},
                     {"name": "mem", "type": "SCALAR", "scalar": {"value": mem}}]
        if gpus:
            resources.append({"name": "gpus", "type": "SCALAR", "scalar": {"value": gpus}})
        offers.append({"id": {"value": f"offer-{i}"}, "agent_id": {"value": f"agent-{i}"},
                       "hostname": f"node-{i}.example", "resources": resources,
                       "attributes": [
                           {"name": "gpu_type", "type": "TEXT", "text": {"value": gpu_type}},
                           {"name": "rack", "type": "TEXT", "text": {"value": f"rack-{i % 40}"}}]})
    return offers


def make_tasks(count: int, apps: int, rng: random.Random) -> list[TaskSpec]:
    """Each app has one shape and one constraint set; tasks interleave apps."""
    app_specs = [(rng.choice(SHAPES), rng.choice(CONSTRAINT_SETS)) for _ in range(apps)]
    tasks = []
    for i in range(count):
        app = i % apps
        (cpus, mem, gpus), rules = app_specs[app]
        tasks.append(TaskSpec(id=f"app{app}.{i}", app_id=f"/app{app}", cmd="true",
                              cpus=cpus, mem=mem, gpus=gpus, constraints=rules))
    return tasks


def first_fit(tasks: list[TaskSpec], offers: list[dict]) -> int:
    """The baseline: task by task, the first offer that fits and meets every
    constraint (restricted: no CPU task where GPUs are left)."""
    slots = []
    for o in offers:
        amounts = unreserved_scalars(o)
        slots.append([round(amounts.get("cpus", 0) * 1000), round(amounts.get("mem", 0) * 1000),
                      int(amounts.get("gpus", 0)), offer_fields(o)])
    history: dict[str, list] = {}
    placed = 0
    for task in tasks:
        cpus, mem = round(task.cpus * 1000), round(task.mem * 1000)
        app_history = history.setdefault(task.app_id, [])
        by_field = {c.field: PlacedValues(f.get(c.field) for f in app_history)
                    for c in task.constraints}
        for slot in slots:
            if slot[0] < cpus or slot[1] < mem or slot[2] < task.gpus \
                    or (not task.gpus and slot[2] > 0):
                continue
            if not meets_all(task.constraints, slot[3], by_field):
                continue
            slot[0] -= cpus
            slot[1] -= mem
            slot[2] -= task.gpus
            app_history.append(slot[3])
            placed += 1
            break
    return placed


def timed(function, *args):
    start = time.process_time()
    result = function(*args)
    return time.process_time() - start, result


def run_size(tasks_count: int, offers_count: int, baseline: bool) -> None:
    rng = random.Random(tasks_count * 31 + offers_count)
    offers = make_offers(offers_count, rng)
    tasks = make_tasks(tasks_count, max(1, tasks_count // 100), rng)
    ours_s, result = timed(Matcher().match, tasks, offers)
    ours_placed = sum(len(v) for v in result.placements.values())
    line = (f"{tasks_count:>7} tasks x {offers_count:>5} offers | grouped matcher: "
            f"{ours_s:7.3f} s CPU, {ours_placed:>6} placed, "
            f"{ours_placed / max(ours_s, 1e-9):>10,.0f} placed/s, "
            f"{ours_s * 1e6 / (offers_count * math.log2(tasks_count)):.2f} us per offer x log2(tasks)")
    if baseline:
        naive_s, naive_placed = timed(first_fit, tasks, offers)
        line += (f" | first-fit: {naive_s:7.3f} s CPU, {naive_placed:>6} placed, "
                 f"{naive_placed / max(naive_s, 1e-9):>9,.0f} placed/s | speed-up x{naive_s / max(ours_s, 1e-9):.1f}")
    print(line, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2500x250,10000x1000,20000x2000",
                        help="comma-separated TASKSxOFFERS sizes to run")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the naive first-fit loop (slow at large sizes)")
    args = parser.parse_args()
    print(f"placement bench: python {sys.version.split()[0]}; CPU time via time.process_time()")
    for size in args.sizes.split(","):
        tasks_count, offers_count = (int(n) for n in size.lower().split("x"))
        run_size(tasks_count, offers_count, not args.no_baseline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
