"""Helpers of the framework's end-to-end tests: waiting on the scheduler,
reading a task's sandbox output, and the probe scripts tasks run."""
import glob
import re
from pathlib import Path
from typing import Iterable, Optional

from framework.scheduling.scheduler import GpuScheduler
from framework.scheduling.task_record import TaskRecord
from tests.bed.waiting import wait_until

VOLUME_LABEL = {"com.nvidia.volumes.needed": "nvidia_driver"}
# Before the driver's programs in a task on the host's filesystem: run as root, libcuda
# and nvidia-smi make the device nodes they miss, and the host's /dev has none here
# (they left /dev/nvidiactl behind). In a container /dev is the container's own.
NO_MKNOD = "setpriv --bounding-set -mknod -- "

# Run inside a container: for each minor, open the granted node where Docker /
# runc put it (/dev/nvidiaN), else a node the task makes itself (the cgroup must
# still deny it); then the driver volume, and the environment.
CONTAINER_PROBE = r"""
for n in {minors}; do
  p=/dev/nvidia$n
  [ -e $p ] || {{ p=/tmp/nvidia$n; mknod $p c 195 $n; }}
  r=$( (exec 3<>$p) 2>&1 ) && echo "OPEN $n OK" || echo "OPEN $n $r"
done
[ -e /usr/local/nvidia/bin/nvidia-smi ] && echo "VOLUME yes" || echo "VOLUME no"
touch /usr/local/nvidia/probe 2>/dev/null && echo "VOLUME_RW yes" || echo "VOLUME_RW no"
echo "ENV NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"
echo "ENV CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
echo "ENV PATH=$PATH"
echo "ENV LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
"""

# Run on the host filesystem: the test's device nodes are in DEV.
HOST_PROBE = r"""
for n in {minors}; do
  r=$( (exec 3<>{dev}/nvidia$n) 2>&1 ) && echo "OPEN $n OK" || echo "OPEN $n $r"
done
[ -e /usr/local/nvidia/bin/nvidia-smi ] && echo "VOLUME yes" || echo "VOLUME no"
touch /usr/local/nvidia/probe 2>/dev/null && echo "VOLUME_RW yes" || echo "VOLUME_RW no"
echo "ENV NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES"
echo "ENV PATH=$PATH"
echo "CGROUP $(grep devices /proc/self/cgroup)"
"""


def container_probe(minors: Iterable[int]) -> str:
    return CONTAINER_PROBE.format(minors=" ".join(map(str, minors)))


def host_probe(minors: Iterable[int], dev: Path) -> str:
    return HOST_PROBE.format(minors=" ".join(map(str, minors)), dev=dev)


def wait_for(scheduler: GpuScheduler, task_id: str, states: Iterable[str],
             timeout: float = 60.0) -> TaskRecord:
    """Poll until the task is in one of `states`; fail with its last record."""
    wanted = set(states)

    def in_state() -> Optional[TaskRecord]:
        record = scheduler.task(task_id)
        return record if record is not None and record.state in wanted else None
    return wait_until(in_state, timeout, lambda: f"task {task_id} in {sorted(wanted)} "
                                                 f"(it is: {scheduler.task(task_id)})")


def sandbox_output(agent_run_dir: Path, mesos_task_id: str, name: str = "stdout") -> str:
    """The executor's stdout (where the task's output goes) from the agent's sandbox."""
    pattern = f"{agent_run_dir}/work/slaves/*/frameworks/*/executors/mesos-gpu.{mesos_task_id}" \
              f"/runs/latest/{name}"
    found = glob.glob(pattern)
    assert found, f"no sandbox {name} for {mesos_task_id} ({pattern})"
    return Path(found[0]).read_text(errors="replace")


def opened(output: str) -> dict[int, str]:
    """minor -> ENXIO (the cgroup let it through, no driver) / EPERM (denied) / text."""
    result = {}
    for minor, text in re.findall(r"^OPEN (\d+) (.*)$", output, re.M):
        if "No such device or address" in text:
            result[int(minor)] = "ENXIO"
        elif "Operation not permitted" in text:
            result[int(minor)] = "EPERM"
        else:
            result[int(minor)] = text
    return result


def line_value(output: str, key: str) -> str:
    match = re.search(rf"^{re.escape(key)}[ =](.*)$", output, re.M)
    assert match, f"{key} not in task output:\n{output}"
    return match.group(1)
