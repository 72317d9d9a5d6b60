"""Health on a MIG GPU: an XID on the parent GPU makes every one of its MIG devices
unhealthy, stops the tasks on them (and only them: a task on the whole GPU beside it
keeps running), gives none of its devices to new work until the GPU heals, then
hands them out again. The real daemon, the fake NVML's XID event, real cgroups."""
import functools

import pytest

from isolator.client import AgentError
from localcluster import fake_nvml
from localcluster.fake_nvml.control import Control
from tests.bed import waiting
from tests.bed.cgroups import new_prober

FAST = ["--health_poll_interval", "0.2", "--health_quiet_period", "2",
        "--reconcile_interval", "0.5"]
wait_until = functools.partial(waiting.wait_until, interval=0.05)


@pytest.fixture
def mig_node(tmp_path, daemon_factory, dev_dir):
    layout = fake_nvml.h200mig()
    control = tmp_path / "nvml.control"
    agent = daemon_factory(layout, control=control,
                           extra=[*FAST, *layout.mig_bed(tmp_path / "proc", dev_dir)])
    agent.nvml = Control(control)
    return agent, layout


def test_an_xid_on_the_parent_stops_its_instances_tasks_only(mig_node, probers):
    agent, layout = mig_node
    c = agent.client
    tasks = {}
    for cid, profile in (("small", "1g.18gb"), ("big", "3g.71gb"), ("whole", "")):
        c.prepare(cid, 1, mig_profile=profile)
        tasks[cid] = new_prober(probers)
        c.isolate(cid, pid=tasks[cid].pid)
    agent.nvml.xid(0, 79)                           # GPU 0: the one in MIG mode
    wait_until(lambda: not tasks["small"].alive() and not tasks["big"].alive(), 5,
               "both tasks on GPU 0's MIG devices stopped")
    assert tasks["whole"].alive()                   # GPU 1 is another GPU
    for cid in ("small", "big"):
        stopped = c.cleanup(cid).stopped
        assert stopped is not None and stopped.xid == 79 and "XID 79" in stopped.message
    with pytest.raises(AgentError) as e:
        c.prepare("new", 1, mig_profile="1g.18gb")
    assert e.value.status == 409
    health = {g.minor: g.state for g in c.health().gpus}     # health is the GPU's
    assert health[0] == "unhealthy" and health[1] == "healthy"
    wait_until(lambda: _given(c), 15, "GPU 0's MIG devices given again once it healed")
    c.cleanup("whole")


def _given(c) -> bool:
    """A 1g.18gb device is given (then given back): GPU 0 is healthy again."""
    try:
        c.prepare("probe-heal", 1, mig_profile="1g.18gb")
    except AgentError:
        return False
    c.cleanup("probe-heal")
    return True


def test_a_mig_device_destroyed_under_the_daemon_is_withdrawn_never_reshaped(
        tmp_path, daemon_factory, dev_dir, probers):
    """The operator destroys two 1g.18gb instances while the daemon runs, one of them
    held by a task: the held one stays the task's (its process keeps running), neither
    is given again, the log says which and who holds it; the other devices go on."""
    layout = fake_nvml.h200mig()
    control = tmp_path / "nvml.control"
    agent = daemon_factory(layout, control=control,
                           extra=[*FAST, "--driver_check_interval", "0.2",
                                  *layout.mig_bed(tmp_path / "proc", dev_dir)])
    c = agent.client
    held = c.prepare("held", 1, mig_profile="1g.18gb")
    task = new_prober(probers)
    c.isolate("held", pid=task.pid)
    mine = held.gpus[0]
    devices = {d.uuid: d for d in layout.mig[0].devices}
    other = next(d for u, d in devices.items() if u != mine.uuid and d.profile_id == 19)
    control_of = Control(control)
    for d in (devices[mine.uuid], other):
        control_of.line(f"nomigdev 0 {d.gi} {d.ci}")
    wait_until(lambda: len(c.info()["withdrawn"]) == 2, 5, "both withdrawn")
    assert task.alive() and "held" in c.info()["containers"]
    log = agent.log()
    assert f"MIG device {mine.uuid} (1g.18gb, GPU 0 GI {devices[mine.uuid].gi} CI " \
           f"{devices[mine.uuid].ci}) is gone from NVML: the MIG layout changed; withdrawn: " \
           f"never given again; container held still holds it" in log
    assert f"MIG device {other.uuid}" in log
    # one 1g.18gb is left (three minus two gone), then none; the 3g.71gb is untouched
    last = c.prepare("last", 1, mig_profile="1g.18gb").gpus[0].uuid
    assert last not in (mine.uuid, other.uuid)
    with pytest.raises(AgentError) as e:
        c.prepare("none-left", 1, mig_profile="1g.18gb")
    assert e.value.status == 409
    assert c.prepare("big", 1, mig_profile="3g.71gb").gpus[0].profile == "3g.71gb"
    c.cleanup("held")
    with pytest.raises(AgentError):                 # given back, still never given again
        c.prepare("after", 1, mig_profile="1g.18gb")
    for cid in ("last", "big"):
        c.cleanup(cid)
