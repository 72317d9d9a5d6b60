"""Which GPUs a multi-GPU container gets: the agent daemon's choice by interconnect
against Mesos's first free GPUs, on the same random request streams, in this process.

The topology is read as the daemon reads it (the fake NVML through unmodified pynvml,
isolator.discovery.nvml.topology). Each stream is one request per step (1 to 8 GPUs,
mostly 1, 2 and 4) held for a random number of steps; a request that does not fit is
refused. Both choices admit exactly the same requests (only which GPUs differ), so the
shares compare like with like. Prints, per layout: the share of multi-GPU grants whose
every pair is on NVLink, and with no pair whose only path crosses the CPUs'
interconnect (SYS), for each choice and as a ratio; and the time per allocate call
(first free: no search, as Mesos). Never asserts.

    .venv/bin/python bench/gpu_topology_choice.py [--layouts v100x8,pcie8] [--streams 20]
                                                  [--requests 2000] [--seed 1]
"""
import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from isolator.allocation.allocator import Allocator  # noqa: E402
from isolator.discovery import nvml, topology  # noqa: E402
from isolator.discovery.topology import NVLINK_LEVEL, SYSTEM, Topology  # noqa: E402
from localcluster import fake_nvml  # noqa: E402

SIZES, WEIGHTS = (1, 2, 3, 4, 8), (40, 30, 8, 18, 4)
DESCRIBED = {"v100x8": "DGX-1 V100 hybrid cube-mesh", "pcie8": "PCIe only, two switches",
             "h200x8": "HGX H200, NVSwitch"}


class FirstFree(Allocator):
    """Mesos's choice: the first free GPUs by minor, no search."""

    def _best(self, candidates, count, held, pool):
        return candidates[:count]


def read_node(layout: str):
    os.environ.update(fake_nvml.layout(layout).env())
    inv = nvml.discover()
    return inv.gpus, topology.from_nvml(inv.gpus, nvml.topology(), log_it=False)


def stream(seed: int, requests: int):
    """(size, steps held) per step, the same for both choices."""
    rng = random.Random(seed)
    return [(rng.choices(SIZES, WEIGHTS)[0], rng.randint(1, 6)) for _ in range(requests)]


def replay(alloc: Allocator, requests):
    """Grants of one stream: [(minors, seconds to choose)], refused count."""
    ends = []                                   # (step, minors)
    grants, refused = [], 0
    for step, (size, held) in enumerate(requests):
        for end in [e for e in ends if e[0] <= step]:
            alloc.release(end[1])
            ends.remove(end)
        if size > len(alloc.available):
            refused += 1
            continue
        started = time.perf_counter()
        chosen = [g.minor for g in alloc.allocate(size)]
        grants.append((chosen, time.perf_counter() - started))
        ends.append((step + held, chosen))
    return grants, refused


def shares(grants, judge: Topology):
    multi = [m for m, _ in grants if len(m) > 1]
    levels = [judge.set_level(m) for m in multi]
    nvlink = sum(lv == NVLINK_LEVEL for lv in levels)
    near = sum(lv < SYSTEM for lv in levels)
    n = max(len(multi), 1)
    return 100.0 * nvlink / n, 100.0 * near / n, len(multi)


def ratio(ours: float, base: float) -> str:
    return f"{ours / base:.2f}x" if base else ("=" if ours == base else "inf")


def run_layout(layout: str, streams: int, requests: int, seed: int) -> None:
    gpus, topo = read_node(layout)
    first_free = Topology({})
    aware, base, refused = [], [], [0, 0]
    for k in range(streams):
        reqs = stream(seed + k, requests)
        a, ra = replay(Allocator(gpus, topo), reqs)
        b, rb = replay(FirstFree(gpus, first_free), reqs)
        aware += a
        base += b
        refused[0] += ra
        refused[1] += rb
    nv_a, near_a, multi = shares(aware, topo)
    nv_b, near_b, _ = shares(base, topo)
    t_a = sum(t for _, t in aware) / max(len(aware), 1) * 1e6
    t_b = sum(t for _, t in base) / max(len(base), 1) * 1e6
    print(f"layout {layout} ({DESCRIBED.get(layout, layout)}): {streams} streams x "
          f"{requests} requests, seed {seed}")
    print(f"  {'':38}{'first free':>12}{'by topology':>13}{'ratio':>8}")
    print(f"  {'multi-GPU grants all on NVLink (%)':38}{nv_b:12.1f}{nv_a:13.1f}"
          f"{ratio(nv_a, nv_b):>8}")
    print(f"  {'multi-GPU grants with no SYS pair (%)':38}{near_b:12.1f}{near_a:13.1f}"
          f"{ratio(near_a, near_b):>8}")
    print(f"  {'selection time per call (us)':38}{t_b:12.1f}{t_a:13.1f}{ratio(t_a, t_b):>8}")
    print(f"  grants {len(aware)} ({multi} multi-GPU), refused {refused[0]} / {refused[1]} "
          f"(same admissions: {'yes' if refused[0] == refused[1] else 'NO'})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layouts", default="v100x8,pcie8",
                   help=f"fake NVML layouts, comma-separated (of {', '.join(fake_nvml.LAYOUTS)})")
    p.add_argument("--streams", type=int, default=20)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    for name in ("streams", "requests"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be at least 1")
    layouts = [x for x in a.layouts.split(",") if x]
    unknown = [x for x in layouts if x not in fake_nvml.LAYOUTS]
    if unknown or not layouts:
        p.error(f"--layouts: unknown layout(s) {', '.join(unknown) or '(none given)'}; "
                f"known: {', '.join(fake_nvml.LAYOUTS)}")
    for layout in layouts:
        run_layout(layout, a.streams, a.requests, a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
