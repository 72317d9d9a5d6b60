"""Ports: offer ranges, what the matcher takes from them, the TaskInfo's `ports`
resource, and Marathon's port variables (EnvironmentHelper.portsEnv)."""
import random

import pytest

from framework.tasks import taskinfo
from framework.scheduling.matching import Matcher
from framework.tasks.ports import PortError, PortRanges, PortRequest, environment, ranges_resource
from framework.tasks.task_spec import TaskSpec, TaskSpecError
from tests.framework.offers import offer


def with_ports(offer_id: str, ranges, **kw) -> dict:
    data = offer(offer_id, **kw)
    data["resources"].append({"name": "ports", "type": "RANGES", "role": "*", "ranges": {
        "range": [{"begin": b, "end": e} for b, e in ranges]}})
    return data


def spec(i: int, *requests: PortRequest, **kw) -> TaskSpec:
    return TaskSpec(id=f"a.{i}", app_id="/a", cmd="true", cpus=0.1, mem=8, ports=requests, **kw)


def test_ranges_merge_take_and_split():
    ranges = PortRanges([(31005, 31009), (31000, 31004), (32000, 32000)])
    assert ranges.ranges == [(31000, 31009), (32000, 32000)] and ranges.count == 11
    ranges.remove(31005)
    assert ranges.ranges == [(31000, 31004), (31006, 31009), (32000, 32000)]
    taken = ranges.take_any(9, random.Random(1))
    assert len(set(taken)) == 9 and ranges.count == 1 and 31005 not in taken
    with pytest.raises(PortError, match="2 ports wanted, 1 offered"):
        ranges.take_any(2)
    with pytest.raises(PortError, match="port 31005 is not in the offer"):
        ranges.remove(31005)


def test_reserved_and_role_ports_are_not_used():
    data = with_ports("o", [(31000, 31001)])
    data["resources"].append({"name": "ports", "type": "RANGES", "role": "web",
                              "ranges": {"range": [{"begin": 1, "end": 100}]}})
    assert PortRanges.from_offer(data).ranges == [(31000, 31001)]


def test_the_matcher_gives_each_task_its_own_ports_and_fixed_ones_once():
    offers = [with_ports("o1", [(31000, 31002)]), with_ports("o2", [(31000, 31010)])]
    # (in queue order: a port picked at random for an earlier task may be the one
    # a later task asks for by number, as in Marathon)
    tasks = [spec(9, PortRequest(host_port=31005)), spec(10, PortRequest(host_port=31005))]
    tasks += [spec(i, PortRequest(), PortRequest()) for i in range(3)]
    result = Matcher().match(tasks, offers)
    given = result.host_ports()
    placed = {s.id: o for o, specs in result.placements.items() for s in specs}
    assert sum(1 for o in placed.values() if o == "o1") == 1   # 3 ports: one 2-port task
    for task_id in ("a.0", "a.1", "a.2"):
        assert len(given[task_id]) == 2
    assert given["a.9"] == (31005,)
    assert [s.id for s in result.unplaced] == ["a.10"]   # 31005 went to a.9
    per_offer = {}
    for task_id, ports in given.items():
        per_offer.setdefault(placed[task_id], []).extend(ports)
    assert all(len(p) == len(set(p)) for p in per_offer.values()), per_offer


def test_a_task_without_port_requests_needs_no_ports_resource():
    result = Matcher().match([spec(0)], [offer("o")])
    assert result.host_ports() == {} and result.unplaced == []
    result = Matcher().match([spec(1, PortRequest())], [offer("o")])
    assert [s.id for s in result.unplaced] == ["a.1"]


def test_container_only_ports_take_nothing_and_get_none():
    result = Matcher().match([spec(0, PortRequest(host_port=None, container_port=80))],
                             [offer("o")])
    assert result.host_ports() == {"a.0": (None,)}


def test_placed_spec_carries_ports_env_and_the_taskinfo_resource():
    base = spec(0, PortRequest(declared=10000, name="http"), PortRequest(declared=10001),
                env={"PORT1": "mine"})
    placed = base.placed((31001, 31007), "node-1")
    assert placed.host_ports == (31001, 31007)
    assert placed.env["PORT0"] == "31001" and placed.env["PORT1"] == "mine"   # the app's wins
    assert placed.env["PORT_HTTP"] == "31001" and placed.env["PORT_10001"] == "31007"
    assert placed.env["PORTS"] == "31001,31007" and placed.env["HOST"] == "node-1"
    info = taskinfo.build(placed, "agent", "fw", taskinfo.ExecutorSettings())
    assert {"name": "ports", "type": "RANGES", "ranges": {"range": [
        {"begin": 31001, "end": 31001}, {"begin": 31007, "end": 31007}]}} in info["resources"]
    assert TaskSpec.from_json(placed.to_json()) == placed
    with pytest.raises(PortError, match="31002 given where 31005 was required"):
        spec(1, PortRequest(host_port=31005)).placed((31002,), "h")


def test_marathon_port_variables():
    env = environment([PortRequest(declared=8080, container_port=8080, name="web"),
                       PortRequest(host_port=None, container_port=9090, declared=9090),
                       PortRequest(host_port=None, container_port=0, declared=0)],
                      [31000, None, None], random.Random(3))
    assert env["PORT0"] == "31000" and env["PORT_8080"] == "31000" and env["PORT_WEB"] == "31000"
    assert env["PORT1"] == "9090" and env["PORT_9090"] == "9090"
    generated = int(env["PORT2"])
    assert 1025 <= generated and env[f"PORT_{generated}"] == str(generated)
    assert env["PORT"] == "31000" and env["PORTS"] == f"31000,{generated}"
    assert environment([], []) == {}


def test_bad_port_requests_are_refused_by_name():
    with pytest.raises(PortError, match="host_port: must be a port number"):
        PortRequest(host_port=70000)
    with pytest.raises(PortError, match="protocol: must be one of"):
        PortRequest(protocol="sctp")
    with pytest.raises(PortError, match="host ports must be unique"):
        spec(0, PortRequest(host_port=31000), PortRequest(host_port=31000))
    with pytest.raises(TaskSpecError, match="network: BRIDGE is only for DOCKER"):
        spec(0, network="BRIDGE")
    assert ranges_resource([None]) is None
