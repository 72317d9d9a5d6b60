"""The Marathon v2 routes over real HTTP, with the real GPU scheduler registered
with a real local Mesos 1.11 master (apps here either ask for no instances or
cannot be placed, so no executor is needed)."""
import json
import socket
import subprocess
import threading

import pytest

from tests.bed.framework_process import NEVER_PLACED, app, client_of
from tests.bed.waiting import wait_until


def test_create_show_list_with_marathon_shapes(api):
    reply = api.post("/v2/apps", app("gpu/train", gpus=1, labels={"team": "vision"}))
    assert reply.status == 201, reply.json
    assert reply.headers["location"] == "/gpu/train"
    created = reply.json
    assert created["id"] == "/gpu/train"
    assert reply.headers["marathon-deployment-id"] == created["deployments"][0]["id"]
    assert (created["tasksStaged"], created["tasksRunning"], created["tasksHealthy"],
            created["tasksUnhealthy"]) == (0, 0, 0, 0)
    # Marathon's defaults
    assert created["disk"] == 0 and created["backoffSeconds"] == 1
    assert created["backoffFactor"] == 1.15 and created["maxLaunchDelaySeconds"] == 300
    assert created["upgradeStrategy"] == {"minimumHealthCapacity": 1.0, "maximumOverCapacity": 1.0}
    assert created["networks"] == [{"mode": "host"}]
    assert created["portDefinitions"][0]["name"] == "default"
    assert 10000 <= created["portDefinitions"][0]["port"] <= 20000
    assert created["versionInfo"]["lastConfigChangeAt"] == created["version"]

    shown = api.get("/v2/apps//gpu/train")           # a doubled slash is tolerated
    assert shown.status == 200
    assert shown.json["app"]["tasks"] == [] and shown.json["app"]["gpus"] == 1

    assert [a["id"] for a in api.get("/v2/apps?id=TRAIN").json["apps"]] == ["/gpu/train"]
    assert api.get("/v2/apps?id=nothing").json["apps"] == []
    assert len(api.get("/v2/apps?label=team==vision").json["apps"]) == 1
    assert api.get("/v2/apps?label=team!=vision").json["apps"] == []
    assert len(api.get("/v2/apps?label=team%20in%20(nlp,%20vision)").json["apps"]) == 1
    assert len(api.get("/v2/apps?cmd=SLEEP&embed=apps.tasks").json["apps"][0]["tasks"]) == 0

    again = api.post("/v2/apps", app("/gpu/train"))
    assert again.status == 409
    assert again.json == {"message": "An app with id [/gpu/train] already exists."}
    assert api.get("/v2/apps/nope").json == {"message": "App '/nope' does not exist"}


@pytest.mark.parametrize("body, path, error", [
    (app("/Bad_Id"), "/id", "must fully match regular expression"),
    (app("/a/restart"), "/id", "must not end with any of the following reserved keywords"),
    (app(gpus=-1), "/gpus", "error.min"),
    (app(gpus=1.5), "/gpus", "neither a whole number of GPUs nor a share of one GPU"),
    (app(cpus="1"), "/cpus", "error.expected.jsnumber"),
    (app(instances=True), "/instances", "error.expected.jsnumber"),
    (app(args=["x"]), "/", "AppDefinition must either contain one of 'cmd' or 'args'"),
    (app(cmd=None, container={"type": "DOCKER"}), "/container/docker", "not defined"),
    (app(container={"type": "DOCKER", "docker": {"image": ""}}), "/container/docker/image",
     "must not be empty"),
    (app(constraints=[["hostname", "UNIQUE", "x"]]), "/constraints(0)", "UNIQUE does not accept a value"),
    (app(constraints=[["gpu_type", "LIKE"]]), "/constraints(0)", "LIKE and UNLIKE require"),
    (app(upgradeStrategy={"minimumHealthCapacity": 1.5}), "/upgradeStrategy/minimumHealthCapacity",
     "error.max"),
    (app(healthChecks=[{"protocol": "HTTP", "portIndex": 2}]), "/healthChecks(0)",
     "port indices must address an element"),
    (app(check={"exec": {"command": {"shell": "true"}}}), "/check", "not run by this framework"),
    (app(networks=[{"mode": "container", "name": "dcos"}]), "/networks(0)", "not supported"),
    ({"cmd": "x"}, "/id", "error.path.missing"),
    ([], "/", "error.expected.jsobject"),
])
def test_invalid_apps_get_422_grouped_by_path(api, body, path, error):
    reply = api.post("/v2/apps", body)
    assert reply.status == 422, reply.json
    assert reply.json["message"] in ("Object is not valid", "Invalid JSON")
    errors = {d["path"]: d["errors"] for d in reply.json["details"]}
    assert path in errors, reply.json
    assert any(error in e for e in errors[path]), errors[path]
    assert api.get("/v2/apps").json["apps"] == []


