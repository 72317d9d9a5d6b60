"""Several `mesos-gpu framework --zk` instances in this process (FrameworkProcess
objects) on one ZooKeeper path: their flags (`ha_args`), a client of one (`api`),
the leader among them (`leader_of`); the `instances` fixture that starts them is in
tests/framework/conftest.py. tests/bed/framework_instances.py runs them as
processes instead."""
import argparse
import base64

from framework.process.framework_process import add_arguments
from tests.bed.http_client import Client
from tests.bed.waiting import wait_until

CREDENTIALS = "ops:s3cret"
AUTH = {"Authorization": "Basic " + base64.b64encode(CREDENTIALS.encode()).decode()}
SESSION_MS = 2000


def ha_args(master: str, zk_url: str, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["--master", master, "--zk", zk_url, "--http_port", "0",
                              "--http_credentials", CREDENTIALS, "--refuse_seconds", "1",
                              "--zk_session_timeout", str(SESSION_MS),
                              "--gpu_scheduling_behavior", "unrestricted", *extra])


def api(service) -> Client:
    return Client(service.http.url, dict(AUTH))


def leader_of(services, timeout=20.0):
    return wait_until(lambda: next((s for s in services if s.leadership.is_leader()
                                  and s.api is not None), None), timeout, interval=0.05)


def running(service, app_id):
    reply = api(service).get(f"/v2/apps{app_id}/tasks")
    tasks = reply.json["tasks"] if reply.status == 200 else []
    return tasks if tasks and all(t["state"] == "TASK_RUNNING" for t in tasks) else None
