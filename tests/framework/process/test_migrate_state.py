"""`mesos-gpu migrate-state`: a framework's SQLite state moved into a real
ZooKeeper. A framework with an app and its running task is stopped (the task
keeps running), its state moved; an instance started with --zk then leads as
the same framework and finds the same app and the same task, not a new one.
Refused by name, with nothing written: a framework still running on the state
dir, instances running on the ZooKeeper path, a path that holds a state
already, a dir without a state."""
import argparse
import subprocess
import sys

from kazoo.client import KazooClient

from framework.process.framework_process import FrameworkProcess, add_arguments
from tests.bed.framework_process import client_of
from tests.bed.waiting import wait_until
from tests.bed.ha_services import AUTH, CREDENTIALS, running
from tests.bed.cli_errors import one_line_error
from tests.bed.http_client import Client


def migrate(state_dir, zk_url, *extra):
    return subprocess.run([sys.executable, "-m", "mesos_gpu", "migrate-state", "--state_dir",
                           str(state_dir), "--zk", zk_url, *extra],
                          capture_output=True, text=True, timeout=120)


def _error_line(r, *names):
    """Exit 2, no traceback, the last line names what is wrong (logs may come first)."""
    return one_line_error(r, *names, after_log=True, prefix="mesos-gpu migrate-state: error: ",
                          log_levels=("INFO", "WARNING"))


def ha_service(master, zk_url):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return FrameworkProcess(parser.parse_args([
        "--master", master, "--zk", zk_url, "--http_port", "0", "--http_credentials",
        CREDENTIALS, "--refuse_seconds", "1", "--gpu_scheduling_behavior", "unrestricted",
        "--zk_session_timeout", "2000"])).start()


def test_a_sqlite_state_moves_into_zookeeper_with_its_running_task(
        start_framework, cluster, zookeeper, tmp_path):
    state = tmp_path / "state"
    single = start_framework(state, "--gpu_scheduling_behavior", "unrestricted")
    api = client_of(single)
    assert api.post("/v2/apps", {"id": "/moved/app", "cmd": "sleep 600", "cpus": 0.1,
                                 "mem": 16, "labels": {"team": "vision"}}).status == 201
    tasks = wait_until(lambda: [t for t in api.get("/v2/apps/moved/app/tasks").json["tasks"]
                              if t["state"] == "TASK_RUNNING"], 60)
    framework_id = single.scheduler.framework_id
    version = api.get("/v2/apps/moved/app").json["app"]["version"]

    # a framework still running on the state dir: refused
    refused = migrate(state, zookeeper.url("/fw"))
    _error_line(refused, f"--state_dir {state}: a framework (pid ", "runs on it")
    single.stop()

    done = migrate(state, zookeeper.url("/fw"), "--zk_max_node_size", "8192")
    assert done.returncode == 0, done.stderr
    assert f"moved the state of {state} to {zookeeper.url('/fw')}: 1 apps" in done.stdout
    assert f"framework id {framework_id}" in done.stdout and "1 tasks" in done.stdout

    again = migrate(state, zookeeper.url("/fw"))          # a state is there now
    _error_line(again, f"--zk {zookeeper.url('/fw')}: a state is there already (1 apps, 0 "
                f"deployments, 1 tasks, 1 groups, ", f"framework id {framework_id}): not replaced")

    service = ha_service(cluster.address, zookeeper.url("/fw"))
    try:
        wait_until(lambda: service.leadership.is_leader() and service.api is not None, 20)
        assert service.store.framework_id() == framework_id
        wait_until(lambda: service.scheduler.wait_subscribed(0.1), 30)
        ha = Client(service.http.url, dict(AUTH))
        app = ha.get("/v2/apps/moved/app").json["app"]
        assert (app["version"], app["labels"]) == (version, {"team": "vision"})
        moved = wait_until(lambda: running(service, "/moved/app"), 30)
        assert [t["id"] for t in moved] == [t["id"] for t in tasks]
        # instances run on the path now: refused
        busy = migrate(tmp_path / "state", zookeeper.url("/fw"))
        _error_line(busy, "framework instances run there (leader 127.0.0.1:")
        assert ha.delete("/v2/apps/moved/app").status == 200
    finally:
        service.stop()


def test_a_dir_without_a_state_is_refused_and_nothing_written(zookeeper, tmp_path):
    r = migrate(tmp_path / "nothing", zookeeper.url("/fw"))
    _error_line(r, f"--state_dir {tmp_path / 'nothing'}: no framework state there")
    zk = KazooClient(hosts=zookeeper.hosts)
    zk.start()
    try:
        assert zk.exists("/fw") is None
    finally:
        zk.stop()
        zk.close()
