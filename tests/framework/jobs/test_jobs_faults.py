"""Faults of jobs and gangs on real Mesos 1.11 (a master that declares a silent agent
gone within seconds, agents of 2 cpus): the framework SIGKILLed while a gang is being
placed (the offers it held go back to Mesos, no member of the gang ever ran, and the
restarted framework starts the gang whole), a run stopped while its gang waits (its
offers released), and an agent SIGKILLed under a running gang (the whole gang ends
and the restart policy starts it again, whole, once the agent is back)."""
import base64
import re
import signal
import subprocess
import sys
import threading

import pytest

from framework.process.framework_process import FrameworkProcess
from localcluster.mesos import Agent, Master
from tests.bed.waiting import wait_until
from tests.bed.framework_process import client_of, framework_args
from tests.bed.http_client import Client

AGENT = "cpus:2;mem:2048;disk:1024;ports:[31000-31100]"
FAST_PINGS = {"MESOS_AGENT_PING_TIMEOUT": "1secs", "MESOS_MAX_AGENT_PING_TIMEOUTS": "2"}


def gang(job_id, instances, cmd="sleep 600", **run):
    return {"id": job_id, "run": {"cmd": cmd, "cpus": 1.5, "mem": 32, "disk": 0,
                                  "instances": instances, **run}}


def framework_state(master):
    """(offered cpus, tasks) of our framework at the master (active or not)."""
    state = master.state()
    frameworks = state.get("frameworks", []) + state.get("completed_frameworks", [])
    ours = [f for f in frameworks if f.get("name") == "marathon-gpu" and f.get("active", True)]
    offered = sum(f.get("offered_resources", {}).get("cpus", 0) for f in ours)
    tasks = [t for f in frameworks if f.get("name") == "marathon-gpu" for t in f["tasks"]]
    return offered, tasks


def start_process(master, state):
    proc = subprocess.Popen([sys.executable, "-m", "mesos_gpu", "framework", "--master", master,
                             "--http_port", "0", "--state_dir", str(state),
                             "--refuse_seconds", "1"], stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        found = re.search(r"Marathon API on (http://\S+)", line)
        if found:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            credentials = (state / "http_credentials").read_text().strip()
            auth = "Basic " + base64.b64encode(credentials.encode()).decode()
            return proc, Client(found.group(1), {"Authorization": auth})
    raise AssertionError(f"the framework did not start: exit {proc.wait()}")


def run_of(api, job_id, run_id):
    return api.get(f"/v1/jobs/{job_id}/runs/{run_id}").json


def test_framework_sigkilled_while_placing_a_gang(mesos_prefix, tmp_path):
    with Master(env=FAST_PINGS) as master, Agent(master, AGENT), Agent(master, AGENT):
        master.wait_agents(2)
        state = tmp_path / "state"
        proc, api = start_process(master.address, state)
        try:
            assert api.post("/v1/jobs", gang("three", 3)).status == 201
            run = api.post("/v1/jobs/three/runs", None).json
            # 2 of 3 members fit: the offers of both agents are held for the gang
            wait_until(lambda: framework_state(master)[0] >= 4, timeout=30,
                       what="the gang's offers held")
            reason = wait_until(lambda: (r := run_of(api, "three", run["id"])["reason"])
                                .startswith("waiting: gang of 3") and r, timeout=30)
            assert "gang of 3 (1.5 cpus, 32 MB each): the offers place 2 of 3" in reason
            queue = api.get("/v1/queue").json
            assert queue == [{"jobId": "three", "runs": [{"runId": run["id"],
                                                          "reason": reason}]}]
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        # Mesos takes the offers of the gone scheduler back; nothing of the gang ran
        wait_until(lambda: framework_state(master)[0] == 0, timeout=30,
                   what="the held offers back at the master")
        assert framework_state(master)[1] == []
        with Agent(master, AGENT):
            master.wait_agents(3)
            proc, api = start_process(master.address, state)
            try:
                active = wait_until(lambda: (r := run_of(api, "three", run["id"]))["status"]
                                    == "ACTIVE" and r, timeout=60)
                assert active["attempt"] == 1
                wait_until(lambda: sum(t["state"] == "TASK_RUNNING"
                                       for t in framework_state(master)[1]) == 3, timeout=60)
                assert len({t["slave_id"] for t in framework_state(master)[1]}) == 3
                assert api.post(f"/v1/jobs/three/runs/{run['id']}/actions/stop",
                                None).status == 200
                wait_until(lambda: run_of(api, "three", run["id"])["status"] == "FAILED",
                           timeout=60)
            finally:
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=30) == 0


