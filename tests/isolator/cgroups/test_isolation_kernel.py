"""Device isolation on the real kernel, through the real daemon: a process in a
container's cgroup opens its own GPU nodes (ENXIO: allowed, no driver here) and
gets EPERM on every other GPU node, with cgroup v1, cgroup v2 (eBPF) and both,
before and after update (grow, shrink), and after cleanup the cgroup is gone."""
import os
from pathlib import Path

import pytest

from tests.bed.agent_daemon import minors_of
from tests.bed.cgroups import VERSION_MOUNTS, new_prober, only, open_gpus


@pytest.mark.parametrize("device_cgroup", ["v1", "v2", "both"])
def test_own_gpus_enxio_others_eperm_through_grow_and_shrink(
        daemon_factory, probers, dev_dir, cgroups_root, device_cgroup):
    agent = daemon_factory("v100x8", device_cgroup=device_cgroup)
    c = agent.client
    a = c.prepare("task-a", 2)
    b = c.prepare("task-b", 1)
    pa, pb = new_prober(probers), new_prober(probers)
    assert open_gpus(pa, dev_dir) == only(range(8))      # not isolated yet: no rule applies
    c.isolate("task-a", pid=pa.pid)
    c.isolate("task-b", pid=pb.pid)
    assert open_gpus(pa, dev_dir) == only(minors_of(a))
    assert open_gpus(pb, dev_dir) == only(minors_of(b))
    # control devices and the whitelist stay open
    ctl = pa.open([dev_dir / "nvidiactl", dev_dir / "nvidia-uvm", dev_dir / "nvidia-uvm-tools",
                   "/dev/null", "/dev/urandom"])
    assert ctl == {str(dev_dir / "nvidiactl"): "ENXIO", str(dev_dir / "nvidia-uvm"): "ENXIO",
                   str(dev_dir / "nvidia-uvm-tools"): "ENXIO", "/dev/null": "OK",
                   "/dev/urandom": "OK"}

    grown = c.update("task-a", 4)
    assert len(minors_of(grown)) == 4 and set(minors_of(a)) < set(minors_of(grown))
    assert not set(minors_of(grown)) & set(minors_of(b))
    assert open_gpus(pa, dev_dir) == only(minors_of(grown))
    assert open_gpus(pb, dev_dir) == only(minors_of(b))

    shrunk = c.update("task-a", 1)
    assert minors_of(shrunk) == minors_of(a)[:1]          # keeps the first granted
    assert open_gpus(pa, dev_dir) == only(minors_of(shrunk))
    assert c.update("task-a", 0).gpus == ()
    assert open_gpus(pa, dev_dir) == only([])

    paths = c.info()["containers"]["task-a"]["cgroups"]
    assert sorted(paths) == (["v1", "v2"] if device_cgroup == "both" else [device_cgroup])
    assert c.cleanup("task-a").killed == (pa.pid,)
    assert not any(os.path.exists(p) for p in paths.values())
    assert c.info()["free"] == sorted(set(range(8)) - set(minors_of(b)))


def test_cgroup_created_where_the_flags_say(daemon_factory, probers, cgroups_root):
    agent = daemon_factory("k80", device_cgroup="both")
    agent.client.prepare("where", 1)
    p = new_prober(probers)
    agent.client.isolate("where", pid=p.pid)
    for version, mount in VERSION_MOUNTS.items():
        procs = Path(mount, cgroups_root, "where", "cgroup.procs").read_text().split()
        assert procs == [str(p.pid)], version
    v1_list = Path(VERSION_MOUNTS["v1"], cgroups_root, "where", "devices.list").read_text()
    assert "c 195:0 rwm" in v1_list and "c 195:1 rwm" not in v1_list
    assert "c 1:3 rwm" in v1_list and "c *:* m" in v1_list
