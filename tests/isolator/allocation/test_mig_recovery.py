"""A MIG container's device rules changed while the daemon was away are read back
from the kernel at its restart, as a whole GPU's are, never blindly rewritten: on
the real kernel (cgroup v1 devices whitelist, cgroup v2 eBPF program), with the
real daemon, a caps rule of its own removed and another instance's added behind
the daemon's back are noticed, logged and restored; a MIG device the kernel gives
the container no capability node of (an update cut short: the ledger is written
first) is let go, as a whole GPU the kernel does not allow is. While the daemon
runs, its drift check asks about every instance's caps nodes too."""
import signal
from pathlib import Path

import pytest

from isolator.cgroups import cgroups_v1, cgroups_v2
from isolator.errors import AgentError
from isolator.discovery import devices
from localcluster import fake_nvml, processes
from tests.bed import waiting
from tests.isolator.cgroups.test_mig_isolation import caps_paths
from tests.bed.cgroups import VERSION_MOUNTS, new_prober

MAJOR = fake_nvml.CAPS_MAJOR


def tamper(device_cgroup: str, path: Path, dev_dir: Path, caps) -> None:
    """Make the container's rules those of the parent GPU and exactly `caps`, as an
    operator's (or systemd's) hand would, without the daemon."""
    if device_cgroup == "v1":
        for line in (path / "devices.list").read_text().splitlines():
            if line.startswith(f"c {MAJOR}:"):
                cgroups_v1.write_rule(str(path), "devices.deny", line)
        for minor in caps:
            cgroups_v1.write_rule(str(path), "devices.allow", f"c {MAJOR}:{minor} rwm")
    else:
        rules = list(devices.BASE_WHITELIST) + [n.rule() for n in devices.control_devices(
            str(dev_dir))] + [devices.gpu_rule(0)] + [devices.Rule("c", MAJOR, m) for m in caps]
        cgroups_v2.apply(str(path), rules)


@pytest.mark.parametrize("device_cgroup", ["v1", "v2"])
def test_mig_caps_rules_changed_behind_the_daemons_back_are_noticed_and_restored(
        tmp_path, daemon_factory, probers, dev_dir, cgroups_root, device_cgroup):
    layout = fake_nvml.h200mig()
    flags = layout.mig_bed(tmp_path / "proc", dev_dir)
    agent = daemon_factory(layout, device_cgroup=device_cgroup, extra=flags)
    c = agent.client
    mine = c.prepare("mine", 1, mig_profile="1g.18gb").gpus[0]
    cut = c.prepare("cut", 1, mig_profile="3g.71gb").gpus[0]
    pm, pc = new_prober(probers), new_prober(probers)
    c.isolate("mine", pid=pm.pid)
    c.isolate("cut", pid=pc.pid)
    key_mine = c.info()["containers"]["mine"]["gpus"]
    caps = caps_paths(dev_dir, layout)
    own = {mine.gi_cap_minor, mine.ci_cap_minor}
    sibling = next(m for m in sorted(layout.caps_minors().values())
                   if m not in own | {cut.gi_cap_minor, cut.ci_cap_minor})
    agent.kill9()

    root = Path(VERSION_MOUNTS[device_cgroup], cgroups_root)
    tamper(device_cgroup, root / "mine", dev_dir, [mine.gi_cap_minor, sibling])
    tamper(device_cgroup, root / "cut", dev_dir, [])
    seen = pm.open(list(caps.values()))                      # the drift is real
    assert seen[str(caps[mine.ci_cap_minor])] == "EPERM"
    assert seen[str(caps[sibling])] == "ENXIO"

    agent = daemon_factory(layout, device_cgroup=device_cgroup, extra=flags,
                           work_dir=agent.work_dir)
    log = agent.log()
    assert (f"container mine: the kernel no longer lets it open its MIG capability nodes "
            f"{MAJOR}:{mine.ci_cap_minor}") in log
    assert (f"container mine: the kernel lets it open MIG capability nodes it does not "
            f"hold: {MAJOR}:{sibling} (another instance's)") in log
    assert (f"container mine: device rules drifted from the ledger in {device_cgroup} while "
            f"the daemon was away: restored") in log
    seen = pm.open(list(caps.values()))
    for minor, path in caps.items():                         # its own two again, no other
        assert seen[str(path)] == ("ENXIO" if minor in own else "EPERM"), minor
    info = agent.client.info()
    assert info["containers"]["mine"]["gpus"] == key_mine

    # "cut": the kernel gives it neither capability node: not its own there any more
    assert "container cut: ledger grants GPUs" in log and "keeping []" in log
    assert info["containers"]["cut"]["gpus"] == []
    seen = pc.open([dev_dir / "nvidia0", *caps.values()])  # nor the parent's node: none of its
    assert set(seen.values()) == {"EPERM"}, seen             # MIG devices is the container's
    assert (f"container cut: device rules drifted from the ledger in {device_cgroup} while "
            f"the daemon was away: restored (GPUs [])") in log
    assert "2 container(s)' drifted device rules restored" in log
    assert agent.client.prepare("again", 1, mig_profile="3g.71gb").gpus[0].uuid == cut.uuid
    for cid in ("mine", "cut", "again"):
        agent.client.cleanup(cid)


