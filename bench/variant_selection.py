"""Variant selection speed: 10,000 offers against an index of 50 variants, next
to the plain matcher (the same tasks and offers, an image without variants)
in the same run.

Offers come from agents of 36 kinds (no GPU, K80, P100, V100, T4, A100 x six CPU
families), each with the `platform_features` its `mesos-gpu agent flags` would
print; the index has 50 entries (a fallback, CPU families and levels, compute
capabilities with drivers and CUDA versions, combinations, some with a CUDA
label). One task per offer (4 cpus, the offer's size), so every offer is
placed. Two things are timed, each the best of --repeat runs of CPU time:

- selection: what the scheduler does per offer round, matching (only agents
  that run a variant) plus pinning each placed task to its agent's variant;
  against the plain matcher placing the same tasks;
- launch: the same plus building every TaskInfo, against the plain matcher
  plus TaskInfos (what a round costs either way).

A second line repeats it with every agent a kind of its own (no two offers
share a platform_features value), the worst case for the per-kind cache.
Prints CPU seconds and the ratio to the plain matcher; never asserts.

    .venv/bin/python bench/variant_selection.py [--offers 10000] [--variants 50] [--repeat 5]
"""
import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from framework.tasks import taskinfo  # noqa: E402
from framework.tasks.constraints import offer_fields  # noqa: E402
from framework.images.image_index import ImageIndex, Variant  # noqa: E402
from framework.scheduling.matching import Matcher  # noqa: E402
from framework.tasks.task_spec import TaskSpec  # noqa: E402
from framework.images.variant_selection import Selector, node_of  # noqa: E402
from isolator.discovery.platform_features import parse_feature  # noqa: E402

IMAGE = "registry.local:5000/cv/tf:1.12"
PLAIN = "registry.local:5000/cv/plain:1"
GPUS = [(None, None, None), ("3.7", "nvidia-470-82", "cuda-11-4"),
        ("6.0", "nvidia-535-54", "cuda-12-2"), ("7.0", "nvidia-535-54", "cuda-12-2"),
        ("7.5", "nvidia-550-54", "cuda-12-4"), ("8.0", "nvidia-550-54", "cuda-12-4")]
CPUS = [("x86-64-v3", "haswell"), ("x86-64-v3", "broadwell"), ("x86-64-v4", "skylake512"),
        ("x86-64-v4", "icelake"), ("x86-64-v3", "zen2"), ("x86-64-v3", "zen3")]


