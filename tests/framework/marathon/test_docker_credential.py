"""Marathon's container.docker.credential: refused unless the operator allows it
(--allow_docker_credential); then the task's image is pulled with it, the secret is
write-only (no API answer, event or log line shows it) and an app read back from the
API and sent again keeps it while the principal is unchanged."""
import json

import pytest

from common.errors import UserError
from framework.http.events import EventBus
from framework.http.security import DockerPolicy
from framework.http.validation import Violations
from framework.marathon.core import task_builder
from framework.marathon.state import app_model, docker_credential, groups

SECRET = "docker-credential-secret"
ALLOWED = DockerPolicy(allow_docker_credential=True)
IMAGE = "127.0.0.1:5000/team/tf:1"


def app_with(credential=None, **docker):
    body = {"id": "/a", "cmd": "true", "container": {"type": "MESOS", "docker": {
        "image": IMAGE, **docker}}}
    if credential is not None:
        body["container"]["docker"]["credential"] = credential
    return body


def read(body, policy=ALLOWED, stored=None):
    v = Violations()
    app = app_model.read_app(body, v, policy, stored=stored)
    return app, {path: errors for path, errors in v.details.items()}


def test_without_the_flag_the_credential_is_refused_naming_the_field_and_the_flag():
    _, errors = read(app_with({"principal": "robot", "secret": SECRET}), DockerPolicy())
    assert any("--allow_docker_credential" in e for e in errors["/container/docker/credential"])
    assert SECRET not in json.dumps(errors)
    _, errors = read(app_with({}), DockerPolicy())        # an empty one is no credential
    assert not errors, errors


def test_an_allowed_credential_pulls_the_tasks_image_and_is_never_shown():
    app, errors = read(app_with({"principal": "robot", "secret": SECRET}))
    assert not errors, errors
    versioned = dict(app, version="2026-01-01T00:00:00.000Z")
    spec = task_builder.task_spec(versioned, "a.1", allow_docker_credential=True)
    assert (spec.pull_credential.principal, spec.pull_credential.secret) == ("robot", SECRET)
    assert SECRET not in repr(spec)
    with pytest.raises(UserError, match="--allow_docker_credential") as refused:
        task_builder.task_spec(versioned, "a.2")     # stored, then the flag was taken away
    assert SECRET not in str(refused.value)
    shown = app_model.to_json(app)
    assert shown["container"]["docker"]["credential"] == {"principal": "robot"}
    assert SECRET not in json.dumps(shown)
    assert app["container"]["docker"]["credential"]["secret"] == SECRET   # the store keeps it
    assert docker_credential.masked(app_with()) == app_with()             # none: as it is


def test_no_event_or_api_view_shows_the_secret_and_the_store_keeps_it(tmp_path):
    from framework.marathon.api.app_view import AppView
    from framework.marathon.core.app_changes import AppChanges
    from framework.marathon.core.group_manager import GroupManager
    from framework.state.state_store import StateStore
    events = EventBus()
    subscription = events.subscribe()
    store = StateStore(tmp_path)
    try:
        manager = GroupManager(store, events)
        service = AppChanges(manager)
        app, _ = read(app_with({"principal": "robot", "secret": SECRET}, forcePullImage=True))
        created, _ = service.create(dict(app, instances=0), force=False)
        again, errors = read(app_model.to_json(created), stored=created)
        assert not errors, errors
        service.update("/a", dict(again, instances=0, cpus=0.5), force=True)
        frames = []
        while (frame := subscription.next(0.1)) is not None:
            frames.append(frame)
        posted = [json.loads(f.split(b"data: ", 1)[1]) for f in frames if b"api_post_event" in f]
        assert len(posted) == 2, frames
        assert posted[0]["appDefinition"]["container"]["docker"]["credential"] == \
            {"principal": "robot"}
        assert not any(SECRET.encode() in f for f in frames)
        view = AppView(manager)
        with manager.lock:
            index = manager.by_app()
            stored = manager.apps["/a"]
            texts = [json.dumps(view.app_json(stored, {"tasks"})),
                     view.app_text(stored, {"counts"}, False, index),
                     view.list_text([stored], None, False).decode()]
        assert all('"principal": "robot"' in t or '"principal":"robot"' in t for t in texts)
        assert not any(SECRET in t for t in texts), texts
        assert stored["container"]["docker"]["credential"]["secret"] == SECRET
        reloaded = GroupManager(store, EventBus())              # a restart: the store has it
        assert reloaded.apps["/a"]["container"]["docker"]["credential"]["secret"] == SECRET
    finally:
        store.close()


@pytest.mark.parametrize("credential, path", [
    ({"principal": "robot"}, "/container/docker/credential/secret"),
    ({"secret": SECRET}, "/container/docker/credential/principal"),
    ({"principal": "", "secret": SECRET}, "/container/docker/credential/principal"),
    ({"principal": 7, "secret": SECRET}, "/container/docker/credential/principal"),
    ({"principal": "robot", "secret": ""}, "/container/docker/credential/secret"),
    ({"principal": "robot", "secret": ["x"]}, "/container/docker/credential/secret"),
    ("robot:secret", "/container/docker/credential"),
])
def test_a_credential_that_is_not_two_non_empty_strings_is_refused_by_path(credential, path):
    _, errors = read(app_with(credential))
    assert path in errors, errors
    assert SECRET not in json.dumps(errors)


def test_a_credential_beside_a_pull_config_is_refused():
    body = dict(app_with({"principal": "robot", "secret": SECRET},
                         pullConfig={"secret": "pc"}), secrets={"pc": {"source": "x.json"}})
    _, errors = read(body, DockerPolicy(allow_docker_credential=True, pull_config_dir="/nowhere"))
    assert any("pullConfig" in e for e in errors["/container/docker/credential"]), errors