@pytest.mark.parametrize("device_cgroup", ["v1", "v2"])
def test_another_instances_caps_node_allowed_while_the_daemon_runs_is_taken_back(
        tmp_path, daemon_factory, probers, dev_dir, cgroups_root, device_cgroup):
    """The orphan sweep's rule audit asks the kernel about every MIG device's caps
    nodes: one of another instance's allowed to a running container is a drift."""
    layout = fake_nvml.h200mig()
    agent = daemon_factory(layout, device_cgroup=device_cgroup,
                           extra=["--reconcile_interval", "0.5",
                                  *layout.mig_bed(tmp_path / "proc", dev_dir)])
    mine = agent.client.prepare("mine", 1, mig_profile="1g.18gb").gpus[0]
    p = new_prober(probers)
    agent.client.isolate("mine", pid=p.pid)
    own = [mine.gi_cap_minor, mine.ci_cap_minor]
    sibling = next(m for m in sorted(layout.caps_minors().values()) if m not in own)
    caps = caps_paths(dev_dir, layout)
    processes.freeze(agent.proc.pid, "agent daemon")        # no repair while we look
    tamper(device_cgroup, Path(VERSION_MOUNTS[device_cgroup], cgroups_root, "mine"), dev_dir,
           own + [sibling])
    assert p.open([caps[sibling]])[str(caps[sibling])] == "ENXIO"     # the drift is real
    agent.proc.send_signal(signal.SIGCONT)
    waiting.wait_until(lambda: p.open([caps[sibling]])[str(caps[sibling])] == "EPERM",
                       timeout=15, what="the sibling's caps node denied again")
    assert f"device rules drifted from the ledger in {device_cgroup}: restored" in agent.log()
    seen = p.open(list(caps.values()))
    for minor, path in caps.items():
        assert seen[str(path)] == ("ENXIO" if minor in own else "EPERM"), minor
    agent.client.cleanup("mine")


def test_a_mig_grow_cut_short_by_a_crash_ends_on_the_smaller_side(
        tmp_path, daemon_factory, probers, dev_dir):
    """update (1 -> 2 MIG devices) records the grow, then the daemon dies before the
    kernel gives the new device: after the restart the container keeps the device
    the kernel gives it, the other is free, as with whole GPUs."""
    layout = fake_nvml.h200mig()
    flags = layout.mig_bed(tmp_path / "proc", dev_dir)
    agent = daemon_factory(layout, extra=flags,
                           env={"MESOS_GPU_CRASH_AT": "update:after_ledger@victim"})
    first = agent.client.prepare("victim", 1, mig_profile="1g.18gb").gpus[0]
    p = new_prober(probers)
    agent.client.isolate("victim", pid=p.pid)
    key = agent.client.info()["containers"]["victim"]["gpus"]
    with pytest.raises(AgentError):
        agent.client.update("victim", 2)                 # the daemon dies mid-request
    assert agent.proc.wait(10) == -signal.SIGKILL
    agent = daemon_factory(layout, extra=flags, work_dir=agent.work_dir)
    info = agent.client.info()
    assert info["containers"]["victim"]["gpus"] == key
    assert "container victim: ledger grants GPUs" in agent.log()
    assert "drifted" not in agent.log()                  # nothing to restore: no drift
    seen = p.open(list(caps_paths(dev_dir, layout).values()))
    own = {first.gi_cap_minor, first.ci_cap_minor}
    for minor, path in caps_paths(dev_dir, layout).items():
        assert seen[str(path)] == ("ENXIO" if minor in own else "EPERM"), minor
    two = agent.client.prepare("two", 2, mig_profile="1g.18gb")   # the other two are free
    assert first.uuid not in {g.uuid for g in two.gpus}
    for cid in ("victim", "two"):
        agent.client.cleanup(cid)
