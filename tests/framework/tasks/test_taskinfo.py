"""TaskInfo shapes (the real master accepts them: see test_gpu_tasks.py) and
the small pure pieces of the scheduler, driver and executor."""
import re

import pytest

from framework.tasks import taskinfo
from framework.executor.main import agent_api_path, container_id_for, kill_grace
from framework.scheduling.mesos_driver import SchedulerDriver, master_address
from framework.scheduling.scheduler import RetryPolicy
from framework.scheduling.task_record import TaskRecord, attempt_task_id
from framework.tasks.task_spec import TaskSpec


def spec(**kw):
    kw.setdefault("id", "train.1")
    kw.setdefault("cmd", "python train.py")
    return TaskSpec(**kw)


def test_gpu_task_resources_executor_and_data():
    settings = taskinfo.ExecutorSettings(command="/opt/bin/mesos-gpu executor",
                                         agent_socket="/run/gpu.sock", docker_host="unix:///d.sock")
    task = spec(gpus=2, cpus=1.5, mem=512, labels={"team": "ml"})
    info = taskinfo.build(task, "agent-1", "fw-1", settings, "train.1.retry1")
    assert info["task_id"] == {"value": "train.1.retry1"} and info["name"] == "train.1"
    assert {r["name"]: r["scalar"]["value"] for r in info["resources"]} == \
        {"cpus": 1.5, "mem": 512, "gpus": 2}
    executor = info["executor"]
    assert executor["executor_id"] == {"value": "mesos-gpu.train.1.retry1"}
    assert executor["command"]["value"] == "/opt/bin/mesos-gpu executor"
    env = {v["name"]: v["value"] for v in executor["command"]["environment"]["variables"]}
    assert env["MESOS_GPU_AGENT_SOCKET"] == "/run/gpu.sock"
    assert env["DOCKER_HOST"] == "unix:///d.sock"
    assert "command" not in info                     # the executor runs it
    assert taskinfo.decode_spec(info["data"]) == task
    assert info["labels"] == {"labels": [{"key": "team", "value": "ml"}]}


@pytest.mark.parametrize("kw, container", [
    (dict(container="DOCKER", image="cuda:12", cmd=None),
     {"type": "DOCKER", "docker": {"image": "cuda:12", "network": "HOST"}}),
    (dict(container="MESOS", image="cuda:12"),
     {"type": "MESOS", "mesos": {"image": {"type": "DOCKER", "docker": {"name": "cuda:12"}}}}),
    (dict(container="MESOS"), {"type": "MESOS"}),
])
def test_container_info_for_both_containerizers(kw, container):
    assert taskinfo.build(spec(**kw), "a", "f", taskinfo.ExecutorSettings())["container"] == container


def test_zero_amounts_are_left_out_and_socket_may_come_from_the_agent():
    info = taskinfo.build(spec(cpus=0.5, mem=0), "a", "f",
                          taskinfo.ExecutorSettings(agent_socket=None))
    assert [r["name"] for r in info["resources"]] == ["cpus"]
    names = [v["name"] for v in info["executor"]["command"]["environment"]["variables"]]
    assert "MESOS_GPU_AGENT_SOCKET" not in names


def test_default_executor_command_runs_this_python():
    import sys
    assert taskinfo.default_executor_command().startswith(sys.executable)
    assert taskinfo.default_executor_command().endswith("-m mesos_gpu executor")


def test_retry_back_off_and_attempt_ids():
    policy = RetryPolicy(backoff_seconds=1, factor=2, max_backoff_seconds=5)
    assert [policy.delay(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 4, 5, 5]
    assert [attempt_task_id("t", n) for n in (1, 2, 3)] == ["t", "t.retry1", "t.retry2"]


def test_task_record_round_trips_through_json():
    record = TaskRecord(spec=spec(gpus=1, constraints=[["hostname", "UNIQUE"]]),
                        state="TASK_RUNNING", mesos_task_id="train.1", agent_id="S0",
                        hostname="h", agent_fields={"hostname": "h"}, gpus=["GPU-1"], attempts=1)
    again = TaskRecord.from_json(record.to_json())
    assert again == record and again.launched and not again.terminal


def test_master_address_forms():
    assert master_address("10.0.0.1") == "10.0.0.1:5050"
    assert master_address("http://10.0.0.1:5051/") == "10.0.0.1:5051"
    assert master_address("zk://z1:2181/mesos") == "zk://z1:2181/mesos"


def test_driver_keeps_capabilities_exactly_as_asked():
    # pymesos added GPU_RESOURCES for a 1.x master; ours does not.
    without = SchedulerDriver(None, {"name": "x", "user": "u", "capabilities": []}, "h:1")
    without.version = "1.11.0"
    assert "capabilities" not in without.framework
    with_gpus = SchedulerDriver(None, {"name": "x", "user": "u",
                                       "capabilities": [{"type": "GPU_RESOURCES"}]}, "h:1")
    assert with_gpus.framework["capabilities"] == [{"type": "GPU_RESOURCES"}]


def test_executor_api_path_from_the_agent_pid():
    assert agent_api_path({"MESOS_SLAVE_PID": "slave(1)@127.0.0.1:5051"}) == \
        "/slave(1)/api/v1/executor"
    assert agent_api_path({}) == "/api/v1/executor"
    assert agent_api_path({"MESOS_SLAVE_PID": "slave(1)@h:1",
                           "MESOS_EXECUTOR_API_PATH": "/x"}) == "/x"


def test_container_ids_are_valid_for_the_daemon_and_unique_per_launch():
    a = container_id_for("app/with spaces:1" * 10, "fw", "exec-1")
    b = container_id_for("app/with spaces:1" * 10, "fw", "exec-2")
    assert a != b and len(a) <= 128 and re.fullmatch(r"[A-Za-z0-9_.-]+", a)


def test_kill_grace_from_the_kill_policy():
    assert kill_grace({"kill_policy": {"grace_period": {"nanoseconds": 5_000_000_000}}}) == 5
    assert kill_grace({}) == 3
