"""What a task's process is given, whatever runs it (Docker, runc, the host):
its argv and its environment."""
import logging
from typing import Mapping, Optional

from framework.task_spec import TaskSpec
from isolator.api import Grant
from volumes import environment

log = logging.getLogger(__name__)


def command_of(spec: TaskSpec) -> Optional[list[str]]:
    """cmd runs in a shell; args go after the image's entrypoint; neither: the image's CMD."""
    if spec.cmd is not None:
        return ["/bin/sh", "-c", spec.cmd]
    return list(spec.args) or None


def task_environment(spec: TaskSpec, base: Mapping[str, str], grant: Optional[Grant],
                     with_volume: bool, extra: Mapping[str, str]) -> dict[str, str]:
    """`base` (the image's or a default environment), the driver volume's PATH
    and LD_LIBRARY_PATH when it is mounted (as Mesos sets them), the task's own
    variables, `extra` (MESOS_TASK_ID...), then the grant's NVIDIA_VISIBLE_DEVICES
    and CUDA_VISIBLE_DEVICES, which the task cannot override."""
    env = dict(base)
    if with_volume:
        env.update(environment.nvidia_environment({**base, **spec.env}))
    env.update(spec.env)
    env.update(extra)
    env.update(grant.env if grant else {})
    return env


def driver_volume(grant: Optional[Grant], wanted: bool) -> Optional[str]:
    """The driver volume's path to mount, when the image rules want it and the
    grant has one (a container without GPUs gets none)."""
    volume = grant.volume if grant else None
    if wanted and not volume:
        log.info("the task asks for the driver volume but holds no GPU: none mounted")
    return volume.path if wanted and volume else None
