"""Metronome's /v1 API end to end on a real Mesos 1.11 master and two agents, our
executor and the whole `mesos-gpu framework` service: a job runs once to completion,
a failing one by its restart policy, a 2-instance gang starts whole with its
rendezvous and its ranks meet over it, a failed rank ends the whole gang, a run is
stopped, runs survive a framework restart, and bad specs are refused naming the
field with nothing stored."""
import sys


import pytest

from framework.process.framework_process import FrameworkProcess
from localcluster.mesos import Agent, Master
from tests.bed.waiting import wait_until
from tests.bed.framework_process import client_of, framework_args

AGENT = "cpus:2;mem:2048;disk:1024;ports:[31000-31100]"


@pytest.fixture(scope="module")
def master(mesos_prefix):
    with Master() as m, Agent(m, AGENT, "rack:r1"), Agent(m, AGENT, "rack:r2"):
        m.wait_agents(2)
        yield m


@pytest.fixture
def start(master, tmp_path):
    started = []

    def go(state="state"):
        service = FrameworkProcess(framework_args(master.address, tmp_path / state,
                                                  "--refuse_seconds", "1")).start()
        started.append(service)
        assert service.scheduler.wait_subscribed(30)
        return service
    yield go
    for service in started:
        if not service.http.closing.is_set():
            service.stop()


def job(job_id, cmd, **run):
    body = {"id": job_id, "run": {"cmd": cmd, "cpus": 0.1, "mem": 32, "disk": 0, **run}}
    return body


def finished(api, job_id, run_id):
    reply = api.get(f"/v1/jobs/{job_id}/runs/{run_id}")
    assert reply.status == 200, reply.json
    return reply.json if reply.json["status"] in ("SUCCESS", "FAILED") else None


def test_bad_specs_are_refused_naming_the_field_and_nothing_is_stored(start):
    api = client_of(start())
    bad = api.post("/v1/jobs", {"id": "Bad_Id", "run": {"cmd": "true", "cpus": -1, "mem": 32,
                                                        "disk": 0, "gpu": 1}})
    assert bad.status == 422 and bad.json["message"] == "Object is not valid"
    paths = {d["path"] for d in bad.json["details"]}
    assert {"/id", "/run/cpus", "/run/gpu"} <= paths
    assert api.get("/v1/jobs").json == []
    assert api.post("/v1/jobs", job("a.b", "true")).status == 201
    taken = api.post("/v1/jobs", job("a.b", "true"))
    assert taken.status == 409 and taken.json["message"] == "Job with this id already exists"
    assert api.get("/v1/jobs/nope").status == 404
    assert api.get("/v1/jobs/a.b/runs/nope").json["message"] == "Job Run not found"
    changed = api.put("/v1/jobs/a.b", job("a.b", "false", cpus=0.2))
    assert changed.status == 200 and changed.json["run"]["cmd"] == "false"
    assert api.put("/v1/jobs/a.b", job("a.c", "true")).status == 422      # id of the path
    assert api.get("/v1/jobs/a.b").json["run"]["cpus"] == 0.2
    assert api.delete("/v1/jobs/a.b").status == 200
    assert api.get("/v1/jobs/a.b").status == 404
    anonymous = client_of(start("other"), anonymous=True)
    assert anonymous.get("/v1/jobs").status == 401       # the same authentication as /v2