def test_not_json_is_400(api):
    reply = api.post("/v2/apps", raw=b"{not json")
    assert reply.status == 400
    assert reply.json["message"] == "Invalid JSON"
    assert api.post("/v2/apps", raw=b'{"id": "/a", "cpus": NaN}').status == 400


def test_gpus_in_docker_containers_are_allowed(api):
    docker_gpu = app("/dockergpu", gpus=2, container={"type": "DOCKER", "docker": {"image": "cuda:12"}})
    reply = api.post("/v2/apps", docker_gpu)
    assert reply.status == 201, reply.json     # Marathon: "GPU resources only work with the Mesos containerizer"
    assert reply.json["container"]["docker"]["image"] == "cuda:12"
    mesos_gpu = app("/mesosgpu", gpus=1, container={"type": "MESOS", "docker": {"image": "cuda:12"}})
    assert api.post("/v2/apps", mesos_gpu).status == 201


HOSTILE = [
    ({"privileged": True}, "/container/docker/privileged"),
    ({"parameters": [{"key": "device", "value": "/dev/nvidia0"}]}, "/container/docker/parameters(0)"),
    ({"parameters": [{"key": "label", "value": "a=b"}, {"key": "--cap-add", "value": "SYS_ADMIN"}]},
     "/container/docker/parameters(1)"),
    ({"parameters": [{"key": "pid", "value": "HOST"}]}, "/container/docker/parameters(0)"),
    ({"parameters": [{"key": "v", "value": "/:/host"}]}, "/container/docker/parameters(0)"),
    ({"parameters": [{"key": "gpus", "value": "all"}]}, "/container/docker/parameters(0)"),
    ({"parameters": [{"key": "security-opt", "value": "seccomp=unconfined"}]},
     "/container/docker/parameters(0)"),
]


@pytest.mark.parametrize("docker_extra, path", HOSTILE)
def test_host_access_through_docker_is_refused(api, docker_extra, path):
    body = app("/sneaky", gpus=1, container={"type": "DOCKER",
                                             "docker": {"image": "busybox", **docker_extra}})
    reply = api.post("/v2/apps", body)
    assert reply.status == 422, reply.json
    errors = {d["path"]: d["errors"] for d in reply.json["details"]}
    assert "access to the host" in errors[path][0]
    assert api.get("/v2/apps/sneaky").status == 404


def test_host_volume_refused_unless_allowed(start_framework, tmp_path):
    volume = {"containerPath": "/data", "hostPath": "/etc", "mode": "RO"}
    body = app("/vol", container={"type": "DOCKER", "docker": {"image": "busybox"}, "volumes": [volume]})
    strict = client_of(start_framework(tmp_path / "strict"))
    reply = strict.post("/v2/apps", body)
    assert reply.status == 422
    assert reply.json["details"][0]["path"] == "/container/volumes(0)/hostPath"
    lenient = client_of(start_framework(tmp_path / "lenient", "--allow_docker_parameters",
                                        "volume,privileged", "--allow_docker_parameters", "cap-add"))
    assert lenient.post("/v2/apps", body).status == 201
    privileged = app("/priv", container={"type": "DOCKER", "docker": {
        "image": "busybox", "privileged": True,
        "parameters": [{"key": "cap-add", "value": "NET_ADMIN"}]}})
    assert lenient.post("/v2/apps", privileged).status == 201
    still_refused = app("/dev", container={"type": "DOCKER", "docker": {
        "image": "busybox", "parameters": [{"key": "device", "value": "/dev/sda"}]}})
    assert lenient.post("/v2/apps", still_refused).status == 422


