"""`/v2/groups` and the multi-app `/v2/apps` calls over real HTTP, with the real
GPU scheduler registered with a real local Mesos master (apps ask for no
instances or cannot be placed, so no executor is needed; the bed test in
test_groups_bed.py runs a group's tasks)."""

from tests.bed.framework_process import NEVER_PLACED, app, client_of
from tests.bed.waiting import wait_until


def idle(api):
    wait_until(lambda: api.get("/v2/deployments").json == [])


def tree_of(group):
    """{group id: ([app ids], [group ids])} of a GroupInfo."""
    out = {group["id"]: ([a["id"] for a in group.get("apps", [])],
                         [g["id"] for g in group.get("groups", [])])}
    for sub in group.get("groups", []):
        out.update(tree_of(sub))
    return out


PROD = {"id": "/prod", "apps": [app("db")],
        "groups": [{"id": "web", "apps": [app("frontend", dependencies=["/prod/db"])]},
                   {"id": "/prod/batch", "dependencies": ["/prod/web"],
                    "apps": [app("report", gpus=1)]}]}


def test_nested_group_is_created_shown_and_listed(api):
    created = api.post("/v2/groups", PROD)
    assert created.status == 201, created.json
    assert created.headers["location"] == "/prod"
    assert set(created.json) == {"version", "deploymentId"}
    assert created.headers["marathon-deployment-id"] == created.json["deploymentId"]
    shown = api.get("/v2/groups/prod").json
    assert tree_of(shown) == {"/prod": (["/prod/db"], ["/prod/batch", "/prod/web"]),
                              "/prod/batch": (["/prod/batch/report"], []),
                              "/prod/web": (["/prod/web/frontend"], [])}
    assert shown["groups"][0]["dependencies"] == ["/prod/web"]
    assert shown["version"] == created.json["version"] and shown["pods"] == []
    frontend = shown["groups"][1]["apps"][0]
    assert frontend["dependencies"] == ["/prod/db"] and "tasksRunning" not in frontend
    root = api.get("/v2/groups").json
    assert root["id"] == "/" and [g["id"] for g in root["groups"]] == ["/prod"]
    assert sorted(a["id"] for a in api.get("/v2/apps").json["apps"]) == [
        "/prod/batch/report", "/prod/db", "/prod/web/frontend"]
    assert api.get("/v2/groups/prod/apps").json["apps"][0]["id"] == "/prod/batch/report"

    only_apps = api.get("/v2/groups/prod?embed=group.apps").json
    assert "groups" not in only_apps and [a["id"] for a in only_apps["apps"]] == ["/prod/db"]
    counted = api.get("/v2/groups/prod?embed=group.apps&embed=group.apps.counts").json
    assert counted["apps"][0]["tasksRunning"] == 0 and "deployments" not in counted["apps"][0]
    assert "apps" not in api.get("/v2/groups/prod?embed=group.groups").json

    again = api.post("/v2/groups", PROD)
    assert again.status == 409
    assert again.json == {"message": "Group /prod is already created. Use PUT to change this group."}
    assert api.post("/v2/groups/prod/db", {"apps": []}).status == 409     # an app is there
    assert api.get("/v2/groups/nope").json == {"message": "Group '/nope' does not exist"}
    assert api.get("/v2/groups/nope").status == 404


