"""Every container has an owner, the process that prepared it (the kernel says who
called). The daemon stops a container whose owner is gone, gives back the GPUs of
one whose processes all exited without a cleanup, takes only the owner's own
processes into a container, kills only what it placed, and restores device rules
that drifted from the ledger -- all on the real kernel, with real processes."""
import json
import os
import signal
import subprocess
import functools
import sys
import time
from pathlib import Path

import pytest

from isolator.cgroups import bpf
from isolator.api import DOCKER
from isolator.client import AgentError
from isolator.cgroups.docker_devices import docker_options, labels
from localcluster import processes
from localcluster.mesos import LocalCluster
from tests.bed import waiting
from tests.bed.agent_daemon import alive
from tests.bed.cgroups import VERSION_MOUNTS, new_prober, only, open_gpus

FAST = ["--reconcile_interval", "0.5"]
# releases come at once (pidfd) or within a 0.5 s sweep: ask often
wait_until = functools.partial(waiting.wait_until, timeout=15.0, interval=0.05)

# A stand-in executor: it prepares a container, starts the task process (a sleep) and
# isolates it, says what it got, then lives until the test closes its stdin or kills it.
OWNER = r"""
import json, subprocess, sys
from isolator.client import AgentClient
sock, cid, gpus, ctype, isolate = sys.argv[1:6]
client = AgentClient(sock)
grant = client.prepare(cid, int(gpus), ctype)
child = None
if ctype == "MESOS":
    child = subprocess.Popen(["sleep", "300"])
    if isolate == "1":
        client.isolate(cid, pid=child.pid)
print(json.dumps({"gpus": [g.minor for g in grant.gpus], "child": child.pid if child else None,
                  "devices": [d.__dict__ for d in grant.devices]}), flush=True)
sys.stdin.read()
"""


class Owner:
    def __init__(self, sock: Path, cid: str, gpus: int, ctype: str = "MESOS",
                 isolate: bool = True, env=None) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", OWNER, str(sock), cid, str(gpus),
                                      ctype, "1" if isolate else "0"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})
        line = self.proc.stdout.readline()
        assert line, f"owner of {cid} failed (exit {self.proc.wait()})"
        self.said = json.loads(line)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def end(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)


def test_a_container_ends_with_its_owner(daemon_factory, cgroups_root):
    agent = daemon_factory("v100x8", extra=FAST)
    sock = agent.work_dir / "agent.sock"
    isolated = Owner(sock, "isolated", 2)
    pending = Owner(sock, "pending", 1, isolate=False)       # died between prepare and isolate
    stays = Owner(sock, "stays", 1)
    assert sorted(agent.client.info()["allocated"]) == sorted(
        isolated.said["gpus"] + pending.said["gpus"] + stays.said["gpus"])
    isolated.kill()
    pending.kill()
    started = time.monotonic()
    wait_until(lambda: set(agent.client.info()["containers"]) == {"stays"},
               what="the dead owners' containers released")
    took = time.monotonic() - started
    assert took < 5                                  # noticed at once (pidfd), not at an interval
    assert not alive(isolated.said["child"])         # its task process was killed
    assert not Path(VERSION_MOUNTS["v1"], cgroups_root, "isolated").exists()
    assert alive(stays.said["child"])                # the other owner's is untouched
    assert sorted(agent.client.info()["free"]) == sorted(
        set(range(8)) - set(stays.said["gpus"]))
    log = agent.log()
    assert "container isolated released GPUs" in log and "its owner, process" in log
    assert "is gone" in log
    assert 'mesos_gpu_containers_released_total{reason="owner_gone"} 2' in agent.client.metrics()
    stays.end()
    wait_until(lambda: agent.client.info()["containers"] == {}, what="the last one released")
    assert not alive(stays.said["child"])


def test_a_daemon_restart_keeps_live_owners_and_releases_dead_ones(daemon_factory):
    agent = daemon_factory("v100x8", extra=FAST)
    sock = agent.work_dir / "agent.sock"
    keep, lose = Owner(sock, "keep", 1), Owner(sock, "lose", 1)
    agent.kill9()
    lose.kill()                                       # dies while nobody watches
    agent = daemon_factory("v100x8", extra=FAST, work_dir=agent.work_dir)
    wait_until(lambda: set(agent.client.info()["containers"]) == {"keep"},
               what="the container of the owner that died meanwhile released")
    assert alive(keep.said["child"]) and not alive(lose.said["child"])
    keep.kill()
    wait_until(lambda: agent.client.info()["containers"] == {}, what="watched after restart")