@pytest.fixture
def framework(tmp_path):
    started = []

    def go(master):
        service = FrameworkProcess(framework_args(master.address, tmp_path / "state",
                                                  "--refuse_seconds", "1")).start()
        started.append(service)
        assert service.scheduler.wait_subscribed(30)
        return service
    yield go
    for service in started:
        service.stop()


def test_a_run_stopped_while_its_gang_waits_releases_the_offers(mesos_prefix, framework):
    with Master() as master, Agent(master, AGENT), Agent(master, AGENT):
        master.wait_agents(2)
        service = framework(master)
        api = client_of(service)
        api.post("/v1/jobs", gang("waits", 3))
        run = api.post("/v1/jobs/waits/runs", None).json
        wait_until(lambda: service.scheduler.held_offers(), timeout=30)
        assert api.post(f"/v1/jobs/waits/runs/{run['id']}/actions/stop", None).status == 200
        done = wait_until(lambda: (r := run_of(api, "waits", run["id"]))["status"] == "FAILED"
                          and r, timeout=30)
        assert done["reason"] == "stopped by request"
        assert {t["status"] for t in done["tasks"]} == {"TASK_KILLED"}
        wait_until(lambda: not service.scheduler.held_offers(), timeout=30)
        wait_until(lambda: framework_state(master)[0] == 0, timeout=30)
        assert framework_state(master)[1] == []          # no member ever launched


def test_an_agent_sigkilled_under_a_running_gang_ends_it_whole_and_it_restarts(
        mesos_prefix, framework):
    with Master(env=FAST_PINGS) as master, Agent(master, AGENT) as first, \
            Agent(master, AGENT) as second:
        master.wait_agents(2)
        service = framework(master)
        api = client_of(service)
        api.post("/v1/jobs", gang("pair", 2, restart={"policy": "ON_FAILURE"}))
        run = api.post("/v1/jobs/pair/runs", None).json
        wait_until(lambda: run_of(api, "pair", run["id"])["status"] == "ACTIVE", timeout=60)
        wait_until(lambda: sum(t["state"] == "TASK_RUNNING"
                               for t in framework_state(master)[1]) == 2, timeout=60)
        second.crash()
        # the master declares it gone; the member there is lost, the other one killed
        restarting = wait_until(lambda: (r := run_of(api, "pair", run["id"]))["attempt"] == 2
                                and r, timeout=60)
        assert restarting["status"] == "STARTING"
        assert "attempt 1 ended (task pair_" in restarting["reason"]
        survivor = [t for t in framework_state(master)[1] if t["slave_id"] == first.id]
        wait_until(lambda: all(t["state"] != "TASK_RUNNING" for t in framework_state(master)[1]
                               if t["slave_id"] == first.id), timeout=30,
                   what=f"the other rank killed: {survivor}")
        second.restart()
        master.wait_agents(2)
        active = wait_until(lambda: (r := run_of(api, "pair", run["id"]))["status"] == "ACTIVE"
                            and r, timeout=90)
        assert active["attempt"] == 2 and len(active["tasks"]) == 2
        assert {t["status"] for t in active["tasks"]} <= {"TASK_STAGING", "TASK_STARTING",
                                                          "TASK_RUNNING"}
        api.post(f"/v1/jobs/pair/runs/{run['id']}/actions/stop", None)
        wait_until(lambda: run_of(api, "pair", run["id"])["status"] == "FAILED", timeout=60)


