"""Marathon's container.docker.pullConfig: a secret whose file the operator keeps
under --pull_config_dir; the API holds only its name and source, the task gets
the one credential for its image's registry."""
import base64
import json

import pytest

from framework.marathon.core import task_builder
from framework.marathon.state import app_model
from framework.http.security import DockerPolicy
from framework.http.validation import Violations

SECRET = "pull-secret-value"


def app_with(image="127.0.0.1:5000/team/tf:1", source="team/config.json", **extra):
    return {"id": "/a", "cmd": "true", "container": {
        "type": "MESOS", "docker": {"image": image, "pullConfig": {"secret": "pullConfigSecret"}}},
        "secrets": {"pullConfigSecret": {"source": source}}, **extra}


def read(body, directory):
    v = Violations()
    app = app_model.read_app(body, v, DockerPolicy(pull_config_dir=directory))
    return app, {path: errors for path, errors in v.details.items()}


@pytest.fixture
def directory(tmp_path):
    (tmp_path / "team").mkdir()
    auth = base64.b64encode(f"robot:{SECRET}".encode()).decode()
    (tmp_path / "team" / "config.json").write_text(json.dumps(
        {"auths": {"127.0.0.1:5000": {"auth": auth}}}))
    (tmp_path / "team" / "helper.json").write_text(json.dumps(
        {"credHelpers": {"127.0.0.1:5000": "ecr-login"}}))
    return str(tmp_path)


def test_a_pull_config_secret_gives_the_task_its_registrys_credential(directory):
    app, errors = read(app_with(), directory)
    assert not errors, errors
    assert app["secrets"] == {"pullConfigSecret": {"source": "team/config.json"}}
    assert app["container"]["docker"]["pullConfig"] == {"secret": "pullConfigSecret"}
    assert SECRET not in json.dumps(app)                  # the API holds the reference only
    versioned = dict(app, version="2026-01-01T00:00:00.000Z")
    spec = task_builder.task_spec(versioned, "a.1", pull_config_dir=directory)
    assert (spec.pull_credential.principal, spec.pull_credential.secret) == ("robot", SECRET)
    other = task_builder.task_spec(dict(versioned, container={"type": "MESOS", "docker": dict(
        app["container"]["docker"], image="127.0.0.1:6000/x:1")}), "a.2",
        pull_config_dir=directory)
    assert other.pull_credential is None                  # none for that registry: the agent's


@pytest.mark.parametrize("body,dir_given,path,words", [
    (app_with(), False, "/container/docker/pullConfig", "--pull_config_dir"),
    (app_with(source="../../etc/shadow"), True, "/container/docker/pullConfig", "leads out of"),
    (app_with(source="team/missing.json"), True, "/container/docker/pullConfig", "no such file"),
    (app_with(source="team/helper.json"), True, "/container/docker/pullConfig",
     "its credential helper in"),
    (app_with(env={"DB": {"secret": "pullConfigSecret"}}), True, "/env/DB", "secrets"),
    (dict(app_with(), secrets={"pullConfigSecret": {"source": "team/config.json"},
                               "other": {"source": "x"}}), True, "/secrets/other",
     "only container.docker.pullConfig may use a secret"),
])
def test_a_pull_config_that_cannot_work_is_refused_by_name(directory, body, dir_given, path,
                                                           words):
    _, errors = read(body, directory if dir_given else None)
    assert path in errors and any(words in e for e in errors[path]), errors


def test_an_app_on_the_bed_pulls_its_image_with_its_pull_config_secret(
        docker_engine, mesos_prefix, tmp_path):
    """Through the API onto a real agent: the image is in a registry that asks for
    a user the agent's own Docker config does not have; the app's pullConfig opens
    it; neither the app, its tasks nor the agent's files show the secret."""
    import secrets as random
    from pathlib import Path
    from localcluster.registry import Registry
    from tests.framework.marathon.app_bed import bed
    secret = "pull-config-" + random.token_hex(8)
    with Registry(htpasswd={"robot": secret}) as registry:
        registry.push_auth = ("robot", secret)
        registry.push_image("team/app", "1", files={"hello.txt": b"pulled with pullConfig\n"})
        directory = tmp_path / "pull-configs"
        (directory / "team").mkdir(parents=True)
        auth = base64.b64encode(f"robot:{secret}".encode()).decode()
        (directory / "team" / "config.json").write_text(json.dumps(
            {"auths": {registry.address: {"auth": auth}}}))
        with bed(docker_engine, tmp_path / "state", "--pull_config_dir", str(directory)) as b:
            b.create({"id": "/pulled", "cmd": "cat /hello.txt; sleep 100", "cpus": 0.1,
                      "mem": 32, "container": {"type": "MESOS", "docker": {
                          "image": registry.reference("team/app", "1"),
                          "pullConfig": {"secret": "pc"}}},
                      "secrets": {"pc": {"source": "team/config.json"}}})
            task = b.running("/pulled")[0]
            wait_until(lambda: "pulled with pullConfig" in
                       (b.sandbox(task["id"]) / "stdout").read_text(errors="replace"), 30)
            assert secret not in json.dumps(b.app("/pulled"))
            assert secret not in json.dumps(b.api.get("/v2/tasks").json)
            for path in Path(b.agent.run_dir).rglob("*"):
                try:
                    if path.is_file() and not path.is_symlink() and \
                            path.stat().st_size < 20 * 2**20:
                        assert secret.encode() not in path.read_bytes(), path
                except FileNotFoundError:
                    continue
            b.delete("/pulled")


def wait_until(condition, timeout):
    from tests.bed.waiting import wait_until as wait
    return wait(condition, timeout=timeout, interval=0.2)
