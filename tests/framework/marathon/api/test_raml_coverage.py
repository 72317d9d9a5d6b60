"""Every method + path of Marathon 1.10's published API (the RAML under
`docs/docs/rest-api/public/api/` at v1.10.26: 57 pairs) answers, none with 404,
none with 5xx but the 501 that refuses pods and plugin paths by name."""
from tests.bed.framework_process import client_of
from tests.bed.waiting import wait_until

WAITING = {"cmd": "sleep 1000", "cpus": 0.1, "mem": 16, "instances": 1,
           "constraints": [["gpu_type", "IS", "no_such_gpu"]]}
GROUP = {"id": "/cov", "apps": [dict(WAITING, id="app")]}

# (method, path, body), in an order that keeps what later calls need; {task},
# {deployment}, {version}, {group_version} are filled in as the run goes.
RAML = [
    ("GET", "/ping", None), ("GET", "/metrics", None), ("GET", "/logging", None),
    ("POST", "/logging", {"level": "info", "logger": "framework.marathon"}),
    ("GET", "/v2/info", None), ("GET", "/v2/leader", None), ("GET", "/v2/events", None),
    ("GET", "/v2/plugins", None), ("GET", "/v2/plugins/webjar/index.html", None),
    ("PUT", "/v2/plugins/webjar/x", {}), ("POST", "/v2/plugins/webjar/x", {}),
    ("DELETE", "/v2/plugins/webjar/x", None),
    ("HEAD", "/v2/pods", None), ("POST", "/v2/pods", {"id": "/pod"}), ("GET", "/v2/pods", None),
    ("GET", "/v2/pods/::status", None), ("GET", "/v2/pods/pod", None),
    ("PUT", "/v2/pods/pod", {"id": "/pod"}), ("DELETE", "/v2/pods/pod", None),
    ("GET", "/v2/pods/pod::status", None), ("GET", "/v2/pods/pod::versions", None),
    ("GET", "/v2/pods/pod::versions/2020-01-01T00:00:00.000Z", None),
    ("DELETE", "/v2/pods/pod::instances/pod.instance-1", None),
    ("DELETE", "/v2/pods/pod::instances", ["pod.instance-1"]),
    ("POST", "/v2/groups", GROUP), ("GET", "/v2/groups", None),
    ("GET", "/v2/groups/versions", None), ("PATCH", "/v2/groups", {}),
    ("GET", "/v2/groups/cov", None), ("GET", "/v2/groups/cov/versions", None),
    ("POST", "/v2/groups/cov", {"id": "sub", "apps": [dict(WAITING, id="worker")]}),
    ("PUT", "/v2/groups/cov?force=true", {"scaleBy": 1}),
    ("PATCH", "/v2/groups/cov", {"enforceRole": False}),
    ("PUT", "/v2/groups?force=true", {"id": "/cov", "dependencies": []}),
    ("GET", "/v2/apps", None), ("POST", "/v2/apps", dict(WAITING, id="/solo")),
    ("PUT", "/v2/apps?force=true", [dict(WAITING, id="/multi")]),
    ("PATCH", "/v2/apps?force=true", [{"id": "/multi", "cpus": 0.2}]),
    ("GET", "/v2/apps/cov/app", None), ("PUT", "/v2/apps/cov/app?force=true", {"cpus": 0.2}),
    ("PATCH", "/v2/apps/cov/app?force=true", {"mem": 32}),
    ("POST", "/v2/apps/cov/app/restart?force=true", None),
    ("GET", "/v2/apps/cov/app/tasks", None), ("DELETE", "/v2/apps/cov/app/tasks/{task}", None),
    ("DELETE", "/v2/apps/cov/app/tasks", None), ("GET", "/v2/apps/cov/app/versions", None),
    ("GET", "/v2/apps/cov/app/versions/{version}", None),
    ("GET", "/v2/tasks", None), ("POST", "/v2/tasks/delete", {"ids": ["{task}"]}),
    ("GET", "/v2/queue", None), ("DELETE", "/v2/queue/cov/app/delay", None),
    ("GET", "/v2/deployments", None), ("DELETE", "/v2/deployments/{deployment}", None),
    ("DELETE", "/v2/apps/solo", None), ("DELETE", "/v2/groups/cov/sub?force=true", None),
    ("DELETE", "/v2/leader", None), ("DELETE", "/v2/groups?force=true", None),
]


def test_every_published_method_and_path_answers(start_framework, tmp_path):
    service = start_framework(tmp_path / "state")
    api = client_of(service)
    answers = {}
    assert len({(m, p.split("?")[0]) for m, p, _ in RAML}) == 57

    def pending_task():
        """A task of /cov/app waiting for an offer, as the scheduler and the API
        both know it (none being killed)."""
        waiting = {t.id for t in service.scheduler.tasks()
                   if t.app_id == "/cov/app" and t.pending and not t.kill_requested}
        with service.group_manager.lock:
            return next((t.id for t in service.group_manager.tasks.values() if t.id in waiting
                         and t.alive and t.id not in service.group_manager.kill_requested), None)

    for method, path, body in RAML:
        if "{task}" in path or (body and "{task}" in str(body)):
            task = wait_until(pending_task)
            path = path.replace("{task}", task)
            body = {"ids": [task]} if isinstance(body, dict) and "ids" in body else body
        if "{version}" in path:
            path = path.replace("{version}", api.get("/v2/apps/cov/app").json["app"]["version"])
        if "{deployment}" in path:
            plans = wait_until(lambda: [p for p in api.get("/v2/deployments").json
                                      if p["affectedApps"] == ["/multi"]])
            path = path.replace("{deployment}", plans[0]["id"])
        reply = api.call(method, path, body)
        answers[(method, path)] = reply.status
        refused_by_name = reply.status == 501 and ("/pods" in path or "/plugins/" in path)
        assert reply.status != 404 and (reply.status < 500 or refused_by_name), \
            (method, path, reply.status, reply.raw)
        if reply.status >= 400 and method != "HEAD":
            assert isinstance(reply.json.get("message"), str), (method, path, reply.raw)
    refused = sorted(k for k, status in answers.items() if status == 501)
    assert refused and all("/pods" in p or "/plugins/" in p for _, p in refused), refused
    assert answers[("GET", "/v2/events")] == 406          # asks for Accept: text/event-stream
