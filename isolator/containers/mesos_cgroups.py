"""A MESOS container's cgroups: made at isolate with its GPUs' device rules, the
executor's process moved in (its own or a descendant only), and removed at
cleanup with what the daemon placed there. A DOCKER container's are Docker's."""
import logging
import os
from dataclasses import replace
from typing import List, Tuple

from isolator import crashpoints
from isolator.allocation.ledger import Holding
from isolator.allocation.owner import Owner, Placed, is_descendant
from isolator.api import MESOS
from isolator.cgroups import cgroup_host, cgroup_paths
from isolator.cgroups.container_cgroups import CgroupVanished, ContainerCgroups
from isolator.discovery import devices
from isolator.errors import BadRequest, Conflict, Forbidden, Gone

log = logging.getLogger("mesos-gpu.agent")


def enter_new(cgroups: ContainerCgroups, h: Holding, pid: int, caller: Owner,
              rules: List[devices.Rule]) -> Holding:
    """Isolate: new cgroups with the rules of its GPUs, the process moved in."""
    placed = Placed.of_process(pid)
    if placed is None:
        raise BadRequest(f"pid {pid}: no such process")
    check_descendant(pid, caller)
    if cgroups.existing(cgroups.paths(h.container_id)):
        raise Conflict(f"container {h.container_id}: a cgroup of that name already exists")
    runtime = runtime_cgroups(h, pid)
    try:
        paths = cgroups.create(h.container_id, rules, pid)
    except ProcessLookupError:
        raise BadRequest(f"pid {pid}: the process exited before it could be isolated")
    except OSError as e:
        raise Conflict(f"container {h.container_id}: cannot create its cgroup: {e}")
    crashpoints.reached("isolate:after_move", h.container_id)
    log.info("isolated %s: pid %d in %s, GPUs %s", h.container_id, pid,
             ", ".join(paths.values()), list(h.gpus))
    return replace(h, state="isolated", cgroups=paths, placed=placed, runtime_cgroups=runtime)


def enter_again(cgroups: ContainerCgroups, h: Holding, pid: int, caller: Owner) -> Holding:
    """The same isolate again after a crash between the move and its record: the
    process is moved in again (the crash may have cut the move between hierarchies)."""
    if pid not in (cgroups.procs(h.cgroups) or []):
        raise Conflict(f"container {h.container_id} is already isolated")
    check_descendant(pid, caller)
    placed = Placed.of_process(pid)
    try:
        if placed is None:
            raise ProcessLookupError(pid)
        cgroups.enter(h.cgroups, pid)
    except CgroupVanished as e:
        raise Gone(f"container {h.container_id}: its cgroup {e} vanished; "
                   "the container is gone, call cleanup") from None
    except OSError:
        raise BadRequest(f"pid {pid}: the process exited before it could be isolated")
    return replace(h, placed=placed, runtime_cgroups=runtime_cgroups(h, pid))


def undo_move(cgroups: ContainerCgroups, h: Holding) -> None:
    """An isolate that cannot be recorded is not done: its cgroups go, the process
    is moved out of them (not killed), and the holding stays prepared."""
    if not h.cgroups:
        return
    try:
        cgroups.remove(h.cgroups, ours=lambda pid: False)
    except OSError as e:    # recovery strips an unrecorded cgroup of every GPU
        log.warning("container %s: cannot remove its unrecorded cgroups: %s",
                    h.container_id, e)


def remove(cgroups: ContainerCgroups, h: Holding) -> List[int]:
    """Cleanup: the processes the daemon placed, and theirs, killed; the cgroups gone
    (ours and those runc made); returns the pids killed."""
    if h.container_type != MESOS:
        return []
    ours = h.placed.family if h.placed else None
    killed = cgroups.remove({**cgroups.paths(h.container_id), **h.cgroups}, ours)
    for path in h.runtime_cgroups:
        try:
            killed += cgroup_paths.remove(path, timeout=2.0, ours=ours,
                                          evict_to=os.path.dirname(path))
        except OSError as e:
            log.warning("container %s: cannot remove %s: %s", h.container_id, path, e)
    return sorted(set(killed))


def check_descendant(pid: int, caller: Owner) -> None:
    if not is_descendant(pid, caller.pid):
        raise Forbidden(f"pid {pid} is neither the caller (pid {caller.pid}) nor one of "
                        "its descendants: a container takes only its own executor's "
                        "processes")


def runtime_cgroups(h: Holding, pid: int) -> Tuple[str, ...]:
    """The cgroups runc made for the container: they carry its id as their name."""
    try:
        return tuple(sorted(path for path in cgroup_host.process_cgroups(pid).values()
                            if os.path.basename(path.rstrip("/")) == h.container_id))
    except OSError:
        raise BadRequest(f"pid {pid}: the process exited before it could be isolated")