def test_a_bad_group_body_gets_every_violation_in_one_422(api):
    body = {"id": "/bad", "apps": [app("a", cpus="many"), app("/elsewhere/b")],
            "groups": [{"id": "sub", "apps": [app("c", gpus=-1, constraints=[["x", "NOPE"]])]},
                       {"apps": []}]}
    reply = api.post("/v2/groups", body)
    assert reply.status == 422, reply.json
    errors = {d["path"]: d["errors"] for d in reply.json["details"]}
    assert "error.expected.jsnumber" in errors["/apps(0)/cpus"]
    assert errors["/apps(1)/id"] == ["Identifier is not child of '/bad'"]
    assert "error.min" in errors["/groups(0)/apps(0)/gpus"]
    assert any("NOPE" in e for e in errors["/groups(0)/apps(0)/constraints(0)"])
    assert errors["/groups(1)/id"] == ["error.path.missing"]
    assert reply.json["message"] == "Object is not valid"
    assert api.get("/v2/groups/bad").status == 404                     # nothing half-made

    cycle = {"id": "/loop", "apps": [app("a", dependencies=["b"]), app("b", dependencies=["a"])]}
    refused = api.post("/v2/groups", cycle)
    assert refused.status == 422
    assert refused.json["details"] == [{"path": "/", "errors": [
        "Dependency graph has cyclic dependencies."]}]
    both = api.put("/v2/groups/prod", {"scaleBy": 2, "apps": []})
    assert both.status == 422 and "not allowed in conjunction" in both.raw.decode()


def test_dependencies_order_the_deployment_and_hold_later_steps(api):
    body = {"id": "/chain", "apps": [app("c", instances=1, dependencies=["b"]),
                                     app("b", instances=1, dependencies=["a"]),
                                     app("a", instances=1, constraints=NEVER_PLACED)]}
    assert api.post("/v2/groups", body).status == 201
    plan = api.get("/v2/deployments").json[0]
    assert [s["actions"] for s in plan["steps"]] == [
        [{"action": "StartApplication", "app": f"/chain/{x}"} for x in "abc"],
        [{"action": "ScaleApplication", "app": "/chain/a"}],
        [{"action": "ScaleApplication", "app": "/chain/b"}],
        [{"action": "ScaleApplication", "app": "/chain/c"}]]
    assert sorted(plan["affectedApps"]) == ["/chain/a", "/chain/b", "/chain/c"]
    # /chain/a cannot be placed: b and c wait for it, not even queued.
    wait_until(lambda: api.get("/v2/deployments").json[0]["currentStep"] == 2)
    queue = api.get("/v2/queue").json["queue"]
    assert [q["app"]["id"] for q in queue] == ["/chain/a"]
    assert api.put("/v2/apps/chain/b", {"cpus": 0.2}).status == 409       # locked by the group's
    dry = api.put("/v2/groups/chain?dryRun=true", {"apps": [app("a"), app("b")]})
    assert dry.status == 200
    assert dry.json["steps"][0]["actions"] == [{"action": "StopApplication", "app": "/chain/c"}]
    assert len(api.get("/v2/apps").json["apps"]) == 3                   # dry: nothing changed
    forced = api.put("/v2/groups/chain?force=true", {"scaleBy": 0})
    assert forced.status == 200
    idle(api)
    assert [a["instances"] for a in api.get("/v2/groups/chain").json["apps"]] == [0, 0, 0]


