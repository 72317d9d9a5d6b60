"""A group deployment survives `mesos-gpu framework` being SIGKILLed: the
restarted process serves the same apps, groups, versions and deployment, and
still holds the apps whose dependencies do not run yet."""
import base64
import re
import signal
import subprocess
import sys
import threading

from tests.bed.waiting import wait_until
from tests.bed.http_client import Client

WAITING = [["gpu_type", "IS", "no_such_gpu"]]


def start(master, state):
    proc = subprocess.Popen([sys.executable, "-m", "mesos_gpu", "framework", "--master", master,
                             "--http_port", "0", "--state_dir", str(state)],
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        found = re.search(r"Marathon API on (http://\S+)", line)
        if found:
            # keep reading its log, or a full pipe would stall it
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            credentials = (state / "http_credentials").read_text().strip()
            auth = "Basic " + base64.b64encode(credentials.encode()).decode()
            return proc, Client(found.group(1), {"Authorization": auth})
    raise AssertionError(f"the framework did not start: exit {proc.wait()}")


def test_a_sigkilled_framework_resumes_a_group_deployment(cluster, tmp_path):
    state = tmp_path / "state"
    proc, api = start(cluster.address, state)
    try:
        def app(name, *deps, **extra):
            return {"id": name, "cmd": "sleep 1000", "cpus": 0.1, "mem": 16, "instances": 1,
                    "dependencies": list(deps), **extra}
        body = {"id": "/chain", "apps": [app("a", constraints=WAITING), app("b", "a"),
                                         app("c", "b")]}
        assert api.post("/v2/groups", body).status == 201
        wait_until(lambda: api.get("/v2/deployments").json[0]["currentStep"] == 2)
        before = {path: api.get(path).json for path in
                  ("/v2/deployments", "/v2/groups/chain", "/v2/groups/chain/versions",
                   "/v2/apps/chain/b/versions")}
        assert [q["app"]["id"] for q in api.get("/v2/queue").json["queue"]] == ["/chain/a"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()

    proc, api = start(cluster.address, state)            # the lock of the killed one is gone
    try:
        for path, shown in before.items():
            assert api.get(path).json == shown, path
        assert [q["app"]["id"] for q in api.get("/v2/queue").json["queue"]] == ["/chain/a"]
        assert api.delete("/v2/groups/chain?force=true").status == 200
        wait_until(lambda: api.get("/v2/deployments").json == [])
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