def test_runs_to_completion_restart_policy_and_history(start):
    api = client_of(start())
    assert api.post("/v1/jobs", job("ok", "true")).status == 201
    run = api.post("/v1/jobs/ok/runs", None).json
    assert run["status"] == "STARTING" and run["jobId"] == "ok"
    done = wait_until(lambda: finished(api, "ok", run["id"]), timeout=90)
    assert done["status"] == "SUCCESS" and done["tasks"][0]["status"] == "TASK_FINISHED"
    summary = api.get("/v1/jobs/ok?embed=historySummary").json["historySummary"]
    assert summary["successCount"] == 1 and summary["failureCount"] == 0
    assert api.get("/v1/jobs/ok/runs").json == []                  # active runs only

    api.post("/v1/jobs", job("flaky", "exit 3",
                             restart={"policy": "ON_FAILURE", "activeDeadlineSeconds": 20}))
    run = api.post("/v1/jobs/flaky/runs", None).json
    done = wait_until(lambda: finished(api, "flaky", run["id"]), timeout=120)
    assert done["status"] == "FAILED" and done["attempt"] >= 2, done
    assert "activeDeadlineSeconds (20 s) passed" in done["reason"]
    history = api.get("/v1/jobs/flaky?embed=history").json["history"]
    assert history["failureCount"] == 1
    assert len(history["failedFinishedRuns"][0]["tasks"]) == done["attempt"]

    api.post("/v1/jobs", job("once", "exit 3"))                    # NEVER: one attempt
    run = api.post("/v1/jobs/once/runs", None).json
    done = wait_until(lambda: finished(api, "once", run["id"]), timeout=90)
    assert done["status"] == "FAILED" and done["attempt"] == 1


RENDEZVOUS = (
    f"{sys.executable} -c \"import os, socket, time\n"
    "env = {k: os.environ[k] for k in ('MASTER_ADDR', 'MASTER_PORT', 'WORLD_SIZE', 'RANK',"
    " 'PET_NNODES', 'PET_NODE_RANK', 'PET_NPROC_PER_NODE', 'PET_MASTER_ADDR',"
    " 'PET_MASTER_PORT')}\n"
    "open(os.environ['OUT'] + '/rank' + env['RANK'], 'w').write(repr(env))\n"
    "if env['RANK'] == '0':\n"
    "    s = socket.create_server(('', int(env['MASTER_PORT'])))\n"
    "    c, _ = s.accept(); open(os.environ['OUT'] + '/met', 'w').write(c.recv(64).decode())\n"
    "else:\n"
    "    for _ in range(100):\n"
    "        try:\n"
    "            socket.create_connection((env['MASTER_ADDR'], int(env['MASTER_PORT']))).sendall("
    "b'rank ' + env['RANK'].encode()); break\n"
    "        except OSError: time.sleep(0.2)\n"
    "\"")


def test_a_gang_starts_whole_and_its_ranks_meet_through_their_rendezvous(start, tmp_path):
    api = client_of(start())
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)
    assert api.post("/v1/jobs", job("train.gang", RENDEZVOUS, instances=2, cpus=0.5,
                                    env={"OUT": str(out)})).status == 201
    run = api.post("/v1/jobs/train.gang/runs", None).json
    assert len(run["tasks"]) == 2
    done = wait_until(lambda: finished(api, "train.gang", run["id"]), timeout=90)
    assert done["status"] == "SUCCESS", done
    envs = [eval((out / f"rank{r}").read_text()) for r in (0, 1)]
    assert [e["RANK"] for e in envs] == ["0", "1"]
    assert {e["WORLD_SIZE"] for e in envs} == {"2"} == {e["PET_NNODES"] for e in envs}
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs}) == 1
    assert envs[0]["PET_MASTER_PORT"] == envs[0]["MASTER_PORT"]
    assert envs[1]["PET_NPROC_PER_NODE"] == "1"
    assert (out / "met").read_text() == "rank 1"


def test_a_failed_rank_ends_the_whole_gang(start):
    api = client_of(start())
    cmd = 'if [ "$RANK" = 1 ]; then exit 1; fi; sleep 600'
    api.post("/v1/jobs", job("gang.fail", cmd, instances=2))
    run = api.post("/v1/jobs/gang.fail/runs", None).json
    done = wait_until(lambda: finished(api, "gang.fail", run["id"]), timeout=90)
    assert done["status"] == "FAILED"
    states = sorted(t["status"] for t in done["tasks"])
    assert states == ["TASK_FAILED", "TASK_KILLED"], done       # rank 0 killed with it


