"""Marathon's own example app definitions (tests/framework/marathon/api/marathon_examples,
from its old examples/ folder and its 1.10 documentation), sent as written to
the real bed: each one that uses only supported features is accepted and
reaches TASK_RUNNING; the others are refused naming what is not supported.

Nothing here reaches the internet: the images the examples name (python:3,
tomcat:8.0) are stood in by the bed's busybox image tagged so (their commands
may then exit: TASK_RUNNING is what is checked), an image nothing stands in
for fails naming it, and URIs on the internet fail naming the URI."""
import json
from pathlib import Path

import pytest

from tests.framework.marathon import app_bed
from tests.bed.waiting import wait_until

EXAMPLES = Path(__file__).with_name("marathon_examples")
STAND_INS = ("python:3", "tomcat:8.0")
# example -> what its tasks do here
RUNS = ["application-basics-basic-0", "application-basics-basic-3-2", "examples-bridge",
        "examples-PythonSimpleHTTPServer", "examples-labels", "examples-Tomcat-Docker",
        "examples-Group", "health-checks-foo", "api-apps_create",
        "native-docker-bridged-webapp"]
NOT_FETCHABLE = ["examples-Play", "examples-Rails", "examples-Tomcat",
                 "application-basics-basic-1", "application-basics-basic-2",
                 "application-basics-basic-3", "application-basics-basic-4"]
NOT_PULLABLE = {"native-docker-inky": "mesosphere/inky"}
REFUSED = {"native-docker-privileged-job": ("/container/docker/parameters(1)", "volumes-from"),
           "api-app-check-http-example": ("/check", "not run by this framework")}
# Two examples share an id with an earlier one: they go in a second round.
SECOND = {"application-basics-basic-3-2", "examples-Tomcat", "native-docker-bridged-webapp"}


bed = app_bed.bed_fixture(cpus=16, mem=16384)


def test_the_vendored_examples_are_all_classified():
    names = {p.stem for p in EXAMPLES.glob("*.json")}
    assert names == set(RUNS) | set(NOT_FETCHABLE) | set(NOT_PULLABLE) | set(REFUSED)


def submit(bed, name: str) -> list:
    """Send the example as written; the ids of the apps it made."""
    body = json.loads((EXAMPLES / f"{name}.json").read_text())
    if "apps" in body or "groups" in body:
        reply = bed.api.post("/v2/groups", body)
    elif isinstance(body, list):
        reply = bed.api.put("/v2/apps", body)
    else:
        reply = bed.api.post("/v2/apps", body)
    if name in REFUSED:
        path, words = REFUSED[name]
        assert reply.status == 422, (name, reply.json)
        errors = {d["path"]: d["errors"] for d in reply.json["details"]}
        assert path in errors and any(words in e for e in errors[path]), (name, errors)
        return []
    assert reply.status in (200, 201), (name, reply.json)
    return app_ids(body)


def app_ids(body, parent: str = "") -> list:
    if isinstance(body, list):
        return [a for item in body for a in app_ids(item, parent)]
    path = body["id"] if body["id"].startswith("/") else f"{parent}/{body['id']}"
    if "apps" in body or "groups" in body:
        return [a for item in body.get("apps", []) + body.get("groups", [])
                for a in app_ids(item, path)]
    return [path]


@pytest.mark.parametrize("round_", ["first", "second"])
def test_each_example_is_accepted_as_written_and_runs(bed, busybox_image, docker_engine, round_):
    stand_in = busybox_image(cmd="exec sleep 600")
    for name in STAND_INS:
        repository, tag = name.split(":")
        docker_engine.client().api.tag(stand_in, repository, tag)
    names = [p.stem for p in sorted(EXAMPLES.glob("*.json"))
             if (p.stem in SECOND) == (round_ == "second")]
    tap = app_bed.EventTap(bed.service, "status_update_event")
    made = {}
    try:
        for name in names:
            made[name] = submit(bed, name)

        def settled():
            events = list(tap.events)
            pending = []
            for name, apps in made.items():
                for app_id in apps:
                    mine = [e for e in events if e["appId"] == app_id]
                    if name in RUNS:
                        done = any(e["taskStatus"] == "TASK_RUNNING" for e in mine)
                    else:
                        expected = NOT_PULLABLE.get(name) or _uris(name)
                        done = any(e["taskStatus"] == "TASK_FAILED"
                                   and all(x in e["message"] for x in expected) for e in mine)
                    if not done:
                        pending.append((name, app_id))
            return not pending or print("waiting for", pending)
        wait_until(settled, timeout=180, interval=1)
    finally:
        tap.close()
        for apps in made.values():
            for app_id in apps:
                bed.api.delete(f"/v2/apps{app_id}?force=true")
        wait_until(lambda: bed.api.get("/v2/tasks").json["tasks"] == [], timeout=90)


def _uris(name: str) -> list:
    body = json.loads((EXAMPLES / f"{name}.json").read_text())
    return [f["uri"] for f in body.get("fetch", [])][:1]