def test_update_changes_only_what_differs_and_rolls_back_by_version(api):
    assert api.post("/v2/groups", PROD).status == 201
    idle(api)
    before = api.get("/v2/groups/prod").json
    db_version = before["apps"][0]["version"]
    changed = api.put("/v2/groups/prod", {"apps": [app("db", cpus=0.5)],
                                          "groups": [{"id": "web", "apps": before["groups"][1]["apps"]}]})
    assert changed.status == 200, changed.json
    idle(api)
    after = api.get("/v2/groups/prod").json
    assert tree_of(after) == {"/prod": (["/prod/db"], ["/prod/web"]),          # batch removed
                              "/prod/web": (["/prod/web/frontend"], [])}
    assert after["apps"][0]["cpus"] == 0.5 and after["apps"][0]["version"] != db_version
    frontend_before = before["groups"][1]["apps"][0]
    frontend_after = after["groups"][0]["apps"][0]
    assert frontend_after["version"] == frontend_before["version"]           # listed unchanged
    assert api.get("/v2/apps/prod/batch/report").status == 404

    versions = api.get("/v2/groups/prod/versions").json
    assert versions[0] == after["version"] and before["version"] in versions
    old = api.get(f"/v2/groups/prod/versions/{before['version']}").json
    assert tree_of(old) == tree_of(before)
    rolled = api.put("/v2/groups/prod", {"version": before["version"]})
    assert rolled.status == 200, rolled.json
    idle(api)
    restored = api.get("/v2/groups/prod").json
    assert tree_of(restored) == tree_of(before) and restored["apps"][0]["cpus"] == 0.1
    assert api.get("/v2/apps/prod/batch/report").json["app"]["gpus"] == 1
    missing = api.put("/v2/groups/prod", {"version": "2001-01-01T00:00:00.000Z"})
    assert missing.status == 422
    assert missing.json == {"message": "Group /prod not available in version "
                                       "2001-01-01T00:00:00.000Z"}
    assert api.get("/v2/groups/versions").json[0] == api.get("/v2/groups").json["version"]

    scaled = api.put("/v2/groups/prod", {"scaleBy": 1.5})      # ceil(0 * 1.5) stays 0
    assert scaled.status == 200
    assert api.patch("/v2/groups/prod", {"enforceRole": False}).status == 200
    assert api.patch("/v2/groups/prod/web", {"enforceRole": False}).json["details"][0]["errors"] \
        == ["Path needs to be top-level"]
    assert api.patch("/v2/groups/prod", {"enforceRole": True}).status == 422
    idle(api)
    deleted = api.delete("/v2/groups/prod")
    assert deleted.status == 200 and "deploymentId" in deleted.json
    assert api.get("/v2/groups/prod").status == 404 and api.get("/v2/apps").json == {"apps": []}
    assert api.delete("/v2/groups/prod").json == {"message": "Group '/prod' does not exist"}


def test_root_group_delete_and_scale(api):
    waiting = dict(instances=1, constraints=NEVER_PLACED)
    assert api.post("/v2/groups", {"id": "one", "apps": [app("x", **waiting)]}).status == 201
    assert api.post("/v2/apps", app("/loose", instances=2, constraints=NEVER_PLACED)).status == 201
    assert api.put("/v2/groups", {"scaleBy": 0.5}).status == 409        # both deploying
    assert api.put("/v2/groups?force=true", {"scaleBy": 0.5}).status == 200
    assert sorted((a["id"], a["instances"]) for a in api.get("/v2/apps").json["apps"]) == [
        ("/loose", 1), ("/one/x", 1)]
    assert api.post("/v2/groups", {"id": "/"}).status == 409
    assert api.delete("/v2/groups?force=true").status == 200
    assert api.get("/v2/apps").json == {"apps": []}
    assert api.get("/v2/groups").json["groups"] == []


def test_multi_app_put_patch_and_app_rollback(api):
    assert api.post("/v2/apps", app("/a")).status == 201
    idle(api)
    first = api.get("/v2/apps/a").json["app"]["version"]
    both = api.put("/v2/apps", [{"id": "/a", "cpus": 0.3},                 # partial: merged
                                app("/b", instances=1, constraints=NEVER_PLACED)])   # new
    assert both.status == 200, both.json
    assert set(both.json) == {"version", "deploymentId"}
    plan = api.get("/v2/deployments").json
    assert [(p["id"], p["affectedApps"]) for p in plan] == [(both.json["deploymentId"], ["/a", "/b"])]
    assert api.put("/v2/apps/b?force=true", {"instances": 0}).status == 200
    idle(api)
    assert api.get("/v2/apps/a").json["app"]["cpus"] == 0.3
    assert api.patch("/v2/apps", [{"id": "/b", "mem": 64}, {"id": "/a", "cpus": 0.4}]).status == 200
    idle(api)
    assert api.get("/v2/apps/b").json["app"]["mem"] == 64
    assert api.patch("/v2/apps", [{"id": "/nope", "cpus": 1}]).status == 404   # PATCH never creates
    bad = api.put("/v2/apps", [{"id": "/a", "cpus": "x"}, {"cmd": "true"}, {"id": "/c", "gpus": -1}])
    assert bad.status == 422
    errors = {d["path"]: d["errors"] for d in bad.json["details"]}     # all at once
    assert set(errors) == {"/(0)/cpus", "/(1)/id", "/(2)/gpus", "/(2)"}
    assert "must either contain one of 'cmd' or 'args'" in errors["/(2)"][0]   # /c is new
    assert api.put("/v2/apps", {"id": "/a"}).status == 422

    versions = api.get("/v2/apps/a/versions").json["versions"]
    assert len(versions) == 3 and versions[-1] == first
    assert api.get(f"/v2/apps/a/versions/{first}").json["cpus"] == 0.1
    rolled = api.put("/v2/apps/a", {"version": first})
    assert rolled.status == 200 and set(rolled.json) == {"version", "deploymentId"}
    idle(api)
    now = api.get("/v2/apps/a").json["app"]
    assert now["cpus"] == 0.1 and now["version"] == rolled.json["version"]
    assert api.put("/v2/apps/a", {"version": first, "cpus": 2}).json["details"][0]["errors"] == [
        "The 'version' field may only be combined with the 'id' field."]
    assert api.put("/v2/apps/a", {"version": "1999-01-01T00:00:00.000Z"}).status == 404