def test_an_app_read_back_and_sent_again_keeps_its_secret_while_the_principal_is_the_same():
    stored, _ = read(app_with({"principal": "robot", "secret": SECRET}))
    shown = json.loads(json.dumps(app_model.to_json(stored)))
    again, errors = read(shown, stored=stored)
    assert not errors, errors
    assert again["container"]["docker"]["credential"] == {"principal": "robot", "secret": SECRET}
    renamed = json.loads(json.dumps(shown))
    renamed["container"]["docker"]["credential"] = {"principal": "someone-else"}
    _, errors = read(renamed, stored=stored)
    assert "/container/docker/credential/secret" in errors, errors
    changed, errors = read(app_with({"principal": "robot", "secret": "new"}), stored=stored)
    assert not errors and changed["container"]["docker"]["credential"]["secret"] == "new"
    # a partial update (PATCH) without a container keeps the stored one as it is
    merged, errors = read(app_model.merge_update(stored, {"instances": 2}), stored=stored)
    assert not errors and merged["container"]["docker"]["credential"]["secret"] == SECRET


def test_a_group_sent_again_keeps_its_apps_secrets():
    stored, _ = read(app_with({"principal": "robot", "secret": SECRET}))
    shown = app_model.to_json(stored)
    v = Violations()
    update = groups.read_update({"id": "/", "apps": [shown]}, "/", v, ALLOWED,
                                stored={"/a": stored})
    assert not v.details, v.details
    assert update.apps[0]["container"]["docker"]["credential"]["secret"] == SECRET
    v = Violations()
    groups.read_update({"id": "/", "apps": [shown]}, "/", v, ALLOWED)
    assert "/apps(0)/container/docker/credential/secret" in v.details, v.details


def test_an_app_on_the_bed_pulls_its_image_with_its_docker_credential(
        docker_engine, mesos_prefix, tmp_path, caplog):
    """Through the API onto a real agent, from a registry that asks for a user: the
    app's credential opens it; no API answer, event or log line shows the secret; the
    app read back and sent again (changed, so its task is made again, pulling again)
    keeps it."""
    import logging
    import secrets as random
    from pathlib import Path
    from localcluster.registry import Registry
    from tests.bed.waiting import wait_until
    from tests.framework.marathon.app_bed import EventTap, bed
    caplog.set_level(logging.DEBUG)
    secret = "docker-credential-" + random.token_hex(8)
    with Registry(htpasswd={"robot": secret}) as registry:
        registry.push_auth = ("robot", secret)
        registry.push_image("team/app", "1", files={"hello.txt": b"pulled with credential\n"})
        with bed(docker_engine, tmp_path / "state", "--allow_docker_credential") as b:
            tap = EventTap(b.service)
            try:
                b.create({"id": "/pulled", "cmd": "cat /hello.txt; sleep 100", "cpus": 0.1,
                          "mem": 32, "container": {"type": "MESOS", "docker": {
                              "image": registry.reference("team/app", "1"),
                              "forcePullImage": True,
                              "credential": {"principal": "robot", "secret": secret}}}})
                first = b.running("/pulled")[0]
                wait_until(lambda: "pulled with credential" in (
                    b.sandbox(first["id"]) / "stdout").read_text(errors="replace"),
                    timeout=30, interval=0.2)
                shown = b.api.get("/v2/apps/pulled").json["app"]
                assert shown["container"]["docker"]["credential"] == {"principal": "robot"}
                status = ("tasks", "tasksStaged", "tasksRunning", "tasksHealthy",
                          "tasksUnhealthy", "deployments", "readinessCheckResults",
                          "lastTaskFailure", "version", "versionInfo")
                body = {k: v for k, v in shown.items() if k not in status}
                body["cmd"] = "cat /hello.txt; echo again; sleep 100"
                reply = b.api.put("/v2/apps/pulled", body)
                assert reply.status == 200, reply.json
                wait_until(lambda: [t for t in b.tasks("/pulled") if t["id"] != first["id"]
                                    and t["state"] == "TASK_RUNNING"], timeout=120, interval=0.5)
                second = [t for t in b.tasks("/pulled") if t["id"] != first["id"]][0]
                wait_until(lambda: "again" in (b.sandbox(second["id"]) / "stdout").read_text(
                    errors="replace"), timeout=30, interval=0.2)
                versions = b.api.get("/v2/apps/pulled/versions").json["versions"]
                answers = [b.api.get(path).json for path in (
                    "/v2/apps", "/v2/apps/pulled?embed=app.tasks", "/v2/groups?embed=group.apps",
                    "/v2/groups/?embed=group.apps&embed=group.apps.tasks", "/v2/queue",
                    "/v2/deployments", "/v2/tasks", "/v2/apps/pulled/versions",
                    *(f"/v2/apps/pulled/versions/{v}" for v in versions))]
                assert all(a is not None for a in answers)
                assert secret not in json.dumps(answers)
                assert len(versions) == 2
                assert tap.of("api_post_event") and secret not in json.dumps(tap.events)
                renamed = dict(body, container=dict(body["container"], docker=dict(
                    body["container"]["docker"], credential={"principal": "someone"})))
                reply = b.api.put("/v2/apps/pulled", renamed)
                assert reply.status == 422, reply.json
                assert "/container/docker/credential/secret" in json.dumps(reply.json)
                for path in Path(b.agent.run_dir).rglob("*"):     # nor the agent's files
                    try:
                        if path.is_file() and not path.is_symlink() and \
                                path.stat().st_size < 20 * 2**20:
                            assert secret.encode() not in path.read_bytes(), path
                    except FileNotFoundError:
                        continue
                b.delete("/pulled")
            finally:
                tap.close()
    assert caplog.records and secret not in caplog.text
