"""Offer matching: resources, several tasks per offer, constraints, GPU agents
kept for GPU work."""
import random

import pytest

from framework.tasks.constraints import meets_all, offer_fields, PlacedValues
from framework.scheduling.matching import Matcher, unreserved_scalars
from framework.tasks.task_spec import TaskSpec, TaskSpecError
from tests.framework.offers import offer


def task(i, app="/a", **kw):
    kw.setdefault("cmd", "true")
    kw.setdefault("cpus", 1)
    kw.setdefault("mem", 128)
    return TaskSpec(id=f"{app.strip('/')}.{i}", app_id=app, **kw)


def placed_ids(result):
    return {offer_id: [t.id for t in tasks] for offer_id, tasks in result.placements.items()}


def test_several_tasks_per_offer_and_resources_subtracted():
    result = Matcher().match([task(i, cpus=0.1, mem=10) for i in range(12)],
                             [offer("o1", cpus=1.0, mem=1000)])
    assert len(result.placements["o1"]) == 10          # 10 x 0.1 cpus fit exactly in 1
    assert [t.id for t in result.unplaced] == ["a.10", "a.11"]
    assert result.slots["o1"].cpus == 0


def test_every_resource_limits():
    offers = [offer("o1", cpus=8, mem=300, disk=1000, gpus=0)]
    result = Matcher().match([task(i, mem=100, disk=600) for i in range(3)], offers)
    assert len(result.placements["o1"]) == 1            # disk allows one
    result = Matcher().match([task(i, mem=100) for i in range(5)], offers)
    assert len(result.placements["o1"]) == 3            # mem allows three


def test_gpus_whole_and_never_shared():
    offers = [offer("k80", gpus=2, cpus=8), offer("v100", gpus=8, cpus=16)]
    result = Matcher().match([task(i, gpus=1) for i in range(12)], offers)
    granted = {o: len(ts) for o, ts in result.placements.items()}
    assert granted == {"k80": 2, "v100": 8}
    assert len(result.unplaced) == 2
    assert all(s.gpus == 0 for s in result.slots.values())


def test_small_gpu_tasks_go_to_the_agent_with_fewest_gpus_first():
    offers = [offer("v100", gpus=8, cpus=16), offer("k80", gpus=2, cpus=8)]
    result = Matcher().match([task(0, gpus=1), task(1, gpus=8, app="/big")], offers)
    assert placed_ids(result) == {"k80": ["a.0"], "v100": ["big.1"]}


def test_restricted_keeps_cpu_tasks_off_gpu_agents():
    offers = [offer("gpu", gpus=2, cpus=8), offer("cpu", cpus=2)]
    result = Matcher().match([task(i) for i in range(4)], offers)
    assert placed_ids(result) == {"cpu": ["a.0", "a.1"]}
    assert len(result.unplaced) == 2


def test_restricted_lets_cpu_tasks_in_once_gpus_are_taken():
    # Marathon looks at the GPUs still in the offer: once GPU work took them,
    # the rest of the agent is fair game.
    result = Matcher().match([task(0, gpus=2, cpus=1), task(1, app="/cpu")],
                             [offer("gpu", gpus=2, cpus=8)])
    assert placed_ids(result) == {"gpu": ["a.0", "cpu.1"]}


def test_unrestricted_framework_and_label_override():
    offers = [offer("gpu", gpus=2, cpus=8), offer("cpu", cpus=1)]
    result = Matcher("unrestricted").match([task(i) for i in range(3)], offers)
    assert placed_ids(result) == {"cpu": ["a.0"], "gpu": ["a.1", "a.2"]}  # CPU agent first
    labelled = [task(i, labels={"GPU_SCHEDULING_BEHAVIOR": "unrestricted"}) for i in range(2)]
    result = Matcher().match(labelled + [task(9, app="/b")], [offer("gpu", gpus=2, cpus=8)])
    assert placed_ids(result) == {"gpu": ["a.0", "a.1"]}
    result = Matcher("unrestricted").match(
        [task(0, labels={"GPU_SCHEDULING_BEHAVIOR": "restricted"})], [offer("gpu", gpus=1)])
    assert result.placements == {}


