"""TaskSpec refuses what cannot run, naming the field."""
import pytest

from framework.tasks.constraints import ConstraintError
from framework.tasks.task_spec import DOCKER, MESOS, TaskSpec, TaskSpecError
from common.errors import UserError


def spec(**kw):
    kw.setdefault("id", "app.1")
    kw.setdefault("cmd", "true")
    return TaskSpec(**kw)


@pytest.mark.parametrize("gpus, words", [
    (0.5, "gpus: must be a whole number of GPUs, got 0.5 (fractional"),
    (1.25, "fractional GPUs are not supported"),
    (-1, "gpus: must be 0 or more, got -1"),
    (-2.0, "gpus: must be 0 or more"),
    (True, "gpus: must be a whole number"),
    ("1", "gpus: must be a whole number"),
    (float("nan"), "gpus: must be a whole number"),
])
def test_bad_gpus_are_refused(gpus, words):
    with pytest.raises(TaskSpecError) as caught:
        spec(gpus=gpus)
    assert words in str(caught.value)
    assert isinstance(caught.value, UserError)


def test_whole_float_gpus_become_int():
    assert spec(gpus=2.0).gpus == 2 and isinstance(spec(gpus=2.0).gpus, int)


def test_constraints_are_parsed_and_bad_ones_refused():
    task = spec(constraints=[["gpu_type", "like", "tesla_.*"]])
    assert task.constraints[0].operator == "LIKE"
    with pytest.raises(ConstraintError, match=r"constraints\[0\]: unknown operator 'NEAR'"):
        spec(constraints=[["gpu_type", "NEAR", "x"]])
    with pytest.raises(ConstraintError, match=r"constraints\[1\]: .*not a valid regular"):
        spec(constraints=[["a", "UNIQUE"], ["b", "UNLIKE", "*x"]])


@pytest.mark.parametrize("kw, words", [
    (dict(id=""), "id: '' is not a valid task id"),
    (dict(id="a/b"), "is not a valid task id"),
    (dict(id=".."), "is not a valid task id"),
    (dict(container="RKT"), "container: must be DOCKER or MESOS, got 'RKT'"),
    (dict(container="DOCKER"), "image: a DOCKER container needs an image"),
    (dict(cmd=None), "cmd: a MESOS container without an image needs cmd or args"),
    (dict(args=["echo"]), "give either cmd or args, not both"),
    (dict(cpus=-0.1), "cpus: must be a number 0 or more"),
    (dict(mem="lots"), "mem: must be a number 0 or more"),
    (dict(env={"A": 1}), "env: 'A' must map a string to a string"),
    (dict(labels=["x"]), "labels: must be an object of strings"),
    (dict(args="echo hi", cmd=None), "args: must be a list of strings"),
])
def test_bad_fields_are_named(kw, words):
    with pytest.raises(TaskSpecError) as caught:
        spec(**kw)
    assert words in str(caught.value)


def test_container_type_is_upper_cased_and_image_optional_for_mesos():
    assert spec(container="docker", image="busybox", cmd=None).container == DOCKER
    assert spec(container="mesos", image="busybox", cmd=None).container == MESOS


def test_json_round_trip():
    task = spec(app_id="/train", container="DOCKER", image="cuda:12", cmd=None,
                args=["python", "train.py"], env={"A": "1"}, gpus=2,
                constraints=[["hostname", "UNIQUE"]], labels={"com.nvidia.volumes.needed": "nvidia_driver"})
    again = TaskSpec.from_json(task.to_json())
    assert again == task
    assert task.to_json()["constraints"] == [["hostname", "UNIQUE"]]