def test_updates_locks_and_force(api):
    assert api.post("/v2/apps", app("/web", instances=1, constraints=NEVER_PLACED)).status == 201
    # The deployment cannot finish (the constraint matches no agent): the app is locked.
    locked = api.put("/v2/apps/web", {"instances": 2})
    assert locked.status == 409
    plan_id = api.get("/v2/deployments").json[0]["id"]
    assert locked.json["deployments"] == [{"id": plan_id}]
    assert "Override with the option '?force=true'" in locked.json["message"]
    forced = api.put("/v2/apps/web?force=TRUE", {"instances": 2})
    assert forced.status == 200
    assert set(forced.json) == {"version", "deploymentId"}
    assert forced.headers["marathon-deployment-id"] == forced.json["deploymentId"]
    shown = api.get("/v2/apps/web").json["app"]
    assert shown["instances"] == 2 and shown["cmd"] == "sleep 1000"      # partial: cmd kept
    assert shown["versionInfo"]["lastConfigChangeAt"] != shown["version"]  # scaling only
    assert [p["id"] for p in api.get("/v2/deployments").json] == [forced.json["deploymentId"]]
    queue = api.get("/v2/queue").json["queue"]
    assert [(q["app"]["id"], q["count"]) for q in queue] == [("/web", 2)]
    assert api.get("/v2/apps/web/tasks").json == {"tasks": []}            # queued, not launched

    assert api.patch("/v2/apps/missing", {"cpus": 1}).status == 404
    created = api.put("/v2/apps/newone", app("/ignored-id"))
    assert created.status == 201 and created.headers["location"] == "/newone"
    wait_until(lambda: created.json["deploymentId"] not in
               [p["id"] for p in api.get("/v2/deployments").json])     # no instances: done at once
    replaced = api.put("/v2/apps/newone?partialUpdate=false", {"args": ["sleep", "1"], "labels": {}})
    assert replaced.status == 200
    newone = api.get("/v2/apps/newone").json["app"]
    assert newone["args"] == ["sleep", "1"] and "cmd" not in newone and newone["mem"] == 128


def test_delete_restart_and_deployment_rollback(api):
    assert api.post("/v2/apps/gone/restart").status == 404
    assert api.delete("/v2/apps/gone").json == {"message": "App '/gone' does not exist"}
    assert api.post("/v2/apps", app("/svc", instances=1, constraints=NEVER_PLACED)).status == 201
    plan = api.get("/v2/deployments").json[0]
    assert plan["affectedApps"] == ["/svc"] and plan["totalSteps"] == 2     # as Marathon:
    assert [s["actions"] for s in plan["steps"]] == [                    # start with 0, then scale
        [{"action": "StartApplication", "app": "/svc"}],
        [{"action": "ScaleApplication", "app": "/svc"}]]
    # started at once; scaling waits for an offer that never comes
    wait_until(lambda: api.get("/v2/deployments").json[0]["currentStep"] == 2)

    rollback = api.delete(f"/v2/deployments/{plan['id']}")      # no force: roll back the create
    assert rollback.status == 200 and "deploymentId" in rollback.json
    wait_until(lambda: api.get("/v2/apps/svc").status == 404)
    wait_until(lambda: api.get("/v2/deployments").json == [])      # the rollback is done
    assert api.delete("/v2/deployments/no-such-plan").json == {
        "message": "DeploymentPlan no-such-plan does not exist"}

    assert api.post("/v2/apps", app("/svc", instances=1, constraints=NEVER_PLACED)).status == 201
    plan_id = api.get("/v2/deployments").json[0]["id"]
    assert api.post("/v2/apps/svc/restart").status == 409
    restarted = api.post("/v2/apps/svc/restart?force=true")
    assert restarted.status == 200
    assert api.delete(f"/v2/deployments/{restarted.json['deploymentId']}?force=true").status == 202
    assert plan_id not in [p["id"] for p in api.get("/v2/deployments").json]
    deleted = api.delete("/v2/apps/svc")                          # force defaults to true here
    assert deleted.status == 200 and deleted.headers["marathon-deployment-id"]
    wait_until(lambda: api.get("/v2/deployments").json == [])
    assert api.get("/v2/apps").json == {"apps": []}