def test_app_versions_are_kept_within_the_limit(start_framework, tmp_path):
    from framework.marathon.core.versions import MAX_VERSIONS
    service = start_framework(tmp_path / "state")
    api = client_of(service)
    assert api.post("/v2/apps", app("/many")).status == 201
    for i in range(MAX_VERSIONS + 5):
        assert api.put("/v2/apps/many?force=true", {"cmd": f"sleep {i}"}).status == 200
    versions = api.get("/v2/apps/many/versions").json["versions"]
    assert len(versions) == MAX_VERSIONS and versions == sorted(versions, reverse=True)
    assert len(service.store.items("app_version:/many")) == MAX_VERSIONS
    assert api.get(f"/v2/apps/many/versions/{versions[-1]}").status == 200
    assert len(api.get("/v2/groups/versions").json) == MAX_VERSIONS
    assert api.delete("/v2/apps/many").status == 200
    assert service.store.items("app_version:/many") == {}             # gone with the app


def test_one_app_body_with_many_faults_gets_them_all(api):
    """Type errors and broken rules together, in one 422 (a client fixes all at once)."""
    reply = api.post("/v2/apps", {"id": "/Bad_Id", "cmd": "x", "cpus": "one", "gpus": -1,
                                  "constraints": [["hostname", "UNIQUE", "x"]],
                                  "healthChecks": [{"protocol": "HTTP", "portIndex": 3}],
                                  "container": {"type": "DOCKER", "docker": {"image": ""}}})
    assert reply.status == 422 and reply.json["message"] == "Object is not valid"
    paths = {d["path"] for d in reply.json["details"]}
    assert {"/id", "/cpus", "/gpus", "/constraints(0)", "/healthChecks(0)",
            "/container/docker/image"} <= paths, paths


def test_malformed_ids_wrong_methods_and_unknown_parameters_as_marathon(api):
    assert api.put("/v2/groups/Bad_Id", {"apps": []}).json["details"][0]["path"] == "/id"
    reserved = api.post("/v2/groups/versions", {})     # a group named `versions`, as Marathon reads it
    assert reserved.status == 422 and "reserved keywords" in reserved.raw.decode()
    wrong = api.post("/v2/queue", {})
    assert wrong.status == 405 and wrong.headers["allow"] == "GET"
    assert api.call("DELETE", "/v2/tasks").headers["allow"] == "GET"
    assert api.get("/v2/groups/x/versions/2020").json == {"message": "Group '/x' does not exist"}
    assert api.get("/v2/apps?unknown=1&embed=apps.nothing").status == 200   # ignored, as JAX-RS does
    assert api.get("/v2/nothing").json == {"message": "URI not found"}
