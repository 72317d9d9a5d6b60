"""launch.py's progress reporting, against a standard-library HTTP server that
replays a fixed sequence of Marathon task states (tasks staged, running with
their GPUs, finished, failed and relaunched).

The real run is test_launch_e2e.py (the real framework, Mesos, Docker and runc);
this one covers what is hard to produce there on demand: a failed run followed
by a relaunch, a timeout, the line-per-change output. The replayed states use
the field names the real API serves (tasksStaged/tasksRunning, lastTaskFailure,
gpuUuids with ?gpus=true).
"""
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, Iterator, List

import pytest

from tests.bed.glyphnet import COGNITIVE

LAUNCH = COGNITIVE / "launch.py"
INFERENCE, TRAINING = "/cognitive/docker/inference", "/cognitive/docker/training"
GPU_A = "GPU-6f1e0a52-1b1c-4b2a-9d54-6c1f00000000"


def task(task_id: str, app_id: str, state: str, gpus: List[str] = (), health=None) -> dict:
    """`health`: None (no check result yet), or (alive, consecutive failures, cause)."""
    out = {"id": task_id, "appId": app_id, "host": "gpu-node-1", "slaveId": "S0", "state": state,
           "gpuUuids": list(gpus), "healthCheckResults": []}
    if health is not None:
        alive, failures, cause = health
        out["healthCheckResults"] = [{"alive": alive, "consecutiveFailures": failures,
                                      "instanceId": task_id, "lastFailureCause": cause}]
    return out


HEALTHY = (True, 0, None)


def step(tasks=(), failure=None) -> dict:
    return {"tasks": list(tasks), "failure": failure}


class ReplayedMarathon(ThreadingHTTPServer):
    """Each app's GET .../tasks moves it one step along its script (the last step repeats)."""
    daemon_threads = True

    def __init__(self, scripts: Dict[str, List[dict]]):
        super().__init__(("127.0.0.1", 0), ReplayHandler)
        self.scripts, self.position = scripts, {k: -1 for k in scripts}
        self.apps: Dict[str, dict] = {}
        self.requests: List[str] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def current(self, app_id: str) -> dict:
        return self.scripts[app_id][max(self.position[app_id], 0)]


class ReplayHandler(BaseHTTPRequestHandler):
    server: ReplayedMarathon

    def log_message(self, *args) -> None:
        pass

    def reply(self, status: int, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def app_id(self) -> str:
        return "/" + self.path.split("?")[0][len("/v2/apps/"):].removesuffix("/tasks")

    def do_GET(self) -> None:
        s = self.server
        with s.lock:
            s.requests.append("GET " + self.path)
            if self.path == "/v2/info":
                return self.reply(200, {"name": "marathon", "version": "1.10.26",
                                        "frameworkId": "fw-1"})
            app_id = self.app_id()
            if app_id not in s.apps:
                return self.reply(404, {"message": f"App '{app_id}' does not exist"})
            if self.path.split("?")[0].endswith("/tasks"):
                s.position[app_id] = min(s.position[app_id] + 1, len(s.scripts[app_id]) - 1)
                return self.reply(200, {"tasks": s.current(app_id)["tasks"]})
            now = s.current(app_id)
            app = dict(s.apps[app_id], tasksStaged=sum(t["state"] == "TASK_STAGING" for t in now["tasks"]),
                       tasksRunning=sum(t["state"] == "TASK_RUNNING" for t in now["tasks"]),
                       tasksHealthy=sum(bool(t["healthCheckResults"]) and all(
                           r["alive"] for r in t["healthCheckResults"]) for t in now["tasks"]),
                       tasksUnhealthy=sum(any(not r["alive"] for r in t["healthCheckResults"])
                                          for t in now["tasks"]))
            if now["failure"]:
                app["lastTaskFailure"] = now["failure"]
            return self.reply(200, {"app": app})

    def do_POST(self) -> None:
        s = self.server
        app = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with s.lock:
            s.requests.append("POST " + app["id"])
            s.apps[app["id"]] = app
        self.reply(201, dict(app, deployments=[{"id": "d-" + app["id"].rsplit("/", 1)[1]}]))

    def do_DELETE(self) -> None:
        s = self.server
        with s.lock:
            s.requests.append("DELETE " + self.path)
            s.apps.pop(self.app_id(), None)
        self.reply(200, {"version": "v", "deploymentId": "d-delete"})


@pytest.fixture
def replay() -> Iterator:
    servers = []

    def start(scripts: Dict[str, List[dict]]) -> ReplayedMarathon:
        server = ReplayedMarathon(scripts)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def launch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LAUNCH), *args], capture_output=True, text=True,
                          timeout=60)


