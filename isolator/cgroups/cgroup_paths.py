"""Where a container's cgroups live, and how they are emptied and removed.

The path is a function of the container id (`<mount>/<cgroups_root>/<id>`), so
recovery finds a cgroup even when the daemon died before recording it.
Works the same for a v1 hierarchy and for the cgroup2 tree.
"""
import errno
import logging
import os
import signal
import time
from typing import Callable, Dict, List, Optional

from isolator.cgroups.cgroup_host import CgroupHost

log = logging.getLogger("mesos-gpu.agent")


def container_paths(host: CgroupHost, cgroups_root: str, container_id: str,
                    versions: List[str]) -> Dict[str, str]:
    """{'v1': path, 'v2': path} for the versions this daemon enforces with."""
    mounts = {"v1": host.devices_v1, "v2": host.unified}
    return {v: os.path.join(mounts[v], cgroups_root, container_id) for v in versions}


def root_paths(host: CgroupHost, cgroups_root: str, versions: List[str]) -> Dict[str, str]:
    mounts = {"v1": host.devices_v1, "v2": host.unified}
    return {v: os.path.join(mounts[v], cgroups_root) for v in versions}


def procs(path: str) -> Optional[List[int]]:
    """The pids in the cgroup, or None when the cgroup does not exist."""
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return None


def remove(path: str, timeout: float = 5.0, ours: Optional[Callable[[int], bool]] = None,
           evict_to: Optional[str] = None) -> List[int]:
    """Kill what is left in the cgroup and remove it; returns the pids killed.
    With `ours`, only the processes it accepts are killed; any other is moved to
    the cgroup `evict_to` (a process someone else put there is not ours to kill).
    A cgroup that is already gone is fine (cleanup is idempotent)."""
    killed: set = set()
    evicted: set = set()
    deadline = time.monotonic() + timeout
    while True:
        pids = procs(path)
        if pids is None:
            return sorted(killed)
        for pid in pids:
            if ours is not None and evict_to and pid not in killed and not ours(pid):
                if pid not in evicted:
                    evicted.add(pid)
                    log.warning("process %d in %s was not placed there by this daemon: "
                                "moved to %s, not killed", pid, path, evict_to)
                    _move(evict_to, pid)
                continue
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        try:
            os.rmdir(path)
            return sorted(killed)
        except FileNotFoundError:
            return sorted(killed)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)   # killed processes leave the cgroup when reaped


def _move(cgroup: str, pid: int) -> None:
    try:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(pid))
    except (ProcessLookupError, FileNotFoundError):
        pass
    except OSError as e:
        if e.errno != errno.ESRCH:
            raise


def list_children(root: str) -> List[str]:
    try:
        return sorted(e.name for e in os.scandir(root) if e.is_dir())
    except FileNotFoundError:
        return []