def test_a_schedule_due_while_the_framework_is_down(mesos_prefix, tmp_path):
    """Every minute, the framework SIGKILLed before the minute turns and started again
    after it: the schedule whose startingDeadlineSeconds still allows it starts its run
    at once; the one whose deadline (1 s) passed while it was down starts none."""
    import time as clock
    from datetime import datetime
    with Master() as master, Agent(master, AGENT):
        master.wait_agents(1)
        state = tmp_path / "state"
        proc, api = start_process(master.address, state)
        try:
            for name, deadline in (("late-ok", 300), ("late-no", 1)):
                body = gang(name, 1, "true", cpus=0.1)
                body["schedules"] = [{"id": "minutely", "cron": "* * * * *",
                                      "startingDeadlineSeconds": deadline}]
                assert api.post("/v1/jobs", body).status == 201
            seconds = clock.time() % 60
            if seconds > 50:                 # not so close to the minute that it falls due
                clock.sleep(61 - seconds)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            killed_at = clock.time()
        finally:
            if proc.poll() is None:
                proc.kill()
        clock.sleep(60 - clock.time() % 60 + 3)          # down when it falls due, and 3 s on
        next_due = clock.time() - clock.time() % 60 + 60  # the first one it is up for
        proc, api = start_process(master.address, state)
        try:
            def created(job_id):
                """When each of the job's runs (active or finished) was created."""
                job = api.get(f"/v1/jobs/{job_id}?embed=history&embed=activeRuns").json
                runs = job["activeRuns"] + job["history"]["successfulFinishedRuns"] + \
                    job["history"]["failedFinishedRuns"]
                return [datetime.strptime(r["createdAt"], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
                        for r in runs]
            # a run for the due time missed while it was down, or none, as the deadline says
            wait_until(lambda: [t for t in created("late-ok") if killed_at < t < next_due],
                       timeout=60)
            assert [t for t in created("late-no") if killed_at < t < next_due] == []
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0


def test_framework_sigkilled_between_the_accepts_of_a_gang(mesos_prefix, tmp_path):
    """The framework dies after one ACCEPT of a gang over two nodes went out and before
    the other: the rank launched is ended when the framework is back (the other one's
    launch is lost), and the gang starts again whole, whatever its policy (NEVER)."""
    import os
    with Master() as master, Agent(master, AGENT), Agent(master, AGENT):
        master.wait_agents(2)
        state = tmp_path / "state"
        os.environ["MESOS_GPU_CRASH_AT"] = "framework:between_accepts"
        try:
            proc, api = start_process(master.address, state)
        finally:
            del os.environ["MESOS_GPU_CRASH_AT"]
        try:
            api.post("/v1/jobs", gang("split", 2))                # 1.5 cpus: one per node
            run = api.post("/v1/jobs/split/runs", None).json
            assert proc.wait(timeout=60) == -signal.SIGKILL       # at the crash point
        finally:
            if proc.poll() is None:
                proc.kill()
        launched = wait_until(lambda: framework_state(master)[1], timeout=30)
        assert len(launched) == 1                                 # a partial gang, for now
        proc, api = start_process(master.address, state)
        try:
            active = wait_until(lambda: (r := run_of(api, "split", run["id"]))["status"]
                                == "ACTIVE" and r["attempt"] == 2 and r, timeout=90,
                                what=lambda: f"attempt 2 active: {run_of(api, 'split', run['id'])}")
            # the master's live tasks: attempt 2's two ranks, attempt 1's rank gone
            wait_until(lambda: sorted((t["id"].rsplit(".", 2)[1], t["state"])
                                      for t in framework_state(master)[1]) ==
                       [("2", "TASK_RUNNING"), ("2", "TASK_RUNNING")], timeout=60,
                       what=lambda: f"attempt 2 running alone: {framework_state(master)[1]}")
            first = [t for t in active["ranks"] if t["rank"] == 0]
            assert first and first[0]["id"].endswith(".2.0")
            api.post(f"/v1/jobs/split/runs/{run['id']}/actions/stop", None)
            wait_until(lambda: run_of(api, "split", run["id"])["status"] == "FAILED", timeout=60)
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
