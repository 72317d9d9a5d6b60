"""Jobs with several framework instances on a real ZooKeeper and a real Mesos cluster:
any instance answers /v1 (the others forward to the leader), and when the leader
gives leadership up the next one serves the same jobs, the same active run with the
same task (its state came from ZooKeeper), and stops it."""
from tests.bed.waiting import wait_until
from tests.bed.ha_services import api, leader_of


def test_runs_survive_a_leader_change(instances):
    services = instances(2)
    first = leader_of(services)
    other = next(s for s in services if s is not first)
    assert api(other).post("/v1/jobs", {"id": "long", "run": {
        "cmd": "sleep 600", "cpus": 0.1, "mem": 32, "disk": 0}}).status == 201  # forwarded
    run = api(other).post("/v1/jobs/long/runs", None).json
    active = wait_until(lambda: (r := api(first).get(f"/v1/jobs/long/runs/{run['id']}").json)
                        ["tasks"][0]["status"] == "TASK_RUNNING" and r, timeout=60)
    task = active["tasks"][0]["id"]
    assert api(first).delete("/v2/leader").status == 200
    second = wait_until(lambda: next((s for s in services if s is not first
                                      and s.leadership.is_leader() and s.api is not None),
                                     None), timeout=30)
    kept = api(second).get(f"/v1/jobs/long/runs/{run['id']}").json
    assert kept["status"] == "ACTIVE" and kept["tasks"][0]["id"] == task
    assert kept["tasks"][0]["status"] == "TASK_RUNNING"     # the same task, not a new one
    assert api(first).post(f"/v1/jobs/long/runs/{run['id']}/actions/stop", None).status == 200
    done = wait_until(lambda: (r := api(second).get(f"/v1/jobs/long/runs/{run['id']}").json)
                      ["status"] == "FAILED" and r, timeout=60)
    assert done["tasks"][0]["status"] == "TASK_KILLED"
    assert api(second).get("/v1/jobs/long?embed=historySummary").json[
        "historySummary"]["failureCount"] == 1