def agent_features(kind: int, distinct: int = 0) -> str:
    cc, driver, cuda = GPUS[kind % len(GPUS)]
    level, family = CPUS[(kind // len(GPUS)) % len(CPUS)]
    names = [driver, cuda, f"nv-compute-{cc.replace('.', '-')}" if cc else None, level, family]
    if distinct:      # a driver minor of its own: a value no other agent has
        names[0] = f"nvidia-535-{distinct}" if cc else None
    return "/".join(n for n in names if n)


def make_offers(count: int, distinct: bool, rng: random.Random) -> list[dict]:
    offers = []
    for i in range(count):
        kind = rng.randrange(len(GPUS) * len(CPUS))
        offers.append({
            "id": {"value": f"offer-{i}"}, "agent_id": {"value": f"agent-{i}"},
            "hostname": f"node-{i}.example",
            "resources": [{"name": "cpus", "type": "SCALAR", "scalar": {"value": 4}},
                          {"name": "mem", "type": "SCALAR", "scalar": {"value": 16384}}],
            "attributes": [{"name": "platform_features", "type": "TEXT",
                            "text": {"value": agent_features(kind, i + 1 if distinct else 0)}},
                           {"name": "rack", "type": "TEXT", "text": {"value": f"r{i % 40}"}}]})
    return offers


def make_index(count: int, rng: random.Random) -> ImageIndex:
    pool = [["nv-compute-3-7", "nvidia-470-82"], ["nv-compute-7-0", "cuda-12-2"],
            ["nv-compute-8-0", "cuda-12-4"], ["nv-compute-7-5"], ["nv-compute-6-0"],
            ["skylake512"], ["icelake"], ["zen3"], ["broadwell"], ["x86-64-v4"], ["x86-64-v3"],
            ["cuda-12-0"], ["nvidia-535-54"], ["zen2", "nv-compute-7-0"],
            ["broadwell", "nv-compute-3-7", "nvidia-470-82"], ["icelake", "nv-compute-8-0"]]
    variants = [Variant("sha256:" + "0" * 64, "application/vnd.oci.image.manifest.v1+json",
                        1000, 0)]
    for position in range(1, count):
        features = list(rng.choice(pool))
        if rng.random() < 0.3:
            features += [f for f in rng.choice(pool) if f not in features]
        variants.append(Variant(f"sha256:{position:064x}", variants[0].media_type, 1000,
                                position, tuple(features),
                                tuple(parse_feature(f) for f in features),
                                "12.0" if rng.random() < 0.2 else None))
    return ImageIndex(IMAGE, "sha256:" + "f" * 64, "application/vnd.oci.image.index.v1+json",
                      tuple(variants), True)


def make_tasks(count: int, image: str) -> list[TaskSpec]:
    labels = {"GPU_SCHEDULING_BEHAVIOR": "unrestricted"}
    return [TaskSpec(id=f"app.{i}", app_id="/app", container="DOCKER", image=image, cmd="run",
                     cpus=4, mem=1024, labels=labels) for i in range(count)]


def plain_round(tasks, offers, build):
    result = Matcher().match(tasks, offers)
    # the scheduler keeps each placed offer's fields on the task record either way
    fields = {o["id"]["value"]: offer_fields(o) for o in offers if o["id"]["value"] in result.placements}
    launched = 0
    for offer_id, specs in result.placements.items():
        assert fields[offer_id]
        for spec in specs:
            if build:
                taskinfo.build(spec, "agent", "fw", SETTINGS)
            launched += 1
    return launched


def variant_round(tasks, offers, index, build):
    selector = Selector({IMAGE: index})
    result = Matcher().match(tasks, offers, None, selector)
    fields = {o["id"]["value"]: offer_fields(o) for o in offers if o["id"]["value"] in result.placements}
    launched = 0
    for offer_id, specs in result.placements.items():
        for spec in specs:
            launch = selector.pin(spec, fields[offer_id])
            if build:
                taskinfo.build(launch, "agent", "fw", SETTINGS)
            launched += 1
    return launched


SETTINGS = taskinfo.ExecutorSettings(command="mesos-gpu executor")


def best(repeat: int, function, *args):
    times, result = [], None
    for _ in range(repeat):
        node_of.cache_clear()            # every run pays for parsing the nodes
        start = time.process_time()
        result = function(*args)
        times.append(time.process_time() - start)
    return min(times), result


def run(offers_count: int, variants: int, repeat: int, distinct: bool) -> None:
    rng = random.Random(20181112 + distinct)
    offers = make_offers(offers_count, distinct, rng)
    index = make_index(variants, rng)
    plain_tasks, variant_tasks = make_tasks(offers_count, PLAIN), make_tasks(offers_count, IMAGE)
    kinds = len({o["attributes"][0]["text"]["value"] for o in offers})
    for build, what in ((False, "selection"), (True, "launch   ")):
        plain_s, plain_n = best(repeat, plain_round, plain_tasks, offers, build)
        ours_s, ours_n = best(repeat, variant_round, variant_tasks, offers, index, build)
        print(f"{offers_count:>6} offers ({kinds:>5} kinds of agent), {len(index.variants)} "
              f"variants | {what}: plain matcher {plain_s:6.3f} s CPU ({plain_n} placed), "
              f"with variants {ours_s:6.3f} s CPU ({ours_n} placed, pinned) | ratio "
              f"x{ours_s / max(plain_s, 1e-9):.2f}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--offers", type=int, default=10000)
    parser.add_argument("--variants", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5, help="best of N runs (default 5)")
    args = parser.parse_args()
    print(f"variant selection bench: python {sys.version.split()[0]}; CPU time via "
          f"time.process_time(), best of {args.repeat}; target: ratio <= 1.2")
    run(args.offers, args.variants, args.repeat, distinct=False)
    run(args.offers, args.variants, args.repeat, distinct=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
