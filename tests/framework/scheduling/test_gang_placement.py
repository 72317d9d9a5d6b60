"""Gang placement over offers shaped as Mesos sends them: all members or none,
packed onto the fewest nodes, constraints for the gang as a whole, the head gang
holding the offers it could use, and a gang that can never fit holding nothing."""
from framework.scheduling import gang_placement
from framework.scheduling.agent_inventory import AgentInventory
from framework.scheduling.matching import Matcher
from framework.tasks.ports import PortRequest
from framework.tasks.task_spec import TaskSpec
from tests.framework.offers import offer


def gpu_offer(name: str, gpus: int, **attributes) -> dict:
    data = offer(name, hostname=name, cpus=64, mem=512 * 1024, gpus=gpus, agent_id=name,
                 **attributes)
    data["resources"].append({"name": "ports", "type": "RANGES", "role": "*",
                              "ranges": {"range": [{"begin": 31000, "end": 31100}]}})
    return data


def gang(name: str, size: int, gpus: int, constraints=()) -> list[TaskSpec]:
    return [TaskSpec(id=f"{name}.{rank}", app_id=name, cmd="train", cpus=1, mem=1024, gpus=gpus,
                     constraints=tuple(constraints), ports=(PortRequest(),), gang=name,
                     gang_size=size, rank=rank) for rank in range(size)]


def place(gangs, offers, seen=None):
    matcher = Matcher()
    inventory = AgentInventory()
    inventory.saw_offers(seen or offers, {})
    return gang_placement.place(matcher, gangs, matcher.slots(offers), inventory.agents())


def hosts(result, name):
    return sorted(offer_id for offer_id, specs in result.placements.items()
                  for s in specs if s.gang == name)


def test_a_gang_packs_onto_the_one_node_it_fits_with_least_room_to_spare():
    offers = [gpu_offer("a", 8), gpu_offer("b", 4), gpu_offer("c", 8)]
    result = place([gang("g", 2, 2)], offers)
    assert result.placed == ["g"] and hosts(result, "g") == ["b", "b"]
    assert result.held == set()


def test_a_gang_bigger_than_a_node_takes_the_fewest_nodes():
    offers = [gpu_offer(n, g) for n, g in (("a", 2), ("b", 8), ("c", 8), ("d", 4))]
    result = place([gang("g", 16, 1)], offers)
    assert hosts(result, "g") == ["b"] * 8 + ["c"] * 8


def test_nothing_of_a_gang_is_placed_when_one_member_does_not_fit_and_the_offers_are_held():
    offers = [gpu_offer(n, 8) for n in "abc"]              # 3 of the 4 nodes it needs
    seen = offers + [gpu_offer("d", 8)]                    # d is busy, not offered now
    result = place([gang("g", 4, 8)], offers, seen)
    assert result.placements == {} and result.placed == []
    assert result.held == {"a", "b", "c"}
    assert "gang of 4 (8 GPU(s) each): the offers place 3 of 4 on 3 node(s)" in result.reasons["g"]


def test_a_gang_that_can_never_fit_holds_nothing_and_says_why():
    offers = [gpu_offer(n, 8) for n in "ab"]
    result = place([gang("big", 2, 16), gang("small", 1, 1)], offers)
    assert result.held == set() and "big" not in result.placed and "small" in result.placed
    assert "the agents seen have room for 0 of them even when free" in result.reasons["big"]


def test_two_gangs_of_60_percent_the_first_runs_the_second_waits_holding_what_is_left():
    offers = [gpu_offer(n, 8) for n in "abcde"]
    first, second = gang("first", 3, 8), gang("second", 3, 8)
    result = place([first, second], offers)
    assert result.placed == ["first"] and len(hosts(result, "first")) == 3
    assert "second" in result.reasons and len(result.held) == 2    # the 2 nodes left
    assert not result.held & set(hosts(result, "first"))


