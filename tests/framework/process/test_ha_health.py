"""Health checks with several framework instances on ZooKeeper
(tests/bed/ha_services.py): only the leader checks; the next leader
takes the results over from the state in ZooKeeper and checks on, killing
nothing."""
import time

from tests.bed.waiting import wait_until
from tests.bed.ha_services import api, leader_of

FAST = {"gracePeriodSeconds": 0, "intervalSeconds": 1, "timeoutSeconds": 1,
        "maxConsecutiveFailures": 2, "delaySeconds": 0}
APPS = {
    # checked by the framework: a host task's HTTP server on its host port
    "/ha/http": {"cmd": "exec python3 -m http.server --bind 127.0.0.1 $PORT0",
                 "portDefinitions": [{"port": 0}],
                 "healthChecks": [dict(FAST, protocol="HTTP", path="/")]},
    # checked by the task's executor
    "/ha/command": {"cmd": "exec sleep 600",
                    "healthChecks": [dict(FAST, protocol="COMMAND", command={"value": "true"})]},
}


def healthy_tasks(service, app_id):
    reply = api(service).get(f"/v2/apps{app_id}")
    if reply.status != 200 or reply.json["app"]["tasksHealthy"] != 1:
        return None
    return [t["id"] for t in reply.json["app"]["tasks"]]


def test_the_next_leader_keeps_the_health_and_checks_on(instances):  # noqa: F811
    services = instances(2)
    leader = leader_of(services)
    [other] = [s for s in services if s is not leader]
    for app_id, fields in APPS.items():
        assert api(other).post("/v2/apps", dict(fields, id=app_id, cpus=0.1,
                                                mem=32)).status == 201
    before = {app_id: wait_until(lambda: healthy_tasks(other, app_id), 60) for app_id in APPS}
    assert other.task_health is None and other.readiness is None     # only the leader checks

    assert api(other).delete("/v2/leader").status == 200
    second = leader_of([other], timeout=30)
    # the results the last leader stored count at once, before a new check ran
    for app_id, task_ids in before.items():
        assert wait_until(lambda: healthy_tasks(second, app_id), 10) == task_ids, app_id
    [http_task] = before["/ha/http"]
    taken_over = framework_last_success(second, http_task)
    reported = []           # the executors' results (the reconciliation's answers carry them)
    second.scheduler.on_status(lambda status: "healthy" in status and reported.append(status))
    counted = health_check_counters(second)
    time.sleep(4)                                       # a few intervals of checks
    for app_id, task_ids in before.items():
        assert healthy_tasks(second, app_id) == task_ids, app_id
    assert framework_last_success(second, http_task) > taken_over     # it checks on
    # its /metrics counts each result of its own HTTP check too (1 s apart)
    healthy, unhealthy = (now - then for now, then in zip(health_check_counters(second), counted))
    assert unhealthy == 0 and all(status["healthy"] for status in reported), reported
    print(f"{healthy - len(reported)} results of the framework's check counted, "
          f"{len(reported)} of the executor's")
    assert healthy - len(reported) >= 2, (healthy, reported)
    assert leader.task_health is None                        # the old leader stopped checking


def framework_last_success(service, task_id: str) -> float:
    with service.group_manager.lock:
        [health] = service.task_health.results(service.group_manager.tasks[task_id])
        return health.last_success


def health_check_counters(service):
    counters = api(service).get("/metrics").json["counters"]
    return tuple(counters[f"mesos_gpu.tasks.health_checks.{result}.counter"]["count"]
                 for result in ("healthy", "unhealthy"))