def test_task_routes(api):
    assert api.post("/v2/apps", app("/batch", instances=1, constraints=NEVER_PLACED)).status == 201
    missing = api.delete("/v2/apps/batch/tasks/batch.nope")
    assert missing.status == 404
    assert missing.json == {"message": "Task 'batch.nope' does not exist"}
    assert api.delete("/v2/apps/other/tasks/x").status == 404
    assert api.get("/v2/tasks").json == {"tasks": []}
    assert api.delete("/v2/apps/batch/tasks?scale=true&wipe=true").status == 400
    assert api.post("/v2/tasks/delete", {"ids": ["batch.nope"]}).status == 404
    assert api.get("/v2/apps/batch/versions").json == {
        "versions": [api.get("/v2/apps/batch").json["app"]["version"]]}


def test_info_ping_and_unknown_routes(start_framework, tmp_path):
    service = start_framework(tmp_path / "state")
    api = client_of(service)
    info = api.get("/v2/info").json
    assert info["name"] == "marathon" and info["elected"] is True
    assert info["frameworkId"] == service.scheduler.framework_id
    assert "gpu_resources" in info["marathon_config"]["features"]
    assert api.get("/ping").raw == b"pong\n"
    assert api.get("/ping", headers={"Accept": "application/json"}).json == "pong"
    assert api.get("/v2/nothing-here").status == 404
    assert api.call("BREW", "/v2/apps").status == 501
    assert api.call("POST", "/v2/info").status == 405


def test_event_stream(api):
    sock = socket.create_connection((api.host, api.port), timeout=10)
    sock.sendall(b"GET /v2/events?event_type=api_post_event&event_type=deployment_info HTTP/1.1\r\n"
                 b"Host: x\r\nAccept: text/event-stream\r\n"
                 + f"Authorization: {api.headers['Authorization']}\r\n\r\n".encode())
    received = b""

    def read():
        nonlocal received
        try:
            while b"deployment_info" not in received:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
        except OSError:
            pass

    reader = threading.Thread(target=read)
    reader.start()
    wait_until(lambda: b"200 OK" in received)
    assert api.post("/v2/apps", app("/evented")).status == 201
    reader.join(timeout=10)
    sock.close()
    frames = [block for block in received.split(b"\r\n\r\n", 1)[1].split(b"\n\n") if block.strip()]
    events = [json.loads(f.split(b"data: ", 1)[1]) for f in frames if b"data: " in f]
    kinds = [e["eventType"] for e in events]
    assert kinds[:2] == ["api_post_event", "deployment_info"], kinds    # attached: filtered out
    assert events[0]["appDefinition"]["id"] == "/evented" and events[0]["timestamp"].endswith("Z")
    assert api.get("/v2/events").status == 406          # needs Accept: text/event-stream


def test_basic_auth_token_and_body_limit(start_framework, tmp_path):
    guarded = start_framework(tmp_path / "basic", "--http_credentials", "ops:s3cret",
                              "--max_body_bytes", "4096")
    anonymous = client_of(guarded, anonymous=True)
    refused = anonymous.get("/v2/apps")
    assert refused.status == 401 and refused.json == {"message": "Invalid username or password."}
    assert "basic" in refused.headers["www-authenticate"].lower()
    wrong = client_of(guarded, Authorization="Basic b3BzOndyb25n")
    assert wrong.get("/v2/apps").status == 401
    user = client_of(guarded, Authorization="Basic b3BzOnMzY3JldA==")
    assert user.get("/v2/apps").status == 200
    big = user.post("/v2/apps", app("/big", labels={"pad": "x" * 8000}))
    assert big.status == 413 and "too large" in big.json["message"]
    assert user.get("/v2/apps").json == {"apps": []}

    token_file = tmp_path / "token"
    token_file.write_text("t0ken\n")
    tokened = start_framework(tmp_path / "token-state", "--http_token_file", str(token_file))
    assert client_of(tokened, anonymous=True).get("/v2/info").status == 401
    assert client_of(tokened, Authorization="Bearer t0ken").get("/v2/info").status == 200
    assert client_of(tokened, Authorization="Bearer t0ke").get("/v2/info").status == 401


def test_listens_on_loopback_by_default(start_framework, tmp_path):
    service = start_framework(tmp_path / "state")
    assert service.http.server_address[0] == "127.0.0.1"


def test_the_api_listens_with_room_for_a_burst_of_clients(api):
    """The listening socket's backlog (ss's Send-Q of a listener) is the server's 1024,
    not socketserver's 5: 200 apps created at once by 16 clients had connections reset."""
    out = subprocess.run(["ss", "-ltnH", f"sport = :{api.port}"], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out and int(out[2]) == 1024, out
