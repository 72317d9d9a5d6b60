"""The daemon killed with SIGKILL (mid-operation, at each crash point) and
restarted: live containers keep their GPUs and their kernel rules, ended ones
stay their living owner's until its cleanup, those of a dead owner give them
back, no GPU is ever open to two live containers, none is lost."""
import os
import signal
from pathlib import Path

import pytest

from isolator.errors import AgentError
from tests.bed.agent_daemon import minors_of
from tests.bed.cgroups import VERSION_MOUNTS, new_prober, only, open_gpus


def _restart(agent, daemon_factory, **kw):
    agent.kill9()
    return daemon_factory(agent.layout, work_dir=agent.work_dir, **kw)


def _assert_consistent(agent, probes, dev_dir):
    """Each live container's probe opens exactly the GPUs the daemon says it holds,
    no GPU is held twice, and free + held = managed."""
    info = agent.client.info()
    held = [m for c in info["containers"].values() for m in c["gpus"]]
    assert len(held) == len(set(held))
    assert sorted(held + info["free"]) == info["managed"]
    for cid, prober in probes.items():
        assert open_gpus(prober, dev_dir) == only(info["containers"][cid]["gpus"]), cid


@pytest.mark.parametrize("device_cgroup", ["v1", "v2"])
def test_sigkill_then_restart_keeps_live_and_ended_until_cleanup(
        daemon_factory, probers, dev_dir, device_cgroup):
    agent = daemon_factory("v100x8", device_cgroup=device_cgroup)
    c = agent.client
    live, ended = new_prober(probers), new_prober(probers)
    a = c.prepare("live", 2)
    c.isolate("live", pid=live.pid)
    b = c.prepare("ended", 3)
    c.isolate("ended", pid=ended.pid)
    pending = c.prepare("pending", 1)                  # prepared, not isolated yet
    ended.close()                  # its task exits; its owner (this test) cleans up later
    agent = _restart(agent, daemon_factory, device_cgroup=device_cgroup)
    assert ("ledger recovered: 3 containers, 6 GPUs; 1 ended container(s) kept until their "
            "living owner's cleanup") in agent.log()
    info = agent.client.info()
    assert info["containers"]["live"]["gpus"] == minors_of(a)
    assert info["containers"]["pending"]["gpus"] == minors_of(pending)
    assert info["containers"]["ended"]["gpus"] == minors_of(b)     # its owner still holds it
    assert not set(minors_of(b)) & set(info["free"])
    assert open_gpus(live, dev_dir) == only(minors_of(a))
    # the pending container can still be isolated after the restart
    p = new_prober(probers)
    agent.client.isolate("pending", pid=p.pid)
    _assert_consistent(agent, {"live": live, "pending": p}, dev_dir)
    # the owner's cleanup gives the ended one's GPUs back
    assert sorted(agent.client.cleanup("ended").released) == sorted(minors_of(b))
    assert set(minors_of(b)) <= set(agent.client.info()["free"])
    assert not any(Path(m, agent.args[5], "ended").exists() for m in VERSION_MOUNTS.values())


@pytest.mark.parametrize("point", ["prepare:after_ledger", "isolate:before_move",
                                   "isolate:after_move",
                                   "update:after_ledger", "update:after_kernel",
                                   "cleanup:after_kernel"])
def test_crash_at_each_point_recovers_consistently(daemon_factory, probers, dev_dir, point):
    env = {"MESOS_GPU_CRASH_AT": f"{point}@victim"}
    agent = daemon_factory("v100x8", env=env)
    c = agent.client
    other = new_prober(probers)
    c.prepare("other", 2)
    c.isolate("other", pid=other.pid)
    victim = new_prober(probers)
    op, kind = point.split(":")
    with pytest.raises(AgentError) as err:         # the daemon dies mid-request
        c.prepare("victim", 2)
        c.isolate("victim", pid=victim.pid)
        if op == "update":
            c.update("victim", 4 if kind == "after_ledger" else 1)
        if op == "cleanup":
            victim.close()
            c.cleanup("victim")
    assert err.value.status == 503
    assert agent.proc.wait(10) == -signal.SIGKILL
    agent = _restart(agent, daemon_factory)
    probes = {"other": other}
    info = agent.client.info()
    assert "victim" in info["containers"]        # its owner (this test) lives: still its
    if info["containers"]["victim"]["state"] == "isolated" and victim.alive():
        probes["victim"] = victim
    _assert_consistent(agent, probes, dev_dir)
    if op == "prepare":                     # the answer was lost, the record was not
        assert info["containers"]["victim"]["state"] == "prepared"
    if point == "isolate:before_move":      # the half-made cgroup is gone: isolate anew
        assert info["containers"]["victim"]["state"] == "prepared"
        assert not any(Path(m, agent.args[5], "victim").exists()
                       for m in VERSION_MOUNTS.values())
    if op == "isolate":                     # the executor asks the same isolate again
        agent.client.isolate("victim", pid=victim.pid)
        assert agent.client.info()["containers"]["victim"]["placed"]["pid"] == victim.pid
        _assert_consistent(agent, {**probes, "victim": victim}, dev_dir)
    if op == "cleanup":                     # and the same cleanup again
        agent.client.cleanup("victim")
        assert "victim" not in agent.client.info()["containers"]
    if point == "update:after_kernel":      # shrink applied in the kernel, not in the ledger
        assert len(info["containers"]["victim"]["gpus"]) == 1
        assert "narrowed to what the kernel allows" in agent.log()
    if point == "update:after_ledger":      # grow recorded, kernel not yet: ends smaller
        assert len(info["containers"]["victim"]["gpus"]) == 2