def test_processes_that_exited_without_cleanup_give_their_gpus_back(daemon_factory, probers):
    agent = daemon_factory("k80", extra=FAST)
    c = agent.client
    p = new_prober(probers)
    c.prepare("quiet", 2)
    c.isolate("quiet", pid=p.pid)
    p.close()                                         # the task ended; the cleanup never came
    wait_until(lambda: c.info()["containers"] == {}, what="released")
    assert c.info()["free"] == [0, 1]
    assert "no process is left in its cgroups and no cleanup came" in agent.log()
    with pytest.raises(AgentError) as e:              # a late cleanup is harmless
        c.cleanup("quiet")
    assert e.value.status == 404


def test_only_the_owner_and_its_descendants(daemon_factory, probers):
    agent = daemon_factory("k80", extra=FAST)
    sock = agent.work_dir / "agent.sock"
    owner = Owner(sock, "theirs", 1, isolate=False)
    mine = new_prober(probers)                        # a child of the test, not of the owner
    with pytest.raises(AgentError) as e:
        agent.client.isolate("theirs", pid=mine.pid)
    assert e.value.status == 403 and "may not isolate it" in str(e.value)
    with pytest.raises(AgentError) as e:
        agent.client.update("theirs", 2)
    assert e.value.status == 403
    agent.client.prepare("own", 1)
    with pytest.raises(AgentError) as e:               # pid 1 is nobody's descendant
        agent.client.isolate("own", pid=1)
    assert e.value.status == 403 and "neither the caller" in str(e.value)
    assert agent.client.info()["containers"]["own"]["state"] == "prepared"
    owner.end()


def test_cleanup_kills_only_what_the_daemon_placed(daemon_factory, probers, cgroups_root):
    agent = daemon_factory("k80", extra=FAST)
    c = agent.client
    task = new_prober(probers)
    c.prepare("task", 1)
    c.isolate("task", pid=task.pid)
    stranger = subprocess.Popen(["sleep", "300"])     # put there by some other hand
    try:
        procs = Path(VERSION_MOUNTS["v1"], cgroups_root, "task", "cgroup.procs")
        procs.write_text(str(stranger.pid))
        assert stranger.pid in [int(x) for x in procs.read_text().split()]
        result = c.cleanup("task")
        assert result.killed == (task.pid,)
        assert alive(stranger.pid) and not task.alive()
        assert "was not placed there by this daemon: moved to" in agent.log()
        with open(f"/proc/{stranger.pid}/cgroup") as f:
            assert f"/{cgroups_root}/" not in f.read()
    finally:
        stranger.kill()
        stranger.wait()


@pytest.mark.parametrize("device_cgroup", ["v1", "v2"])
def test_drifted_device_rules_are_restored(daemon_factory, probers, dev_dir, cgroups_root,
                                           device_cgroup):
    agent = daemon_factory("v100x8", device_cgroup=device_cgroup, extra=FAST)
    c = agent.client
    p = new_prober(probers)
    mine = [g.minor for g in c.prepare("drift", 2).gpus]
    c.isolate("drift", pid=p.pid)
    assert open_gpus(p, dev_dir) == only(mine)
    path = Path(VERSION_MOUNTS[device_cgroup], cgroups_root, "drift")
    processes.freeze(agent.proc.pid, "agent daemon")            # no repair while we look at the drift
    if device_cgroup == "v1":                         # what a systemd daemon-reload may do
        (path / "devices.allow").write_text("a")
    else:                                             # the device program detached
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for prog_id in bpf.query(fd):
                from isolator.cgroups.cgroups_v2 import _detach_id
                _detach_id(fd, prog_id)
        finally:
            os.close(fd)
    assert open_gpus(p, dev_dir) == only(range(8))    # every GPU opens: the drift is real
    agent.proc.send_signal(signal.SIGCONT)
    wait_until(lambda: open_gpus(p, dev_dir) == only(mine), what="rules restored")
    assert f"device rules drifted from the ledger in {device_cgroup}: restored" in agent.log()
    assert f'mesos_gpu_device_rule_repairs_total{{where="{device_cgroup}"}} 1' in \
        agent.client.metrics()


