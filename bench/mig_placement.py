"""Placement with MIG devices next to the same number of whole GPUs.

Agents of 8 GPUs each: in the MIG run every GPU is split into 7 x 1g.18gb, offered
as the resource mig-1g.18gb:56 (mixed strategy); in the baseline the same agents
offer gpus:56 (as many whole devices). The same number of one-device tasks (half
asking for the profile by name in the MIG run) goes through the same Matcher, in
this process, on the same input. Prints CPU seconds of each and their ratio
(MIG / whole; the target is at most 1.2). Never asserts.

    .venv/bin/python bench/mig_placement.py [--agents 100] [--gpus 8] [--instances 7] [--rounds 3]
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from framework.scheduling.matching import Matcher  # noqa: E402
from framework.tasks.task_spec import TaskSpec  # noqa: E402

PROFILE = "1g.18gb"


def offers(agents: int, devices: int, mig: bool) -> list[dict]:
    name = f"mig-{PROFILE}" if mig else "gpus"
    return [{"id": {"value": f"o{i}"}, "agent_id": {"value": f"a{i}"}, "hostname": f"n{i}",
             "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 4 * devices}},
                           {"name": "mem", "type": "SCALAR", "scalar": {"value": 2048 * devices}},
                           {"name": name, "type": "SCALAR", "scalar": {"value": devices}}],
             "attributes": [{"name": "gpu_type", "type": "TEXT",
                             "text": {"value": "nvidia_h200"}}]}
            for i in range(agents)]


def tasks(count: int, mig: bool) -> list[TaskSpec]:
    # two apps, so the matcher groups as with real queues
    return [TaskSpec(id=f"t{k}", app_id=f"/app{k % 2}", cmd="true", cpus=1, mem=512, gpus=1,
                     mig_profile=PROFILE if mig else "") for k in range(count)]


def run(agents: int, devices: int, mig: bool) -> tuple[float, int]:
    pending, batch = tasks(agents * devices, mig), offers(agents, devices, mig)
    start = time.process_time()
    result = Matcher().match(pending, batch)
    return time.process_time() - start, sum(len(t) for t in result.placements.values())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=100)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--instances", type=int, default=7)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    for name in ("agents", "gpus", "instances", "rounds"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1")
    devices = a.gpus * a.instances
    whole, mig = [], []
    for _ in range(a.rounds):               # interleaved: both see the same machine state
        whole.append(run(a.agents, devices, False))
        mig.append(run(a.agents, devices, True))
    w, m = min(t for t, _ in whole), min(t for t, _ in mig)
    print(f"{a.agents} agents x {a.gpus} GPUs x {a.instances} instances = "
          f"{a.agents * devices} devices, as many one-device tasks")
    print(f"whole devices (gpus)       {w:8.3f} s CPU  placed {whole[0][1]}")
    print(f"MIG devices (mig-{PROFILE}) {m:8.3f} s CPU  placed {mig[0][1]}")
    print(f"ratio MIG/whole: {m / w if w else float('nan'):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
