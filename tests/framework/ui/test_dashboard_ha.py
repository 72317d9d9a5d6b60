"""The dashboard with several framework instances (`--zk`, on a real ZooKeeper
and Mesos master): any instance serves the page (those that do not lead
forward it to the leader), the nodes view answers through any of them with
the API's credentials only, and after the leader hands over, the new leader
serves both (its routes are built with its state)."""
from tests.bed.http_client import Client
from tests.bed.ha_services import api, leader_of
from tests.bed.waiting import wait_until


def test_any_instance_serves_the_dashboard_and_the_next_leader_too(instances):  # noqa: F811
    services = instances(2)
    leader = leader_of(services)
    other = next(s for s in services if s is not leader)
    for service in (leader, other):
        anonymous = Client(service.http.url)
        page = anonymous.get("/ui/")
        assert page.status == 200 and b"mesos-gpu" in page.raw, (page.status, page.raw[:200])
        assert anonymous.get("/v1/nodes").status == 401
        nodes = api(service).get("/v1/nodes")
        assert nodes.status == 200 and "nodes" in nodes.json
    assert api(other).get("/v1/nodes").headers["x-marathon-leader"] == leader.http.url

    assert api(other).call("DELETE", "/v2/leader").status == 200     # the leader abdicates
    wait_until(lambda: other.leadership.is_leader() and other.api is not None, 30, interval=0.05)
    for service in services:
        assert wait_until(lambda: api(service).get("/v1/nodes").status == 200, 30)
        assert Client(service.http.url).get("/ui/").status == 200
