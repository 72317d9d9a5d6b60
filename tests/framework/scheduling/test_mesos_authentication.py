"""Framework and executor authentication on a real Mesos 1.11 master and agent run as
production clusters run them (localcluster/mesos_auth.py): the framework subscribes
with its principal and secret, a wrong secret or none is refused in one line naming
the principal, the secret shows in no log line, process title, environment or API
answer; an executor call without the agent's token, or with a forged one, is refused.
That our executor's calls with the token are taken is shown by the GPU end-to-end
module run on such a cluster (tests/framework/marathon/test_gpu_apps.py, 'secure')."""
import base64
import json
import logging
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from framework.process.framework_process import FrameworkProcess
from localcluster.mesos import Agent, Master
from localcluster.mesos_auth import MesosAuthentication
from tests.bed.waiting import wait_until
from tests.bed.framework_process import client_of, framework_args


@pytest.fixture(scope="module")
def secured(mesos_prefix):
    with MesosAuthentication() as auth, Master(auth.master_env()) as master, \
            Agent(master, "cpus:2;mem:1024", env=auth.agent_env()) as agent:
        yield auth, master, agent


def test_the_master_is_secured_as_asked(secured):
    auth, master, agent = secured
    flags = json.load(urllib.request.urlopen(master.url + "/master/flags"))["flags"]
    assert flags["authenticate_http_frameworks"] == "true"
    assert flags["http_framework_authenticators"] == "basic"
    assert json.load(urllib.request.urlopen(agent.url + "/flags"))["flags"][
        "authenticate_http_executors"] == "true"


def test_the_right_secret_subscribes_and_shows_nowhere(secured, tmp_path, caplog):
    auth, master, _ = secured
    caplog.set_level(logging.DEBUG)
    service = FrameworkProcess(framework_args(master.address, tmp_path / "state",
                                              *auth.framework_args())).start()
    try:
        assert service.scheduler.wait_subscribed(30)
        framework = next(f for f in master.state()["frameworks"]
                         if f["id"] == service.scheduler.framework_id)
        assert framework["principal"] == auth.principal
        info = client_of(service).get("/v2/info")
        assert info.status == 200 and auth.secret not in json.dumps(info.json)
        assert auth.secret not in repr(service.credential)
    finally:
        service.stop()
    assert caplog.records and not [r for r in caplog.records if auth.secret in r.getMessage()]
    assert any(auth.principal in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("secret", ["wrong", "none"])
def test_a_refused_framework_says_so_in_one_line_naming_the_principal(secured, tmp_path,
                                                                      caplog, secret):
    auth, master, _ = secured
    extra = [] if secret == "none" else [
        "--mesos_authentication_principal", auth.principal,
        "--mesos_authentication_secret_file", str(auth.wrong_secret_file())]
    service = FrameworkProcess(framework_args(master.address, tmp_path / "state",
                                              *extra)).start()
    try:
        refused = wait_until(lambda: [r for r in caplog.records if r.levelno == logging.ERROR
                                      and ("refused principal" in r.getMessage() or
                                           "requires framework authentication" in
                                           r.getMessage())], timeout=30)
        line = refused[0].getMessage()
        assert "\n" not in line and "401" in line
        if secret == "wrong":
            assert f"refused principal '{auth.principal}'" in line
            assert "--mesos_authentication_secret_file" in line
        else:
            assert "--mesos_authentication_principal" in line
        assert not service.scheduler.wait_subscribed(0.5)
        assert not [f for f in master.state()["frameworks"]
                    if f["id"] == service.scheduler.framework_id]
    finally:
        service.stop()
    assert not [r for r in caplog.records if auth.secret in r.getMessage()]


def test_the_cli_keeps_the_secret_out_of_its_title_environment_and_output(secured, tmp_path):
    auth, master, _ = secured
    exe = os.path.join(os.path.dirname(sys.executable), "mesos-gpu")
    process = subprocess.Popen(
        [exe, "framework", "--master", master.address, "--state_dir", str(tmp_path / "s"),
         "--http_port", "0", *auth.framework_args()],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: any(f["principal"] == auth.principal and f["active"]
                               for f in master.state()["frameworks"]), timeout=60)
        for name in ("cmdline", "environ"):
            with open(f"/proc/{process.pid}/{name}", "rb") as f:
                assert auth.secret.encode() not in f.read(), name
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=60)[0]
    assert process.returncode == 0, output
    assert f"principal {auth.principal}" in output and auth.secret not in output


def _executor_call(agent: Agent, authorization=None) -> int:
    body = json.dumps({"type": "SUBSCRIBE", "framework_id": {"value": "fw"},
                       "executor_id": {"value": "stranger"}, "subscribe": {}}).encode()
    request = urllib.request.Request(agent.url + "/api/v1/executor", body,
                                     {"Content-Type": "application/json",
                                      "Accept": "application/json"})
    if authorization:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as e:
        return e.code