def test_random_sigkill_during_load_never_double_grants(daemon_factory, probers, dev_dir):
    """Kill the daemon while executors hammer it, three times over."""
    import threading
    agent = daemon_factory("v100x8")
    for round_ in range(3):
        stop = threading.Event()
        made = []

        def worker(w):
            i = 0
            while not stop.is_set():
                cid = f"r{round_}-w{w}-{i}"
                i += 1
                try:
                    agent.client.prepare(cid, 1 + i % 2)
                    p = new_prober(probers)
                    made.append((cid, p))
                    agent.client.isolate(cid, pid=p.pid)
                    if i % 3 == 0:
                        agent.client.cleanup(cid)
                except AgentError:
                    if i % 5 == 0:
                        stop.wait(0.01)
        threads = [threading.Thread(target=worker, args=(w,)) for w in range(3)]
        for t in threads:
            t.start()
        stop.wait(0.3 + 0.2 * round_)
        agent.kill9()
        stop.set()
        for t in threads:
            t.join()
        agent = daemon_factory(agent.layout, work_dir=agent.work_dir)
        info = agent.client.info()
        live = {cid: p for cid, p in made if cid in info["containers"]
                and info["containers"][cid]["state"] == "isolated"}
        _assert_consistent(agent, live, dev_dir)
        for cid in list(info["containers"]):
            agent.client.cleanup(cid)


def test_ledger_and_kernel_disagree_kernel_wins_on_the_safe_side(
        daemon_factory, probers, dev_dir, cgroups_root):
    """Someone widened a container's v1 whitelist behind our back: recovery
    narrows it back to what the ledger grants."""
    agent = daemon_factory("v100x8")
    a = agent.client.prepare("c", 1)
    p = new_prober(probers)
    agent.client.isolate("c", pid=p.pid)
    agent.kill9()
    allow = Path(VERSION_MOUNTS["v1"], cgroups_root, "c", "devices.allow")
    allow.write_text("c 195:* rwm")
    assert open_gpus(p, dev_dir) == only(range(8))
    agent = daemon_factory(agent.layout, work_dir=agent.work_dir)
    assert open_gpus(p, dev_dir) == only(minors_of(a))


def test_unrecorded_cgroup_with_processes_loses_every_gpu(
        daemon_factory, probers, dev_dir, cgroups_root):
    agent = daemon_factory("v100x8")
    agent.kill9()
    rogue = Path(VERSION_MOUNTS["v1"], cgroups_root, "rogue")
    rogue.mkdir(parents=True)
    p = new_prober(probers)
    (rogue / "cgroup.procs").write_text(str(p.pid))
    empty = Path(VERSION_MOUNTS["v1"], cgroups_root, "empty")
    empty.mkdir()
    agent = daemon_factory(agent.layout, work_dir=agent.work_dir)
    assert open_gpus(p, dev_dir) == only([])
    assert not empty.exists()
    assert "2 unrecorded cgroup(s) stripped of GPUs" in agent.log()


def test_cgroup_vanished_under_a_live_daemon(daemon_factory, probers, dev_dir, cgroups_root):
    agent = daemon_factory("v100x8")
    c = agent.client
    c.prepare("gone", 2)
    p = new_prober(probers)
    c.isolate("gone", pid=p.pid)
    p.close()
    os.rmdir(Path(VERSION_MOUNTS["v1"], cgroups_root, "gone"))
    with pytest.raises(AgentError) as e:
        c.update("gone", 3)
    assert e.value.status == 410 and "vanished" in str(e.value)
    assert len(c.info()["containers"]["gone"]["gpus"]) == 2      # nothing half-done
    assert len(c.info()["free"]) == 6
    assert list(c.cleanup("gone").released)
    assert len(c.info()["free"]) == 8