def test_a_run_is_stopped_and_runs_survive_a_framework_restart(start):
    service = start()
    api = client_of(service)
    api.post("/v1/jobs", job("long", "sleep 600"))
    api.post("/v1/jobs", job("later", "sleep 3"))
    stopped = api.post("/v1/jobs/long/runs", None).json
    wait_until(lambda: api.get(f"/v1/jobs/long/runs/{stopped['id']}").json["status"] == "ACTIVE",
               timeout=60)
    survivor = api.post("/v1/jobs/later/runs", None).json
    service.stop()                                 # failover: tasks keep running
    api = client_of(start())
    assert [r["id"] for r in api.get("/v1/jobs/long/runs").json] == [stopped["id"]]
    assert api.post(f"/v1/jobs/long/runs/{stopped['id']}/actions/stop", None).status == 200
    done = wait_until(lambda: finished(api, "long", stopped["id"]), timeout=60)
    assert done["status"] == "FAILED" and done["tasks"][0]["status"] == "TASK_KILLED"
    done = wait_until(lambda: finished(api, "later", survivor["id"]), timeout=60)
    assert done["status"] == "SUCCESS"
    assert api.post("/v1/jobs/long/runs/nope/actions/stop", None).status == 404


def test_the_dcos_metronome_client_creates_lists_runs_and_stops_jobs(start):
    import metronome                               # in the test extras of setup.py
    from metronome.models import JobSpec
    service = start()
    user, password = service.auth.credentials.split(":", 1)
    client = metronome.MetronomeClient(service.http.url, username=user, password=password)
    spec = JobSpec()
    spec.id = "client.job"
    spec.run.cmd = "sleep 600"
    spec.run.cpus, spec.run.mem = 0.1, 32
    spec.run.disk.value = 0
    created = client.create_job(spec)
    assert created.id == "client.job" and created.run.cmd == "sleep 600"
    assert [j.id for j in client.list_jobs()] == ["client.job"]
    run = client.run_job("client.job")
    assert run.jobId == "client.job"
    assert [r.id for r in client.list_runs("client.job")] == [run.id]
    assert client.stop_run("client.job", run.id).status_code == 200
    wait_until(lambda: client.get_run("client.job", run.id).status == 4, timeout=60)  # FAILED
    assert client.delete_job("client.job").status_code == 200
    assert client.ping().strip().strip('"') == "pong"



def test_schedules_through_the_api_and_run_figures_in_metrics(start):
    api = client_of(start())
    body = job("nightly", "true")
    body["schedules"] = [{"id": "night", "cron": "0 2 * * *", "timezone": "Europe/Paris"}]
    created = api.post("/v1/jobs", body)
    assert created.status == 201 and created.json["schedules"][0]["id"] == "night"
    listed = api.get("/v1/jobs/nightly/schedules").json
    assert listed[0]["nextRunAt"].endswith(".000+0000") and listed[0]["enabled"] is True
    assert "schedules" not in api.get("/v1/jobs/nightly").json     # only when embedded
    assert api.get("/v1/jobs/nightly?embed=schedules").json["schedules"][0]["cron"] == \
        "0 2 * * *"
    other = {"id": "hourly", "cron": "0 * * * *", "concurrencyPolicy": "FORBID"}
    assert api.post("/v1/jobs/nightly/schedules", other).status == 201
    assert api.post("/v1/jobs/nightly/schedules", other).status == 409
    bad = api.post("/v1/jobs/nightly/schedules", {"id": "x", "cron": "* * *"})
    assert bad.status == 422 and bad.json["details"][0]["path"] == "/cron"
    changed = api.put("/v1/jobs/nightly/schedules/hourly", {**other, "enabled": False})
    assert changed.status == 200 and changed.json["enabled"] is False
    assert api.delete("/v1/jobs/nightly/schedules/hourly").status == 200
    assert api.get("/v1/jobs/nightly/schedules/hourly").status == 404
    assert [s["id"] for s in api.get("/v1/jobs/nightly/schedules").json] == ["night"]

    api.post("/v1/jobs", job("pair", "true", instances=2))
    run = api.post("/v1/jobs/pair/runs", None).json
    wait_until(lambda: finished(api, "pair", run["id"]), timeout=90)
    figures = api.get("/v1/metrics").json
    assert figures["gauges"]["metronome.runs.success.gauge"]["value"] == 1
    assert figures["gauges"]["metronome.jobs.gauge"]["value"] == 2
    assert figures["timers"]["metronome.runs.gang-wait.timer.seconds"]["count"] == 1
    info = api.get("/v1/info").json
    assert info["config"]["gang_hold_seconds"] == 10.0 and info["version"]


