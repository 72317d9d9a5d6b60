"""Several `mesos-gpu framework` instances on one real ZooKeeper and one real
Mesos cluster (in-process services): any instance answers the API (the others
forward to the leader with Marathon's X-Marathon-Leader header), /v2/info and
/v2/leader tell the truth everywhere, DELETE /v2/leader on any instance makes
the leader abdicate and the next one take over as the same framework with the
same task, /v2/events streams on every instance, a proxying loop is refused,
and a leader cut off from ZooKeeper stops acting, steps down and rejoins."""
import json
import socket
import threading

import pytest

from common.errors import UserError
from framework.state import zk_codec
from framework.process.framework_process import FrameworkProcess
from tests.bed.ha_services import AUTH, SESSION_MS, api, ha_args, leader_of, running
from tests.bed.waiting import wait_until
from tests.bed.http_client import Client

class Events:
    """An SSE client of one instance, collecting event types in a thread."""

    def __init__(self, service) -> None:
        host, port = service.http.server_address[:2]
        self.sock = socket.create_connection((host, port), timeout=30)
        self.sock.sendall(f"GET /v2/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n"
                          f"Authorization: {AUTH['Authorization']}\r\n\r\n".encode())
        self.events = []
        threading.Thread(target=self._read, daemon=True).start()
        wait_until(lambda: "event_stream_attached" in self.types(), 10,     # subscribed
                   interval=0.02)

    def _read(self) -> None:
        buffer = b""
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return
                buffer += data
                while b"\n\n" in buffer:
                    frame, buffer = buffer.split(b"\n\n", 1)
                    for line in frame.split(b"\n"):
                        if line.startswith(b"data:"):
                            self.events.append(json.loads(line[5:]))
        except OSError:
            return

    def types(self):
        return [e["eventType"] for e in self.events]

    def close(self) -> None:
        self.sock.close()