def test_the_head_gang_holds_its_offers_from_later_gangs():
    offers = [gpu_offer(n, 8) for n in "ab"]
    seen = offers + [gpu_offer("c", 8)]
    result = place([gang("head", 3, 8), gang("later", 1, 8)], offers, seen)
    assert result.placed == [] and result.held == {"a", "b"}


def test_static_constraints_choose_the_nodes_of_the_whole_gang():
    offers = [gpu_offer("a", 8, rack="r1"), gpu_offer("b", 8, rack="r2"),
              gpu_offer("c", 8, rack="r1")]
    result = place([gang("g", 2, 8, [["rack", "IS", "r1"]])], offers)
    assert hosts(result, "g") == ["a", "c"]
    result = place([gang("g", 3, 8, [["rack", "IS", "r1"]])], offers)
    assert result.placed == [] and result.held == set()
    assert "room for 2 of them even when free (rack:IS:r1)" in result.reasons["g"]
    seen = offers + [gpu_offer("d", 8, rack="r1")]
    result = place([gang("g", 3, 8, [["rack", "IS", "r1"]])], offers, seen)
    assert result.held == {"a", "c"}
    assert "place 2 of 3 on 2 node(s) qualifying for rack:IS:r1" in result.reasons["g"]


def test_group_by_spreads_the_gang_over_the_values():
    offers = [gpu_offer("a", 8, rack="r1"), gpu_offer("b", 8, rack="r2"),
              gpu_offer("c", 8, rack="r1"), gpu_offer("d", 8, rack="r2")]
    result = place([gang("g", 4, 2, [["rack", "GROUP_BY"]])], offers)
    placed = [o for o, specs in result.placements.items() for _ in specs]
    racks = {"a": "r1", "b": "r2", "c": "r1", "d": "r2"}
    assert sorted(racks[o] for o in placed) == ["r1", "r1", "r2", "r2"]


def test_only_complete_gangs_are_placed():
    members = gang("g", 3, 1)
    gangs, single = gang_placement.gangs_of(members[:2] + [TaskSpec(id="x", cmd="true")])
    assert gangs == [] and [s.id for s in single] == ["x"]
    gangs, _ = gang_placement.gangs_of(list(reversed(members)))
    assert [s.rank for s in gangs[0]] == [0, 1, 2]


def test_why_a_single_task_waits_is_said_in_words():
    matcher = Matcher()
    slots = matcher.slots([gpu_offer("a", 4, gpu_type="v100"), gpu_offer("b", 2, gpu_type="v100")])
    big = TaskSpec(id="big", cmd="train", gpus=8)
    assert matcher.unplaced_reason(big, slots) == (
        "needs 8 GPUs on one node; the largest free block offered is 4 (of 2 offered agent(s))")
    a100 = TaskSpec(id="a100", cmd="train", gpus=1, constraints=(("gpu_type", "LIKE", "a100.*"),))
    assert matcher.unplaced_reason(a100, slots) == (
        "no offered agent (2 offered) qualifies for gpu_type:LIKE:a100.*")
    cpu = TaskSpec(id="cpu", cmd="true", cpus=1, mem=32)
    assert matcher.unplaced_reason(cpu, slots).startswith(
        "asks no GPU and the 2 offered agent(s) have GPUs")
    fits = TaskSpec(id="fits", cmd="train", gpus=2)
    assert matcher.unplaced_reason(fits, slots) is None


def test_a_gpu_between_its_task_and_the_next_offer_still_counts_as_the_agent_s():
    inventory = AgentInventory()
    inventory.saw_offers([gpu_offer("a", 2)], {})
    inventory.saw_offers([gpu_offer("a", 1)], {})     # a task ended, its GPU not offered yet
    matcher = Matcher()
    members = gang("g", 2, 1)
    assert gang_placement.could_ever_fit(matcher, members[0], inventory.agents())
    result = gang_placement.place(matcher, [members], matcher.slots([gpu_offer("a", 1)]),
                                  inventory.agents())
    assert result.held == {"a"} and "place 1 of 2" in result.reasons["g"]
