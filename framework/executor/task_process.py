"""What a task's process is given, whatever runs it (Docker, runc, the host):
its argv and its environment."""
import logging
from typing import Mapping, Optional

from framework.tasks.task_spec import TaskSpec
from isolator.api import Grant
from volumes import cuda_compat, environment

log = logging.getLogger(__name__)


def command_of(spec: TaskSpec) -> Optional[list[str]]:
    """cmd runs in a shell; args go after the image's entrypoint; neither: the image's CMD."""
    if spec.cmd is not None:
        return ["/bin/sh", "-c", spec.cmd]
    return list(spec.args) or None


def task_environment(spec: TaskSpec, base: Mapping[str, str], grant: Optional[Grant],
                     with_volume: bool, extra: Mapping[str, str],
                     compat: Optional[cuda_compat.Decision] = None) -> dict[str, str]:
    """`base` (the image's or a default environment), the task's own variables,
    then, when the driver volume is mounted, PATH and LD_LIBRARY_PATH made from
    both with the volume's directories (and the compat directory `compat`
    chose, volumes.environment), `extra` (MESOS_TASK_ID...), then the grant's
    NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES, which the task cannot
    override. A task's own LD_LIBRARY_PATH keeps its entries, after the volume's:
    replacing the path would hand the loader the wrong libcuda."""
    env = dict(base)
    env.update(spec.env)
    if with_volume:
        env.update(environment.nvidia_environment({**base, **spec.env}, compat))
    env.update(extra)
    env.update(grant.env if grant else {})
    return env


def host_compat(grant: Optional[Grant], with_volume: bool) -> Optional[cuda_compat.Decision]:
    """The compat decision for a task on the host's filesystem: the host's own
    /usr/local/cuda/compat against the running driver."""
    if not with_volume or grant is None:
        return None
    decision = cuda_compat.decide(cuda_compat.find("/"), grant.driver_version)
    log_compat("the host", decision)
    return decision


def log_compat(where: str, decision: cuda_compat.Decision) -> None:
    if decision.compat is not None:
        log.info("CUDA compat libraries of %s (%s/%s): %s", where, decision.compat.directory,
                 decision.compat.filename, "used" if decision.use else "not used")
        log.info("  why: %s", decision.reason)


def driver_volume(grant: Optional[Grant], wanted: bool) -> Optional[str]:
    """The driver volume's path to mount, when the image rules want it and the
    grant has one (a container without GPUs gets none)."""
    volume = grant.volume if grant else None
    if wanted and not volume:
        log.info("the task asks for the driver volume but holds no GPU: none mounted")
    return volume.path if wanted and volume else None