# Every method + path of Metronome's published API (api/src/main/resources/public/api
# of dcos/metronome: api.raml and what it includes), in an order that keeps what
# later calls need; {run} is filled in as the run goes.
RAML = [
    ("GET", "/ping", None), ("GET", "/info", None), ("GET", "/leader", None),
    ("POST", "/v1/jobs", job("cov", "sleep 60")), ("GET", "/v1/jobs", None),
    ("GET", "/v1/jobs/cov", None), ("PUT", "/v1/jobs/cov", job("cov", "sleep 61")),
    ("POST", "/v1/jobs/cov/schedules", {"id": "s", "cron": "0 0 1 1 *"}),
    ("GET", "/v1/jobs/cov/schedules", None), ("GET", "/v1/jobs/cov/schedules/s", None),
    ("PUT", "/v1/jobs/cov/schedules/s", {"id": "s", "cron": "0 0 2 1 *"}),
    ("DELETE", "/v1/jobs/cov/schedules/s", None),
    ("POST", "/v1/jobs/cov/runs", None), ("GET", "/v1/jobs/cov/runs", None),
    ("GET", "/v1/jobs/cov/runs/{run}", None), ("GET", "/v1/queue", None),
    ("GET", "/v1/metrics", None), ("POST", "/v1/jobs/cov/runs/{run}/actions/stop", None),
    ("DELETE", "/v1/jobs/cov?stopCurrentJobRuns=true", None),
    ("POST", "/v0/scheduled-jobs", {**job("v0", "true"),
                                    "schedules": [{"id": "n", "cron": "0 3 * * *"}]}),
    ("PUT", "/v0/scheduled-jobs/v0", {**job("v0", "true"),
                                      "schedules": [{"id": "m", "cron": "0 4 * * *"}]}),
]


def test_every_path_of_metronome_s_raml_answers(start):
    service = start()
    api = client_of(service)
    run_id = None
    for method, path, body in RAML:
        path = path.replace("{run}", run_id or "")
        reply = getattr(api, method.lower())(path, body) if method in ("POST", "PUT") \
            else getattr(api, method.lower())(path)
        assert reply.status < 300, (method, path, reply.status, reply.json)
        if path == "/v1/jobs/cov/runs" and method == "POST":
            run_id = reply.json["id"]
    assert [s["id"] for s in api.get("/v1/jobs/v0/schedules").json] == ["m"]
    # the deleted job's stopped run leaves nothing in the store once it has ended
    wait_until(lambda: not [k for k in service.store.items("job_run") if k.startswith("cov/")],
               timeout=60)
    assert "cov" not in service.store.items("job_history")


def test_a_run_not_started_within_max_launch_delay_fails_saying_why(start):
    api = client_of(start())
    body = job("nowhere", "true", maxLaunchDelay=2,
               placement={"constraints": [{"attribute": "rack", "operator": "IS",
                                           "value": "r9"}]})
    api.post("/v1/jobs", body)
    run = api.post("/v1/jobs/nowhere/runs", None).json
    waiting = wait_until(lambda: api.get("/v1/queue").json, timeout=30)
    assert waiting[0]["runs"][0]["runId"] == run["id"]
    done = wait_until(lambda: finished(api, "nowhere", run["id"]), timeout=60)
    assert done["status"] == "FAILED" and done["tasks"][0]["status"] == "TASK_KILLED"
    assert done["reason"].startswith("not started within maxLaunchDelay (2 s): waiting: no "
                                     "offered agent (2 offered) qualifies for rack:IS:r9"), done