def test_drift_in_a_docker_containers_devices_is_restored(daemon_factory, docker_engine,
                                                         busybox_image):
    agent = daemon_factory("k80", extra=FAST + ["--docker_socket", docker_engine.host])
    grant = agent.client.prepare("dk-drift", 1, container_type=DOCKER)
    mine = grant.gpus[0].minor
    container = docker_engine.client().containers.create(
        busybox_image(), ["sleep", "300"], labels=labels("dk-drift"), network_mode="none",
        **docker_options(grant))
    try:
        agent.client.isolate("dk-drift", docker_id=container.id)
        container.start()
        probe = f"cat /dev/nvidia{mine} 2>&1; true"

        def opens() -> str:
            return container.exec_run(["sh", "-c", probe]).output.decode()
        assert "No such device or address" in opens()           # allowed, no driver
        pid = container.attrs["State"]["Pid"] or docker_engine.client().api.inspect_container(
            container.id)["State"]["Pid"]
        from isolator.cgroups.docker_devices import v1_cgroup_of
        cgroup = Path(v1_cgroup_of(VERSION_MOUNTS["v1"], pid))
        processes.freeze(agent.proc.pid, "agent daemon")          # no repair while we look at the drift
        (cgroup / "devices.deny").write_text(f"c 195:{mine} rwm")
        assert "Operation not permitted" in opens()             # the drift is real
        agent.proc.send_signal(signal.SIGCONT)
        wait_until(lambda: "No such device or address" in opens(), what="restored")
        assert 'mesos_gpu_device_rule_repairs_total{where="docker"} 1' in \
            agent.client.metrics()
    finally:
        container.remove(force=True)


def test_a_daemon_killed_during_a_release_ends_consistent(daemon_factory, cgroups_root):
    env = {"MESOS_GPU_CRASH_AT": "release:after_stop@doomed"}
    agent = daemon_factory("v100x8", extra=FAST, env=env)
    sock = agent.work_dir / "agent.sock"
    doomed, other = Owner(sock, "doomed", 4), Owner(sock, "other", 2)
    doomed.kill()
    assert agent.proc.wait(15) == -signal.SIGKILL       # died mid-release
    agent = daemon_factory("v100x8", extra=FAST, work_dir=agent.work_dir)
    wait_until(lambda: set(agent.client.info()["containers"]) == {"other"}, what="recovered")
    info = agent.client.info()
    assert sorted(info["free"]) == sorted(set(range(8)) - set(other.said["gpus"]))
    assert not alive(doomed.said["child"]) and alive(other.said["child"])
    grabbed = agent.client.prepare("after", 6)              # every free GPU, none twice
    assert not set(g.minor for g in grabbed.gpus) & set(other.said["gpus"])
    other.end()


def test_a_container_the_mesos_agent_no_longer_runs_is_released(daemon_factory, mesos_prefix):
    """The owner's environment says which Mesos agent started it and in which Mesos
    container; when that agent (a real one) does not list the container, Mesos has
    destroyed the executor, and the daemon lets its container go."""
    agent = daemon_factory("k80", extra=FAST)
    with LocalCluster("cpus:1;mem:512") as cluster:
        env = {"MESOS_FRAMEWORK_ID": "fw-1", "MESOS_EXECUTOR_ID": "ex-1",
               "MESOS_AGENT_ENDPOINT": cluster.address,
               "MESOS_SLAVE_PID": f"slave(1)@{cluster.address}",
               "MESOS_DIRECTORY": "/tmp/slaves/S0/frameworks/fw-1/executors/ex-1/runs/"
                                  "0a6c2bd0-0000-4000-8000-000000000000"}
        orphan = Owner(agent.work_dir / "agent.sock", "orphan", 1, env=env)
        held = agent.client.info()["containers"]["orphan"]
        assert held["owner"]["mesos_container_id"] == "0a6c2bd0-0000-4000-8000-000000000000"
        assert held["owner"]["agent_endpoint"] == cluster.address
        wait_until(lambda: agent.client.info()["containers"] == {}, what="released")
        assert f"the Mesos agent at {cluster.address} no longer runs executor ex-1" in agent.log()
        assert not alive(orphan.said["child"])
        orphan.end()


def test_an_exited_docker_container_gives_its_gpu_back_and_stays_for_its_owner(
        daemon_factory, docker_engine, busybox_image):
    agent = daemon_factory("k80", extra=FAST + ["--docker_socket", docker_engine.host])
    grant = agent.client.prepare("dk-done", 1, container_type=DOCKER)
    container = docker_engine.client().containers.create(
        busybox_image(), ["true"], labels=labels("dk-done"), network_mode="none",
        **docker_options(grant))
    try:
        agent.client.isolate("dk-done", docker_id=container.id)
        container.start()
        assert container.wait(timeout=30)["StatusCode"] == 0
        wait_until(lambda: agent.client.info()["containers"] == {}, what="released")
        assert "its Docker container is exited and no cleanup came" in agent.log()
        container.reload()                 # still there: its owner reads the exit code
        assert container.status == "exited"
    finally:
        container.remove(force=True)
