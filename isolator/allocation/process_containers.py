"""Which container a GPU process belongs to, by its cgroups.

NVML lists the compute processes on each GPU by (host) pid, with their memory
and SM utilisation; a process is a container's when one of its cgroups
(/proc/<pid>/cgroup) is the container's: for a MESOS container a cgroup named
after the container id (the daemon's `<cgroups_root>/<container id>`, and the
cgroups runc made for it carry the same name), or one below it; for a DOCKER
container a cgroup whose path names its Docker id (`/docker/<id>`,
`docker-<id>.scope`). GPUs are never shared between containers, so only the
holder of the GPU is asked about. A process that no longer exists is nobody's
(False); one that cannot be read (permissions) cannot be told: None.
"""
from typing import Dict, Iterable, Optional

from isolator.api import DOCKER
from isolator.allocation.ledger import Holding


def cgroup_paths(pid: int) -> Optional[Iterable[str]]:
    """The cgroup paths of a process (every hierarchy): [] when it is gone, None when
    it cannot be read."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return []
    except OSError:
        return None
    return [line.split(":", 2)[2] for line in text.splitlines() if line.count(":") >= 2]


def belongs(pid: int, h: Holding, paths: Optional[Iterable[str]] = None) -> Optional[bool]:
    """True when the process runs in the container `h`, None when it cannot be read."""
    paths = cgroup_paths(pid) if paths is None else paths
    if paths is None:
        return None
    if h.container_type == DOCKER:
        return bool(h.docker_id) and any(h.docker_id in p for p in paths)
    return any(h.container_id in p.split("/") for p in paths)


def of_processes(pids: Iterable[int], h: Holding) -> Dict[int, Optional[bool]]:
    """pid -> whether it is the container's (None: cannot tell)."""
    return {pid: belongs(pid, h) for pid in pids}


def task_sm_utilization(samples: Iterable[Optional[int]], processes: int, mig: bool,
                        h: Holding) -> Optional[int]:
    """A container's SM use on one GPU from its processes' NVML samples (None: that
    process has none). Where NVML samples nobody's processes the figure is unknown
    (None), not 0: on a MIG device (no utilisation per MIG device) and under MPS (on the
    H200 every client's SM use was sampled as the MPS server's, the clients listed with
    their memory only). Elsewhere a process without a sample was idle."""
    sampled = [s for s in samples if s is not None]
    if sampled:
        return min(100, sum(sampled))
    if mig or h.sharing == "mps":
        return None
    return 0 if processes else None