def test_bad_gpu_scheduling_behavior_is_refused_and_an_unknown_label_means_the_default():
    with pytest.raises(TaskSpecError, match="gpu_scheduling: must be one of restricted, unrestricted"):
        Matcher("undefined")
    # Marathon 1.10 (ResourceMatcher): a label that names no behaviour (its old
    # default `undefined` among them) means the framework's behaviour.
    for value in ("undefined", "sometimes"):
        labelled = [task(0, labels={"GPU_SCHEDULING_BEHAVIOR": value})]
        assert Matcher().match(labelled, [offer("gpu", gpus=1)]).placements == {}
        assert placed_ids(Matcher("unrestricted").match(labelled, [offer("gpu", gpus=1)])) \
            == {"gpu": ["a.0"]}


def test_like_constraint_picks_matching_agents():
    offers = [offer("k80", gpus=2, gpu_type="tesla_k80"), offer("p100", gpus=2, gpu_type="tesla_p100"),
              offer("v100", gpus=8, gpu_type="tesla_v100"), offer("none", cpus=8)]
    rule = [["gpu_type", "LIKE", "tesla_(k80|v100)"]]
    result = Matcher().match([task(i, gpus=1, constraints=rule) for i in range(4)], offers)
    assert {o: len(t) for o, t in result.placements.items()} == {"k80": 2, "v100": 2}


def test_non_matching_constraint_leaves_the_task_waiting():
    result = Matcher().match([task(0, constraints=[["gpu_type", "IS", "tesla_a100"]])],
                             [offer("o", gpu_type="tesla_k80")])
    assert result.placements == {} and [t.id for t in result.unplaced] == ["a.0"]


def test_unique_hostname_spreads_and_counts_running_instances():
    offers = [offer(f"o{i}", hostname=f"h{i}", cpus=8) for i in range(3)]
    rule = [["hostname", "UNIQUE"]]
    running = {"/a": [{"hostname": "h0"}]}
    result = Matcher().match([task(i, constraints=rule) for i in range(4)], offers, running)
    assert placed_ids(result) == {"o1": ["a.0"], "o2": ["a.1"]}
    assert len(result.unplaced) == 2


def test_unique_is_per_app():
    offers = [offer("o1", hostname="h1", cpus=8)]
    rule = [["hostname", "UNIQUE"]]
    result = Matcher().match([task(0, constraints=rule), task(0, app="/b", constraints=rule)], offers)
    assert placed_ids(result) == {"o1": ["a.0", "b.0"]}


def test_max_per_and_cluster():
    offers = [offer(f"o{i}", hostname=f"h{i}", cpus=8, rack=f"r{i % 2}") for i in range(4)]
    result = Matcher().match([task(i, constraints=[["rack", "MAX_PER", "3"]]) for i in range(8)], offers)
    per_rack = {"r0": 0, "r1": 0}
    for offer_id, tasks in result.placements.items():
        per_rack[result.slots[offer_id].fields["rack"]] += len(tasks)
    assert per_rack == {"r0": 3, "r1": 3}
    result = Matcher().match([task(i, app="/c", constraints=[["rack", "CLUSTER"]]) for i in range(6)],
                             offers)
    racks = {result.slots[o].fields["rack"] for o in result.placements}
    assert len(racks) == 1 and sum(map(len, result.placements.values())) == 6


def test_group_by_spreads_evenly_and_respects_running_instances():
    offers = [offer(f"o{i}", cpus=16, az=f"z{i % 3}") for i in range(6)]
    running = {"/a": [{"az": "z0"}, {"az": "z0"}]}
    result = Matcher().match([task(i, constraints=[["az", "GROUP_BY", "3"]]) for i in range(7)],
                             offers, running)
    per_zone = {"z0": 2, "z1": 0, "z2": 0}
    for offer_id, tasks in result.placements.items():
        per_zone[result.slots[offer_id].fields["az"]] += len(tasks)
    assert per_zone == {"z0": 3, "z1": 3, "z2": 3}


def test_group_by_needing_more_groups_than_offered_places_one_per_group():
    offers = [offer("o1", cpus=16, az="z1")]
    result = Matcher().match([task(i, constraints=[["az", "GROUP_BY", "2"]]) for i in range(3)], offers)
    assert len(result.placements["o1"]) == 1


