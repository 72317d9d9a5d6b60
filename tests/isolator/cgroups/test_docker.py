"""Docker GPU containers on the real engine: the prepare answer as Docker device
options confines a container to its GPU, and recovery asks the engine which
labelled containers still live (dead ones give their GPUs back, a started one
whose isolate never came is adopted, an unreachable engine releases nothing)."""
import pytest

from isolator.client import AgentError
from isolator.api import CONTAINER_LABEL as LABEL
from isolator.api import DOCKER, Device, Grant
from isolator.cgroups.docker_devices import docker_options, labels
from tests.bed.agent_daemon import minors_of

SCRIPT = ("for m in 0 1; do cat /dev/nvidia$m 2>&1; done; "
          "mknod /tmp/n0 c 195 0; mknod /tmp/n1 c 195 1; cat /tmp/n0 2>&1; cat /tmp/n1 2>&1; "
          "cat /dev/nvidiactl 2>&1; true")


def _run(engine, image, cid, answer, command=("sleep", "300")):
    return engine.client().containers.run(image, list(command), detach=True, network_mode="none",
                                          labels=labels(cid), **docker_options(answer))


def test_docker_options_from_a_prepare_answer():
    answer = Grant("c1", DOCKER, devices=(Device("/tmp/x/nvidiactl", 195, 255),
                                          Device("/dev/nvidia3", 195, 3)))
    assert docker_options(answer) == {"devices": ["/tmp/x/nvidiactl:/dev/nvidiactl:rwm",
                                                  "/dev/nvidia3:/dev/nvidia3:rwm"]}
    assert labels("c1") == {LABEL: "c1"}


def test_container_opens_only_its_gpu(daemon_factory, docker_engine, busybox_image):
    agent = daemon_factory("k80", extra=["--docker_socket", docker_engine.host])
    answer = agent.client.prepare("dk-own", 1, container_type=DOCKER)
    mine = minors_of(answer)[0]
    other = 1 - mine
    c = _run(docker_engine, busybox_image(), "dk-own", answer, ("sh", "-c", SCRIPT))
    try:
        c.wait(timeout=60)
        out = c.logs().decode()
    finally:
        c.remove(force=True)
    lines = out.splitlines()
    assert f"cat: can't open '/dev/nvidia{mine}': No such device or address" in lines
    assert f"cat: can't open '/dev/nvidia{other}': No such file or directory" in lines
    assert f"cat: can't open '/tmp/n{mine}': No such device or address" in lines
    assert f"cat: can't open '/tmp/n{other}': Operation not permitted" in lines
    assert "cat: can't open '/dev/nvidiactl': No such device or address" in lines


def test_isolate_checks_the_docker_label(daemon_factory, docker_engine, busybox_image):
    agent = daemon_factory("k80", extra=["--docker_socket", docker_engine.host])
    answer = agent.client.prepare("dk-label", 1, container_type=DOCKER)
    stranger = _run(docker_engine, busybox_image(), "someone-else", answer)
    try:
        with pytest.raises(AgentError, match="its label mesos-gpu.container-id is 'someone-else'"):
            agent.client.isolate("dk-label", docker_id=stranger.id)
        with pytest.raises(AgentError, match="no such Docker container"):
            agent.client.isolate("dk-label", docker_id="0123456789ab")
        with pytest.raises(AgentError, match="'docker_id' must be"):
            agent.client.isolate("dk-label", docker_id="../x")
        assert agent.client.info()["containers"]["dk-label"]["state"] == "prepared"
    finally:
        stranger.remove(force=True)


def test_recovery_against_the_engine(daemon_factory, docker_engine, busybox_image):
    extra = ["--docker_socket", docker_engine.host]
    agent = daemon_factory("v100x8", extra=extra)
    c = agent.client
    image = busybox_image()
    started = {}
    for cid, n in (("dk-live", 2), ("dk-dead", 2), ("dk-adopt", 1)):
        answer = c.prepare(cid, n, container_type=DOCKER)
        started[cid] = (_run(docker_engine, image, cid, answer), minors_of(answer))
    c.isolate("dk-live", docker_id=started["dk-live"][0].id)
    c.isolate("dk-dead", docker_id=started["dk-dead"][0].id)
    # dk-adopt: its executor died between `docker run` and isolate
    waiting = c.prepare("dk-waiting", 1, container_type=DOCKER)       # not started yet
    try:
        with pytest.raises(AgentError, match="Docker cannot add or remove devices"):
            c.update("dk-live", 3)
        agent.kill9()
        started["dk-dead"][0].kill()
        agent = daemon_factory("v100x8", extra=extra, work_dir=agent.work_dir)
        # dk-dead ended, and its owner (this test) lives: still its, until its cleanup
        assert ("ledger recovered: 4 containers, 6 GPUs; 1 ended container(s) kept until "
                "their living owner's cleanup") in agent.log()
        info = agent.client.info()
        assert info["containers"]["dk-dead"]["gpus"] == started["dk-dead"][1]
        assert sorted(agent.client.cleanup("dk-dead").released) == started["dk-dead"][1]
        info = agent.client.info()
        assert info["containers"]["dk-live"]["gpus"] == started["dk-live"][1]
        assert info["containers"]["dk-adopt"]["docker_id"] == started["dk-adopt"][0].id
        assert info["containers"]["dk-adopt"]["state"] == "isolated"
        assert info["containers"]["dk-waiting"]["gpus"] == minors_of(waiting)
        assert info["containers"]["dk-waiting"]["state"] == "prepared"
        assert set(started["dk-dead"][1]) <= set(info["free"])

        # the engine does not answer: nothing is released, the operator is told
        agent.kill9()
        started["dk-live"][0].kill()
        blind = daemon_factory("v100x8", extra=["--docker_socket", "unix:///nonexistent.sock"],
                               work_dir=agent.work_dir)
        assert "keeping the GPUs of Docker containers until it answers" in blind.log()
        assert "3 Docker container(s) kept unverified" in blind.log()
        assert blind.client.info()["containers"]["dk-live"]["gpus"] == started["dk-live"][1]
        # once it answers again, the ended one waits for its owner's cleanup
        blind.kill9()
        agent = daemon_factory("v100x8", extra=extra, work_dir=agent.work_dir)
        assert "1 ended container(s) kept until their living owner's cleanup" in agent.log()
        assert list(agent.client.cleanup("dk-live").released) == started["dk-live"][1]
        assert list(agent.client.cleanup("dk-adopt").released) == started["dk-adopt"][1]
    finally:
        for container, _ in started.values():
            container.remove(force=True)