def test_any_instance_answers_and_the_leader_hands_over_on_request(instances, cluster):
    services = instances(3)
    leader = leader_of(services)
    others = [s for s in services if s is not leader]
    address = leader.http.url[len("http://"):]

    infos = [api(s).get("/v2/info").json for s in services]
    assert [i["elected"] for i in infos].count(True) == 1
    assert {i["leader"] for i in infos} == {address}
    assert {i["marathon_config"]["ha"] for i in infos} == {True}
    assert {i["zookeeper_config"]["zk"] for i in infos} == {str(leader.zk.url)}
    assert {i["zookeeper_config"]["zk_session_timeout"] for i in infos} == {SESSION_MS}
    framework_id = wait_until(lambda: leader.scheduler.framework_id, 20)
    assert {api(s).get("/v2/info").json["frameworkId"] for s in services} == {framework_id}
    for service in services:
        assert api(service).get("/v2/leader").json == {"leader": address}

    # the others relay the leader's event stream (from a moment after they start)
    wait_until(lambda: all(s.relay.source == address for s in others), 10, interval=0.05)
    stream = Events(others[1])
    try:
        created = api(others[0]).post("/v2/apps", {"id": "/ha/sleeper", "cmd": "sleep 600",
                                                   "cpus": 0.1, "mem": 16})
        assert created.status == 201, created.json
        assert created.headers["x-marathon-leader"] == f"http://{address}"
        assert created.headers["location"]
        tasks = wait_until(lambda: running(others[1], "/ha/sleeper"), 60)
        # every instance shows the same apps and tasks; the leader marks its answers too
        for service in services:
            reply = api(service).get("/v2/apps")
            assert [a["id"] for a in reply.json["apps"]] == ["/ha/sleeper"]
            assert reply.headers["x-marathon-leader"] == f"http://{address}"
        # the event stream of an instance that does not lead carries the leader's events
        wait_until(lambda: {"api_post_event", "deployment_info", "status_update_event"}
                   <= set(stream.types()), 30)
        # its own stream's attachment only: the relays' attachments stay on the leader
        assert stream.types().count("event_stream_attached") == 1

        # DELETE /v2/leader on an instance that does not lead: the leader abdicates
        abdicated = api(others[0]).delete("/v2/leader")
        assert (abdicated.status, abdicated.json) == (200, {"message": "Leadership abdicated"})
        second = leader_of(others, timeout=30)
        assert second.store.framework_id() == framework_id
        wait_until(lambda: second.scheduler.wait_subscribed(0.1), 30)
        again = wait_until(lambda: running(second, "/ha/sleeper"), 30)
        assert [t["id"] for t in again] == [t["id"] for t in tasks]
        assert not leader.leadership.is_leader() and leader.api is None
        # the instance that stepped down counts no tasks of its own any more (its
        # /metrics is its own, not the leader's); the leader counts the one task
        gauges = api(leader).get("/metrics").json["gauges"]
        assert gauges["mesos_gpu.tasks.running.gauge"]["value"] == 0
        assert gauges["mesos_gpu.offers.received.gauge"]["value"] == 0
        assert gauges["marathon.instances.running.gauge"]["value"] == 0
        wait_until(lambda: api(second).get("/metrics").json["gauges"]
                   ["mesos_gpu.tasks.running.gauge"]["value"] == 1, 10, interval=0.1)
        new_address = second.http.url[len("http://"):]
        wait_until(lambda: api(leader).get("/v2/leader").json == {"leader": new_address}, 10)
        # the old leader forwards now; the stream still on its instance sees new events
        scaled = api(leader).put("/v2/apps/ha/sleeper", {"instances": 2})
        assert scaled.status == 200 and scaled.headers["x-marathon-leader"] == f"http://{new_address}"
        wait_until(lambda: len(running(others[0], "/ha/sleeper") or []) == 2, 60)
        seen = len(stream.events)
        wait_until(lambda: any(e["eventType"] == "status_update_event"
                             for e in stream.events[seen - 5:]), 30)
        frameworks = [f for f in cluster.state()["frameworks"] if f["id"] == framework_id]
        assert len(frameworks) == 1 and frameworks[0]["active"]
        assert len([t for t in frameworks[0]["tasks"] if t["state"] == "TASK_RUNNING"]) == 2
    finally:
        stream.close()
    assert api(second).delete("/v2/apps/ha/sleeper").status == 200


def test_a_proxying_loop_and_no_leader_are_answered_as_marathon_does(instances):
    services = instances(2)
    leader = leader_of(services)
    other = next(s for s in services if s is not leader)
    me = other.http.url[len("http://"):]
    looped = api(other).get("/v2/apps", headers={"Via": f"1.1 {me}"})
    assert looped.status == 502 and "Detected proxying loop" in looped.json["message"]
    # a wrong password is refused where the client is, and by the leader too
    refused = Client(other.http.url, {"Authorization": "Basic eDp5"}).get("/v2/apps")
    assert refused.status == 401
    # forwarded requests keep the client's method, query and body
    bad = api(other).post("/v2/apps?force=true", {"id": "/Bad_Id"})
    assert bad.status == 422 and bad.headers["x-marathon-leader"]


def test_a_leader_cut_off_from_zookeeper_stops_acting_steps_down_and_rejoins(
        instances, zookeeper, cluster):
    services = instances(2)
    leader = leader_of(services)
    assert api(leader).post("/v2/apps", {"id": "/cut", "cmd": "sleep 600", "cpus": 0.1,
                                         "mem": 16}).status == 201
    task_ids = [t["id"] for t in wait_until(lambda: running(leader, "/cut"), 60)]
    framework_id = leader.scheduler.framework_id
    zookeeper.pause()
    try:
        wait_until(lambda: not leader.leadership.is_leader(), SESSION_MS / 1000, interval=0.02)
        refused = api(leader).post("/v2/apps", {"id": "/while-cut", "cmd": "sleep 1",
                                                "cpus": 0.1, "mem": 16})
        assert refused.status == 503, refused.json
        # stepped down: the API first, then the instance keeper and scheduler stop, the state is dropped
        wait_until(lambda: leader.api is None and leader.scheduler is None, 10, interval=0.05)
        assert leader.instance_keeper is None and leader.group_manager is None
    finally:
        zookeeper.resume()
    back = leader_of(services, timeout=30)
    again = wait_until(lambda: running(back, "/cut"), 30)
    assert [t["id"] for t in again] == task_ids
    assert back.store.framework_id() == framework_id
    assert api(back).get("/v2/apps/while-cut").status == 404
    assert api(back).delete("/v2/apps/cut").status == 200


