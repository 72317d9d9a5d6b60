"""The real cgroup tree of this host, as isolator.cgroups.cgroup_host finds it."""
import os
import signal
import subprocess
from pathlib import Path

from isolator.cgroups import cgroup_host
from localcluster import processes
from tests.bed.waiting import wait_until


def _mounts():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype, _, options = (right.split() + ["", ""])[:3]
            yield left.split()[4], fstype, options.split(",")


def test_detect_matches_mountinfo():
    host = cgroup_host.detect()
    mounts = list(_mounts())
    v1 = [point for point, fstype, _ in mounts if fstype == "cgroup"]
    v2 = [point for point, fstype, _ in mounts if fstype == "cgroup2"]
    devices = [point for point, fstype, opts in mounts if fstype == "cgroup" and "devices" in opts]
    assert host.devices_v1 == (devices[0] if devices else None)
    assert host.unified == (v2[0] if v2 else None)
    assert host.mode == {(True, True): "hybrid", (True, False): "v1",
                         (False, True): "v2", (False, False): "none"}[(bool(v1), bool(v2))]


def test_this_host_has_a_v1_devices_controller_and_a_cgroup2_tree():
    """Debian 12 test machine, hybrid: both device isolation paths are testable."""
    host = cgroup_host.detect()
    assert host.mode == "hybrid"
    assert os.path.exists(os.path.join(host.devices_v1, "devices.allow"))
    assert os.path.exists(os.path.join(host.unified, "cgroup.procs"))
    assert os.path.exists(os.path.join(host.unified, "cgroup.controllers"))


def test_a_frozen_cgroup_with_a_process_in_it_is_removed():
    """What a Mesos agent killed while destroying a container leaves: a freezer
    cgroup FROZEN with its process inside (SIGKILL alone cannot end a frozen
    process). The bed's cleanup thaws, kills and removes it."""
    top = Path("/sys/fs/cgroup/freezer") / f"mesos-gpu-bed-frozen-{os.getpid()}"
    child = top / "container"
    child.mkdir(parents=True)
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        (child / "cgroup.procs").write_text(str(sleeper.pid))
        (top / "freezer.state").write_text("FROZEN")
        wait_until(lambda: (child / "freezer.state").read_text().strip() == "FROZEN", 10,
                   "the cgroup frozen")
        processes.remove_cgroup_tree(top)
        assert not top.exists()
        assert sleeper.wait(10) == -signal.SIGKILL
    finally:
        if top.exists():                     # thawed first: a frozen sleep never dies
            (top / "freezer.state").write_text("THAWED")
        sleeper.kill()
        sleeper.wait()
        if top.exists():
            processes.remove_cgroup_tree(top)
