"""The agent daemon picks GPUs by interconnect, through its real unix-socket API on
the fake NVML's layouts: what a prepare is granted, what the log says, what survives
a SIGKILL, and a node whose NVML has no topology."""
import functools
from itertools import combinations

import pytest

from isolator.api import ShareRequest
from isolator.client import AgentError
from localcluster import fake_nvml
from localcluster.fake_nvml.control import Control
from tests.bed import waiting
from tests.bed.agent_daemon import minors_of

wait_until = functools.partial(waiting.wait_until, interval=0.05)
CUBE = fake_nvml.DGX1_NVLINKS


def _all_nvlink(minors, links=CUBE) -> bool:
    return all((a, b) in links for a, b in combinations(sorted(minors), 2))


def _held(agent):
    return {cid: sorted(c["gpus"]) for cid, c in agent.client.info()["containers"].items()}


def test_cube_mesh_through_the_api_and_a_sigkill(daemon_factory):
    agent = daemon_factory("v100x8")
    assert "GPU topology: 0: NVLink to 1,2,3,4; 1: NVLink to 0,2,3,5;" in agent.log()
    quad = agent.client.prepare("quad", 4)
    assert minors_of(quad) == [0, 1, 2, 3] and _all_nvlink(minors_of(quad))
    assert "0-3 NV2" in quad.topology                      # the grant says how they link
    pair = agent.client.prepare("pair", 2)
    assert _all_nvlink(minors_of(pair)) and CUBE[tuple(minors_of(pair))] == 2
    assert "chosen of 4 free: every pair on NVLink" in agent.log()
    before = _held(agent)

    agent.kill9()                                          # the ledger keeps the grants
    again = daemon_factory("v100x8", work_dir=agent.work_dir)
    assert _held(again) == before
    rest = sorted(set(range(8)) - set(minors_of(quad)) - set(minors_of(pair)))
    last = again.client.prepare("last", 2)
    assert minors_of(last) == rest                         # what is left, nothing held twice
    assert again.client.prepare("pair", 2).gpus == pair.gpus   # a retry: the same grant
    with pytest.raises(AgentError, match="requested 1 GPUs but only 0 of 8 are free"):
        again.client.prepare("more", 1)


def test_pcie_box_pair_stays_under_one_switch(daemon_factory):
    agent = daemon_factory("pcie8")
    assert minors_of(agent.client.prepare("three", 3)) == [0, 1, 2]
    assert minors_of(agent.client.prepare("two", 2)) == [4, 5]        # not 3 and 4 (SYS)
    assert "first free [3, 4] would be SYS at worst" in agent.log()
    assert minors_of(agent.client.prepare("one", 1)) == [3]
    agent.client.cleanup("three")
    assert minors_of(agent.client.prepare("again", 3)) == [0, 1, 2]    # not 6, 7 + one
    assert minors_of(agent.client.prepare("last", 2)) == [6, 7]


def test_nvswitch_board_grants_eight_and_any_four(daemon_factory):
    agent = daemon_factory(fake_nvml.layout("h200x8"))
    assert "0: NVLink to 1,2,3,4,5,6,7;" in agent.log()
    four = agent.client.prepare("a", 4)
    assert minors_of(four) == [0, 1, 2, 3] and "NV18" in four.topology
    agent.client.cleanup("a")
    assert minors_of(agent.client.prepare("b", 8)) == list(range(8))


def _sick(agent, minor):
    Control(agent.control).xid(minor, 79)                  # off the bus: unhealthy
    wait_until(lambda: any(g.minor == minor and g.state == "unhealthy"
                           for g in agent.client.health().gpus), 10, f"GPU {minor} unhealthy")


def test_a_sick_gpu_is_skipped_and_the_other_quad_kept_whole(daemon_factory, tmp_path):
    agent = daemon_factory("v100x8", control=tmp_path / "nvml.control",
                           extra=["--health_poll_interval", "0.2"])
    _sick(agent, 0)
    # {1,2,3}, {4,6,7} and {5,6,7} are equally good triangles; {1,2,3} cuts the fewest
    # links to what stays free, so the quad {4,5,6,7} is still there
    assert minors_of(agent.client.prepare("tri", 3)) == [1, 2, 3]
    assert minors_of(agent.client.prepare("quad", 4)) == [4, 5, 6, 7]


def test_sick_and_shared_gpus_stay_out_of_the_choice(daemon_factory, tmp_path):
    agent = daemon_factory("v100x8", control=tmp_path / "nvml.control",
                           extra=["--health_poll_interval", "0.2", "--shared_gpus", "6",
                                  "--sharing", "time-slicing"])
    _sick(agent, 1)
    # no NVLinked quad is whole; NVLinked triangles are: {0,2,3} the better, then {4,5,7}
    assert minors_of(agent.client.prepare("a", 3)) == [0, 2, 3]
    assert minors_of(agent.client.prepare("b", 3)) == [4, 5, 7]
    with pytest.raises(AgentError, match="free but unhealthy: GPU 1"):
        agent.client.prepare("c", 1)
    assert agent.client.prepare("s", 0, share=ShareRequest(0.5)).share.minor == 6


def test_no_topology_in_nvml_is_first_free_with_one_log_line(daemon_factory):
    agent = daemon_factory("v100x8vm")
    assert agent.log().count("GPU topology unknown (NVML answers NOT_SUPPORTED") == 1
    assert minors_of(agent.client.prepare("a", 1)) == [0]
    assert minors_of(agent.client.prepare("b", 3)) == [1, 2, 3]
    agent.client.cleanup("a")
    assert minors_of(agent.client.prepare("c", 2)) == [0, 4]          # first free, as Mesos
    assert agent.log().count("GPU topology unknown") == 1
    assert "chosen of 5 free: first free (no topology)" in agent.log()


def test_nvml_failing_topology_calls_at_start_then_a_restart_reads_it(daemon_factory, tmp_path):
    """NVML failing every topology call when the daemon starts: first free, said once;
    SIGKILLed and restarted once NVML answers, it keeps the grant and goes by topology."""
    control = tmp_path / "nvml.control"
    agent = daemon_factory("v100x8", control=control, start=False)
    nvml = Control(control)
    nvml.fail("nvmlDeviceGetTopologyCommonAncestor")
    nvml.fail("nvmlDeviceGetNvLinkState")
    agent.start()
    assert agent.log().count("GPU topology unknown (NVML answers Unknown Error to "
                             "nvmlDeviceGetTopologyCommonAncestor") == 1
    assert minors_of(agent.client.prepare("a", 3)) == [0, 1, 2]
    agent.kill9()
    nvml.heal("nvmlDeviceGetTopologyCommonAncestor")
    nvml.heal("nvmlDeviceGetNvLinkState")
    again = daemon_factory("v100x8", control=control, work_dir=agent.work_dir)
    assert "GPU topology: 0: NVLink to 1,2,3,4;" in again.log()
    assert _held(again) == {"a": [0, 1, 2]}
    # first free would be 3, 4 (SYS); an NV2 pair of the other quad instead
    pair = minors_of(again.client.prepare("b", 2))
    assert pair != [3, 4] and CUBE[tuple(pair)] == 2
