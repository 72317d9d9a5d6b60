"""--mesos_user, Marathon's framework-wide task user, on the real bed
(tests/framework/marathon/app_bed.py: a real Mesos master and agent, the agent daemon, our
executor, Docker): a task without an image whose app names no user runs as it and
cannot read what only root reads on the host (/etc/shadow); an app's `user` wins;
a user the agent does not have fails the launch naming it; a task with an image
keeps its image's user."""
import pytest

from tests.bed.waiting import wait_until
from tests.framework.marathon import app_bed

DEFAULT_USER = "nobody"
# who the task runs as, and whether it can read the host's password hashes
PROBE = ("id -un > who; if cat /etc/shadow > /dev/null 2> shadow.err; then echo read > shadow; "
         "else echo refused > shadow; fi; exec sleep 600")
image = app_bed.image


@pytest.fixture(scope="module")
def bed(docker_engine, mesos_prefix, tmp_path_factory):
    with app_bed.bed(docker_engine, tmp_path_factory.mktemp("framework"),
                     "--mesos_user", DEFAULT_USER) as running:
        yield running


def _file(bed, app_id: str, name: str) -> str:
    sandbox = bed.sandbox(bed.running(app_id)[0]["id"])
    return wait_until(lambda: (sandbox / name).exists() and (sandbox / name).read_text(),
                      60, f"{name} in the sandbox of {app_id}").strip()


def test_tasks_without_an_image_run_as_the_default_user(bed, image):
    assert bed.api.get("/v2/info").json["marathon_config"]["mesos_user"] == DEFAULT_USER
    apps = {"/user/default": {}, "/user/own": {"user": "root"},
            "/user/image": {"container": {"type": "DOCKER", "docker": {"image": image}}}}
    for app_id, fields in apps.items():
        bed.create({"id": app_id, "cpus": 0.1, "mem": 32, "cmd": PROBE, **fields})
    try:
        assert _file(bed, "/user/default", "who") == DEFAULT_USER
        assert _file(bed, "/user/default", "shadow") == "refused"
        assert "Permission denied" in _file(bed, "/user/default", "shadow.err")
        assert _file(bed, "/user/own", "who") == "root"            # the app's user wins
        assert _file(bed, "/user/own", "shadow") == "read"
        assert _file(bed, "/user/image", "who") == "root"          # the image's own user
    finally:
        for app_id in apps:
            bed.delete(app_id)


def test_a_user_the_agent_does_not_have_fails_the_launch_naming_it(bed):
    bed.create({"id": "/user/missing", "cpus": 0.1, "mem": 32, "user": "no-such-user",
                "cmd": "exec sleep 600"})
    try:
        failure = wait_until(lambda: bed.app("/user/missing").get("lastTaskFailure"), 60,
                             "the launch to fail")
        assert failure["state"] == "TASK_FAILED", failure
        assert "user 'no-such-user' does not exist on this agent" in failure["message"]
    finally:
        bed.delete("/user/missing")