def test_an_executor_without_its_token_is_refused(secured):
    _, _, agent = secured
    header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
    claims = base64.urlsafe_b64encode(json.dumps(
        {"fid": "fw", "eid": "stranger", "cid": "c"}).encode()).decode().rstrip("=")
    assert _executor_call(agent) == 401
    assert _executor_call(agent, "Bearer not-a-token") == 401
    assert _executor_call(agent, f"Bearer {header}.{claims}.Zm9yZ2Vk") == 401   # forged


def test_the_role_is_registered_and_its_offers_run_tasks(secured, tmp_path):
    """--mesos_role: the framework registers in that role and launches on its offers
    (unreserved resources allocated to the role); our executor calls the secured
    agent with its token (the task would not get to RUNNING otherwise)."""
    auth, master, _ = secured
    service = FrameworkProcess(framework_args(
        master.address, tmp_path / "state", "--agent_socket", "none", "--refuse_seconds", "1",
        "--mesos_role", "gpu-team", *auth.framework_args())).start()
    try:
        assert service.scheduler.wait_subscribed(30)
        framework = next(f for f in master.state()["frameworks"]
                         if f["id"] == service.scheduler.framework_id)
        assert framework["role"] == "gpu-team" or framework.get("roles") == ["gpu-team"]
        api = client_of(service)
        assert api.get("/v2/info").json["marathon_config"]["mesos_role"] == "gpu-team"
        created = api.post("/v2/apps", {"id": "/role/sleep", "cmd": "sleep 600", "cpus": 0.1,
                                        "mem": 32, "instances": 1})
        assert created.status == 201, created.json
        wait_until(lambda: [t for t in api.get("/v2/apps/role/sleep/tasks").json["tasks"]
                            if t["state"] == "TASK_RUNNING"], timeout=60)
        assert api.delete("/v2/apps/role/sleep?force=true").status == 200
        wait_until(lambda: api.get("/v2/apps/role/sleep").status == 404, timeout=60)
    finally:
        service.stop()


def test_bad_role_and_half_credentials_are_one_line_errors(tmp_path):
    cases = [(["--mesos_role", "bad role"], "--mesos_role"),
             (["--mesos_role", ".."], "--mesos_role"),
             (["--mesos_authentication_principal", "p"], "needs --mesos_authentication_secret_file"),
             (["--mesos_authentication_secret_file", str(tmp_path / "s")],
              "needs --mesos_authentication_principal"),
             (["--mesos_authentication_principal", "p", "--mesos_authentication_secret_file",
               str(tmp_path / "missing")], "No such file")]
    empty = tmp_path / "empty"
    empty.write_text("\n")
    cases.append((["--mesos_authentication_principal", "p",
                   "--mesos_authentication_secret_file", str(empty)], "the file is empty"))
    for extra, words in cases:
        result = subprocess.run([sys.executable, "-m", "mesos_gpu", "framework", "--master",
                                 "127.0.0.1:1", "--state_dir", str(tmp_path / "state"), *extra],
                                capture_output=True, text=True, timeout=60)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and words in lines[0], result.stderr
    assert not (tmp_path / "state").exists()


def test_a_secured_agent_and_master_restart_under_a_running_task(mesos_prefix, tmp_path):
    """SIGKILL and restart of the agent: our executor re-subscribes with the token it was
    given (signed with the same key, still good) and its task lives on; SIGKILL and
    restart of the master: the framework subscribes again with its principal."""
    with MesosAuthentication() as auth, \
            Master({**auth.master_env(), "MESOS_REGISTRY": "replicated_log",
                    "MESOS_QUORUM": "1"}) as master, \
            Agent(master, "cpus:2;mem:1024", env=auth.agent_env()) as agent:
        service = FrameworkProcess(framework_args(
            master.address, tmp_path / "state", "--agent_socket", "none",
            "--refuse_seconds", "1", *auth.framework_args())).start()
        try:
            assert service.scheduler.wait_subscribed(30)
            api = client_of(service)
            assert api.post("/v2/apps", {"id": "/keep", "cmd": "sleep 600", "cpus": 0.1,
                                         "mem": 32, "instances": 1}).status == 201

            def running():
                tasks = api.get("/v2/apps/keep/tasks").json["tasks"]
                return [t["id"] for t in tasks if t["state"] == "TASK_RUNNING"]
            task = wait_until(running, timeout=60)
            agent.crash()
            agent.restart()
            agent.wait_registered(30)
            wait_until(lambda: "re-registered with agent" in _executor_log(agent), 30,
                       "the executor re-subscribed with its token")
            assert "HTTP 401" not in _executor_log(agent)
            framework_id = service.scheduler.framework_id
            master.crash()
            master.restart()
            wait_until(lambda: any(f["id"] == framework_id and f["active"]
                                   and f["principal"] == auth.principal
                                   for f in master.state()["frameworks"]), 60,
                       "the framework subscribed again with its principal")
            assert wait_until(running, timeout=30) == task
        finally:
            service.stop()


def _executor_log(agent: Agent) -> str:
    return "\n".join(p.read_text(errors="replace") for p in agent.run_dir.rglob("stderr")
                     if "executors/mesos-gpu." in str(p))