def test_running_tasks_show_agent_and_gpus_and_a_finished_training_run_is_done(replay):
    server = replay({
        INFERENCE: [step([task("inf.1", INFERENCE, "TASK_STAGING")]),
                    step([task("inf.1", INFERENCE, "TASK_RUNNING", [GPU_A])]),
                    step([task("inf.1", INFERENCE, "TASK_RUNNING", [GPU_A], HEALTHY)])],
        TRAINING: [step([task("train.1", TRAINING, "TASK_RUNNING", ["GPU-b"])]),
                   step([task("train.1", TRAINING, "TASK_RUNNING", ["GPU-b"])]),
                   step([])],
    })
    r = launch("--api", server.url, "--wait", "30")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "API " + server.url + ": marathon 1.10.26 (framework fw-1)" in out
    assert f"{INFERENCE}: task inf.1 TASK_RUNNING on gpu-node-1 (agent S0), GPUs: {GPU_A}" in out
    assert f"{TRAINING}: task train.1 TASK_RUNNING on gpu-node-1 (agent S0), GPUs: GPU-b" in out
    assert f"{TRAINING}: task train.1 ended (training run finished)" in out
    assert f"{INFERENCE}: task inf.1 healthy" in out
    assert "docker/inference: 0/1 running, 0 healthy, 1 staged" in out     # progress before
    assert "docker/inference: 1/1 running, 0 healthy" in out         # running, not yet healthy
    last = [line for line in out.splitlines() if line.startswith("[")][-1]
    assert "docker/inference: 1/1 running, 1 healthy" in last
    assert "docker/training: 0/1 running, 1 finished" in last
    assert "GET /v2/apps/cognitive/docker/inference/tasks?gpus=true" in server.requests
    assert not any(req.startswith("DELETE") for req in server.requests)


def test_a_failed_run_is_reported_and_the_relaunch_counted(replay):
    failure = {"appId": TRAINING, "taskId": "train.1", "state": "TASK_FAILED", "host": "gpu-node-1",
               "message": "Command exited with status 1", "timestamp": "2026-01-01T00:00:00.000Z"}
    server = replay({TRAINING: [
        step([task("train.1", TRAINING, "TASK_RUNNING")]),
        step([], failure),
        step([task("train.2", TRAINING, "TASK_RUNNING")], failure),
        step([], failure),
    ]})
    r = launch("--api", server.url, "--apps", "training", "--wait", "30", "--delete")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert (f"{TRAINING}: task train.1 failed: TASK_FAILED on gpu-node-1: "
            "Command exited with status 1") in out
    assert "train.1 ended" not in out
    assert f"{TRAINING}: task train.2 ended (training run finished)" in out
    assert "docker/training: 0/1 running, 1 finished, 1 failed" in out
    assert f"deleted {TRAINING}" in out and server.apps == {}


def test_an_unhealthy_service_is_shown_with_the_cause_and_is_not_done(replay):
    failing = (False, 2, "GET http://127.0.0.1:31001/health: HTTP 503 Service Unavailable")
    server = replay({INFERENCE: [step([task("inf.1", INFERENCE, "TASK_RUNNING", [GPU_A])]),
                                 step([task("inf.1", INFERENCE, "TASK_RUNNING", [GPU_A], failing)])]})
    r = launch("--api", server.url, "--apps", "inference", "--wait", "3")
    assert r.returncode == 1, r.stdout + r.stderr
    assert (f"{INFERENCE}: task inf.1 UNHEALTHY (2 failed in a row: GET "
            f"http://127.0.0.1:31001/health: HTTP 503 Service Unavailable)") in r.stdout
    assert "docker/inference: 1/1 running, 0 healthy, 1 unhealthy" in r.stdout


def test_not_done_in_time_exits_1_and_delete_still_cleans_up(replay):
    server = replay({INFERENCE: [step([task("inf.1", INFERENCE, "TASK_STAGING")])]})
    r = launch("--api", server.url, "--apps", "inference", "--wait", "2", "--delete")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"not done after 2 s: {INFERENCE}" in r.stdout
    assert f"deleted {INFERENCE}" in r.stdout and server.apps == {}
    # Written to a pipe, the progress line is printed when it changes, not every second.
    progress = [line for line in r.stdout.splitlines() if line.startswith("[")]
    assert len(progress) == 1, progress


def test_image_override_is_what_gets_submitted(replay):
    server = replay({INFERENCE: [step([])], "/cognitive/mesos/inference": [step([])]})
    r = launch("--api", server.url, "--apps", "inference", "--container", "both", "--wait", "0",
               "--image", "registry.local/cognitive:2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert {a["container"]["docker"]["image"] for a in server.apps.values()} == {"registry.local/cognitive:2"}
    assert {a["container"]["type"] for a in server.apps.values()} == {"DOCKER", "MESOS"}