def test_zookeeper_sigkilled_and_restarted_leaves_one_leader_and_the_state(
        instances, zookeeper):
    services = instances(2)
    leader = leader_of(services)
    assert api(leader).post("/v2/apps", {"id": "/zk-crash", "cmd": "sleep 600", "cpus": 0.1,
                                         "mem": 16}).status == 201
    task_ids = [t["id"] for t in wait_until(lambda: running(leader, "/zk-crash"), 60)]
    zookeeper.crash()
    zookeeper.restart()               # same data; clients reconnect within their sessions
    back = leader_of(services, timeout=30)
    wait_until(lambda: [s.leadership.is_leader() for s in services].count(True) == 1, 10,
               interval=0.05)
    assert [t["id"] for t in wait_until(lambda: running(back, "/zk-crash"), 30)] == task_ids
    other = next(s for s in services if s is not back)
    written = api(other).post("/v2/apps", {"id": "/after-zk-crash", "cmd": "sleep 1",
                                           "cpus": 0.1, "mem": 16, "instances": 0})
    assert written.status == 201, written.json
    assert api(back).delete("/v2/apps/zk-crash").status == 200


def test_every_instance_registers_the_framework_with_the_same_failover_timeout(
        instances, zookeeper, cluster):
    services = instances(1, "--failover_timeout", "4321")
    first = leader_of(services)
    framework_id = wait_until(lambda: first.scheduler.framework_id, 20)

    def master_says():
        frameworks = [f for f in cluster.state()["frameworks"] if f["id"] == framework_id]
        return frameworks[0]["failover_timeout"] if frameworks and frameworks[0]["active"] \
            else None
    assert wait_until(master_says, 20) == 4321
    assert api(first).get("/v2/info").json["marathon_config"]["failover_timeout"] == 4321
    # a second instance with another value is refused while the first leads: it
    # would re-register the framework with its own when it takes over
    with pytest.raises(UserError) as refused:
        FrameworkProcess(ha_args(cluster.address, zookeeper.url("/fw"),
                                 "--failover_timeout", "60"))
    assert "--failover_timeout 60" in str(refused.value) and "4321 s" in str(refused.value)
    instances(1, "--failover_timeout", "4321")
    second = next(s for s in services if s is not first)
    assert api(second).delete("/v2/leader").status == 200
    assert leader_of([second], timeout=30) is second
    wait_until(lambda: second.scheduler.wait_subscribed(0.1), 30)
    assert second.store.framework_id() == framework_id
    assert wait_until(master_says, 20) == 4321
    # changed as the refusal says: all instances stopped, then started with the new one
    for service in list(services):
        service.stop()
        services.remove(service)
    third = leader_of(instances(1, "--failover_timeout", "600"))
    wait_until(lambda: third.scheduler.wait_subscribed(0.1), 30)
    assert third.store.framework_id() == framework_id
    assert wait_until(lambda: master_says() == 600 or None, 20)
    # a stored value that is no number of seconds is named, not guessed at
    node = "/fw/state/records/framework/failover_timeout"
    third.ha.client.set(node, zk_codec.encode('{"seconds": "a week"}', 1, 1 << 20))
    with pytest.raises(UserError) as corrupt:
        FrameworkProcess(ha_args(cluster.address, zookeeper.url("/fw"),
                                 "--failover_timeout", "600"))
    assert f"{node} is corrupt: it holds no failover timeout" in str(corrupt.value), corrupt.value
