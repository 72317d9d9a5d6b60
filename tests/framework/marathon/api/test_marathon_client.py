"""An existing Marathon client works unchanged: marathon-python 0.13 (the
`marathon` package) builds its objects from every key we return, so a field
Marathon does not send would break it."""
import collections
import collections.abc

from marathon import MarathonClient, MarathonHttpError, NotFoundError
from marathon.models import MarathonApp, MarathonConstraint
from marathon.models.container import MarathonContainer, MarathonDockerContainer

import pytest

from tests.bed.waiting import wait_until

# marathon-python 0.13 (its last release) still uses collections.Iterable, gone
# since Python 3.10, when it encodes nested objects; give it the old name back.
# This fixes the client library on this Python, not anything on our side.
collections.Iterable = collections.abc.Iterable


def test_marathon_python_client_round_trip(start_framework, tmp_path):
    service = start_framework(tmp_path / "state")
    user, password = service.auth.credentials.split(":", 1)     # made in its state dir
    client = MarathonClient(service.http.url, username=user, password=password)
    assert client.ping().strip() in (b"pong", "pong", b'"pong"')
    info = client.get_info()
    assert info.framework_id == service.scheduler.framework_id

    gpu_app = MarathonApp(
        cmd="nvidia-smi -L && sleep 1000", cpus=0.1, mem=32, gpus=1, instances=1,
        constraints=[MarathonConstraint("gpu_type", "IS", "no_such_gpu")],   # waits in the queue
        container=MarathonContainer(type="DOCKER", docker=MarathonDockerContainer(image="cuda:12")),
        labels={"team": "vision"})
    created = client.create_app("/vision/train", gpu_app)
    assert created.id == "/vision/train" and created.gpus == 1
    assert created.container.type == "DOCKER" and created.container.docker.image == "cuda:12"

    listed = client.list_apps(embed_tasks=True, embed_counts=True)
    assert [a.id for a in listed] == ["/vision/train"]
    shown = client.get_app("/vision/train", embed_tasks=True)
    assert shown.instances == 1 and shown.tasks == [] and shown.labels == {"team": "vision"}
    deployments = client.list_deployments()
    assert deployments[0].affected_apps == ["/vision/train"]
    assert [q.app.id for q in client.list_queue()] == ["/vision/train"]
    assert client.list_tasks("/vision/train") == [] and client.list_tasks() == []

    with pytest.raises(MarathonHttpError) as locked:      # the deployment still runs
        client.scale_app("/vision/train", instances=0)
    assert locked.value.status_code == 409
    scaled = client.scale_app("/vision/train", instances=0, force=True)
    assert set(scaled) == {"version", "deploymentId"}
    wait_until(lambda: client.list_deployments() == [])
    assert client.get_app("/vision/train").instances == 0

    restarted = client.restart_app("/vision/train")
    assert "deploymentId" in restarted
    with pytest.raises(NotFoundError):
        client.kill_task("/vision/train", "vision_train.nope")
    with pytest.raises(MarathonHttpError) as invalid:
        client.create_app("/bad", MarathonApp(cmd="x", gpus=-1))
    assert invalid.value.status_code == 422
    wait_until(lambda: client.list_deployments() == [])
    assert "deploymentId" in client.delete_app("/vision/train")
    with pytest.raises(NotFoundError):
        client.get_app("/vision/train")


def test_marathon_python_client_round_trips_groups(start_framework, tmp_path):
    """create_group, get_group, list_groups, update_group, scale_group,
    rollback_group, delete_group, with the client's own models."""
    from marathon.models.group import MarathonGroup
    service = start_framework(tmp_path / "state")
    user, password = service.auth.credentials.split(":", 1)
    client = MarathonClient(service.http.url, username=user, password=password)
    waiting = [MarathonConstraint("gpu_type", "IS", "no_such_gpu")]
    group = MarathonGroup(id="/ml", apps=[
        MarathonApp(id="/ml/feature-store", cmd="sleep 1000", cpus=0.1, mem=32, instances=1,
                    constraints=waiting),
        MarathonApp(id="/ml/trainer", cmd="sleep 1000", cpus=0.1, mem=32, gpus=1, instances=2,
                    constraints=waiting, dependencies=["/ml/feature-store"])],
        groups=[MarathonGroup(id="/ml/serving", apps=[
            MarathonApp(id="/ml/serving/api", cmd="sleep 1000", cpus=0.1, mem=32, instances=1,
                        constraints=waiting)])])
    created = client.create_group(group)
    assert set(created) == {"version", "deploymentId"}

    got = client.get_group("/ml")
    assert isinstance(got, MarathonGroup) and got.id == "/ml"
    assert [a.id for a in got.apps] == ["/ml/feature-store", "/ml/trainer"]
    assert got.apps[1].gpus == 2 - 1 and got.apps[1].dependencies == ["/ml/feature-store"]
    assert [g.id for g in got.groups] == ["/ml/serving"]
    assert got.groups[0].apps[0].id == "/ml/serving/api"
    assert [g.id for g in client.list_groups()] == ["/ml"]
    first_version = got.version

    with pytest.raises(MarathonHttpError) as locked:   # the create's deployment still runs
        client.scale_group("/ml", 2)
    assert locked.value.status_code == 409
    client.delete_deployment(created["deploymentId"], force=True)
    scaled = client.scale_group("/ml", 2)
    assert "deploymentId" in scaled
    assert [a.instances for a in client.get_group("/ml").apps] == [2, 4]
    assert client.get_group("/ml").groups[0].apps[0].instances == 2

    stale = client.get_group("/ml")
    stale.groups[0].version = first_version            # a subgroup read before the scaling
    with pytest.raises(MarathonHttpError) as refused:
        client.update_group("/ml", stale, force=True)
    assert "read the group again" in str(refused.value.error_details)
    got = client.get_group("/ml")
    got.apps = got.apps[:1]                            # drop the trainer
    updated = client.update_group("/ml", got, force=True)    # subgroups carry their version
    assert "deploymentId" in updated
    assert [a.id for a in client.get_group("/ml").apps] == ["/ml/feature-store"]
    with pytest.raises(NotFoundError):
        client.get_app("/ml/trainer")

    rolled = client.rollback_group("/ml", first_version, force=True)
    assert "deploymentId" in rolled
    back = client.get_group("/ml")
    assert [(a.id, a.instances) for a in back.apps] == [("/ml/feature-store", 1), ("/ml/trainer", 2)]

    assert "deploymentId" in client.delete_group("/ml", force=True)
    with pytest.raises(NotFoundError):
        client.get_group("/ml")
    assert client.list_apps() == []
