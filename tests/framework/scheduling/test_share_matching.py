"""Shares of shared GPUs in offer matching: only on gpu_shares_<index>, never on
whole gpus, in the agent's granularity and up to its largest share, the fullest GPU
first; the TaskInfo asks Mesos for exactly the slots taken; unplaceable shares say why."""
import pytest

from framework.scheduling.matching import Matcher, share_reason
from framework.tasks import taskinfo
from framework.tasks.task_spec import TaskSpec, TaskSpecError
from tests.framework.offers import offer


def task(i, gpus, app="/a", **kw):
    return TaskSpec(id=f"{app.strip('/')}.{i}", app_id=app, cmd="true", cpus=0.1, mem=10,
                    gpus=gpus, **kw)


def sharing_offer(offer_id, shares, granularity=0.25, largest=0.75, gpus=0, **kw):
    o = offer(offer_id, gpus=gpus, cpus=8, mem=4096, gpu_sharing="mps",
              gpu_share_granularity=granularity, gpu_share_max=largest, **kw)
    o["resources"] += [{"name": f"gpu_shares_{i}", "type": "SCALAR", "scalar": {"value": n},
                        "role": "*"} for i, n in shares.items()]
    return o


def test_a_share_goes_on_a_shared_gpu_and_never_on_whole_ones():
    result = Matcher().match([task(0, 0.25)], [offer("whole", gpus=4, cpus=8)])
    assert result.unplaced and not result.placements
    result = Matcher().match([task(0, 0.25)], [offer("whole", gpus=4, cpus=8),
                                               sharing_offer("s", {2: 4})])
    assert list(result.placements) == ["s"]
    assert result.shared_gpus() == {"a.0": (2, 1)}
    assert result.slots["s"].shares == {2: 3}


def test_the_fullest_gpu_it_fits_on_is_taken_and_a_share_never_spans_gpus():
    # GPU 0 has 2 slots left, GPU 1 has 4: a 0.5 goes on GPU 0, a 0.75 on GPU 1
    result = Matcher().match([task(0, 0.5), task(1, 0.75)], [sharing_offer("s", {0: 2, 1: 4})])
    assert result.shared_gpus() == {"a.0": (0, 2), "a.1": (1, 3)}
    # 2 + 2 slots left on two GPUs do not make room for a 0.75
    result = Matcher().match([task(0, 0.75, app="/b")], [sharing_offer("s", {0: 2, 1: 2})])
    assert [t.id for t in result.unplaced] == ["b.0"]


def test_granularity_and_largest_share_of_the_agent_are_kept():
    offers = [sharing_offer("s", {0: 4}, granularity=0.25, largest=0.25)]
    result = Matcher().match([task(0, 0.5), task(1, 0.1), task(2, 0.25)], offers)
    assert [t.id for t in result.unplaced] == ["a.0", "a.1"]
    assert result.shared_gpus() == {"a.2": (0, 1)}
    assert "no offered agent shares GPUs in that size" in share_reason(0.5, offers)
    assert "no offered agent has a shared GPU" in share_reason(0.25, [offer("w", gpus=1)])
    assert share_reason(0.25, offers) is None          # it fits there once slots free up


def test_restricted_cpu_tasks_stay_off_offers_with_shares():
    cpu = TaskSpec(id="c.0", app_id="/c", cmd="true", cpus=0.1, mem=10)
    result = Matcher().match([cpu], [sharing_offer("s", {0: 4})])
    assert result.unplaced == [cpu]


def test_the_taskinfo_asks_for_the_slots_of_the_gpu_it_was_placed_on():
    placed = task(0, 0.5).on_shared_gpu(3, 2)
    resources = {r["name"]: r["scalar"]["value"] for r in taskinfo.task_resources(placed)
                 if "scalar" in r}
    assert resources["gpu_shares_3"] == 2.0 and "gpus" not in resources
    assert TaskSpec.from_json(placed.to_json()) == placed     # stored and read back whole


@pytest.mark.parametrize("gpus, message", [
    (1.5, "neither a whole number of GPUs nor a share"),
    (-0.25, "must be 0 or more"),
    (True, "must be a number of GPUs"),
])
def test_bad_gpu_amounts_are_refused_by_name(gpus, message):
    with pytest.raises(TaskSpecError, match=f"gpus: .*{message}|gpus: {message}"):
        task(0, gpus)


def test_whole_gpus_stay_whole():
    assert task(0, 2.0).gpus == 2 and task(0, 2.0).share == 0
    assert task(0, 0.25).share == 0.25 and task(0, 0.25).whole_gpus == 0
    with pytest.raises(TaskSpecError, match="shared_gpu"):
        task(0, 1, shared_gpu=0)


def test_an_unhealthy_shared_gpu_gets_no_share():
    offers = [sharing_offer("s", {0: 4, 1: 4})]
    result = Matcher().match([task(0, 0.25), task(1, 0.75)], offers,
                             unusable_shared={"agent-s": frozenset({0})})
    assert result.shared_gpus() == {"a.0": (1, 1), "a.1": (1, 3)}
    result = Matcher().match([task(0, 0.25)], offers,
                             unusable_shared={"agent-s": frozenset({0, 1})})
    assert result.unplaced and not result.placements