def test_reserved_resources_are_not_used():
    o = offer("o", cpus=1)
    o["resources"].append({"name": "cpus", "type": "SCALAR", "scalar": {"value": 8}, "role": "ml",
                           "reservations": [{"type": "STATIC", "role": "ml"}]})
    assert unreserved_scalars(o)["cpus"] == 1
    assert len(Matcher().match([task(i) for i in range(3)], [o]).placements["o"]) == 1


def test_unplaced_keep_queue_order():
    tasks = [task(0, gpus=1), task(1, app="/b"), task(2, gpus=1), task(3, app="/b")]
    result = Matcher().match(tasks, [])
    assert [t.id for t in result.unplaced] == ["a.0", "b.1", "a.2", "b.3"]


def naive_place(tasks, offers):
    """The reference: one task at a time, first offer that fits and meets
    every constraint (Marathon's rules), restricted GPU behaviour."""
    slots = []
    for o in offers:
        amounts = unreserved_scalars(o)
        slots.append({"id": o["id"]["value"], "fields": offer_fields(o),
                      "cpus": round(amounts.get("cpus", 0) * 1000),
                      "mem": round(amounts.get("mem", 0) * 1000), "gpus": int(amounts.get("gpus", 0))})
    slots.sort(key=lambda s: s["gpus"])
    placed_fields: dict = {}
    placed = 0
    for t in tasks:
        for s in slots:
            if s["cpus"] < t.cpus * 1000 or s["mem"] < t.mem * 1000 or s["gpus"] < t.gpus:
                continue
            if not t.gpus and s["gpus"] > 0:
                continue
            history = placed_fields.get(t.app_id, [])
            by_field = {c.field: PlacedValues(f.get(c.field) for f in history) for c in t.constraints}
            if not meets_all(t.constraints, s["fields"], by_field):
                continue
            s["cpus"] -= round(t.cpus * 1000)
            s["mem"] -= round(t.mem * 1000)
            s["gpus"] -= t.gpus
            placed_fields.setdefault(t.app_id, []).append(s["fields"])
            placed += 1
            break
    return placed


def test_grouped_matcher_places_what_first_fit_places_and_breaks_no_rule():
    rng = random.Random(7)
    types = ["tesla_k80", "tesla_v100", "tesla_p100", "none"]
    offers = [offer(f"o{i}", hostname=f"h{i}", cpus=rng.choice([4, 8]), mem=8192,
                    gpus=rng.choice([0, 2, 8]), gpu_type=rng.choice(types), rack=f"r{i % 5}")
              for i in range(60)]
    rules = [[], [["gpu_type", "LIKE", "tesla_(k80|v100)"]], [["hostname", "UNIQUE"]],
             [["rack", "MAX_PER", "4"]], [["gpu_type", "UNLIKE", "tesla_k80"], ["rack", "GROUP_BY"]]]
    tasks = []
    for i in range(400):
        app = f"/app{i % 8}"
        tasks.append(task(i, app=app, cpus=rng.choice([0.5, 1]), mem=256,
                          gpus=rng.choice([0, 0, 1, 2]), constraints=rules[i % 8 % len(rules)]))
    result = Matcher().match(tasks, offers)
    placed_count = sum(map(len, result.placements.values()))
    assert placed_count >= naive_place(tasks, offers) * 0.95
    # replay every placement against Marathon's rules, in order
    history: dict = {}
    for offer_id, placed in result.placements.items():
        slot = result.slots[offer_id]
        assert slot.cpus >= 0 and slot.mem >= 0 and slot.gpus >= 0
        for t in placed:
            if not t.gpus:  # restricted: only once GPU work has taken every GPU
                assert slot.gpus == 0
            history.setdefault(t.app_id, []).append(slot.fields)
    for app, fields in history.items():
        app_tasks = [t for t in tasks if t.app_id == app]
        unique = any(c.operator == "UNIQUE" for c in app_tasks[0].constraints)
        if unique:
            hosts = [f["hostname"] for f in fields]
            assert len(hosts) == len(set(hosts))
        if any(c.operator == "MAX_PER" for c in app_tasks[0].constraints):
            for rack in {f["rack"] for f in fields}:
                assert sum(f["rack"] == rack for f in fields) <= 4
