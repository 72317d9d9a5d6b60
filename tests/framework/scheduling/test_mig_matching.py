"""Offer matching with MIG devices: a task naming a profile takes it from a mixed
node's mig-<profile> resource or from a single node of that profile's gpus; a task
asking for whole GPUs never takes a single node's MIG devices; bad input is named."""
import pytest

from framework.scheduling.matching import Matcher
from framework.tasks.task_spec import TaskSpec, TaskSpecError


def offer(i, resources, attributes=()):
    return {"id": {"value": f"o{i}"}, "agent_id": {"value": f"a{i}"}, "hostname": f"n{i}",
            "resources": [{"name": n, "type": "SCALAR", "scalar": {"value": v}}
                          for n, v in [("cpus", 32), ("mem", 65536), *resources]],
            "attributes": [{"name": n, "type": "TEXT", "text": {"value": v}}
                           for n, v in attributes]}


def spec(i, gpus=1, profile=""):
    return TaskSpec(id=f"t{i}", app_id="/a", cmd="true", gpus=gpus, mig_profile=profile)


def test_profile_from_mixed_node_resource_and_whole_gpus_apart():
    mixed = offer(0, [("gpus", 1), ("mig-1g.18gb", 3), ("mig-3g.71gb", 1)])
    r = Matcher().match([spec(0, 2, "1g.18gb"), spec(1, 1, "3g.71gb"), spec(2, 1, "3g.71gb"),
                         spec(3, 1), spec(4, 2, "1g.18gb")], [mixed])
    assert [t.id for t in r.placements["o0"]] == ["t0", "t1", "t3"]
    assert [t.id for t in r.unplaced] == ["t2", "t4"]        # 3g.71gb and 1g.18gb used up
    left = r.slots["o0"]
    assert left.mig == {"1g.18gb": 1, "3g.71gb": 0} and left.gpus == 0


def test_single_node_gpus_are_its_profile_only():
    single = offer(0, [("gpus", 14)], [("gpu_mig_profile", "1g.18gb")])
    r = Matcher().match([spec(0, 1), spec(1, 14, "1g.18gb"), spec(2, 1, "3g.71gb")], [single])
    assert [t.id for t in r.placements["o0"]] == ["t1"]
    assert {t.id for t in r.unplaced} == {"t0", "t2"}


def test_bad_mig_profile_named():
    with pytest.raises(TaskSpecError, match="mig_profile: must be a MIG profile"):
        spec(0, 1, "huge")
    with pytest.raises(TaskSpecError, match="mig_profile: 1g.18gb asks for MIG devices, but gpus is 0"):
        spec(0, 0, "1g.18gb")
