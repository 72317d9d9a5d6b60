"""The executor's GPU usage reports: a thread per running task that holds GPUs.

Every MESOS_GPU_USAGE_INTERVAL seconds (the framework's --gpu_usage_interval,
default 30) it asks the agent daemon for the container's usage (/v1/usage: the
task's own processes on its GPUs) and, when it changed enough to matter (see
gpu_usage.TaskGpuUsage.differs), sends a TASK_RUNNING update carrying it in
`data` (none while the task has used nothing yet). The last sample, with the peak memory, goes out in the terminal update.
A daemon that does not answer costs a log line, never the task.
"""
import logging
import os
import threading
import time
from typing import Callable, Optional

from framework.gpus.gpu_usage import INTERVAL_ENV, TaskGpuUsage, status_data
from isolator.client import AgentClient, AgentError

log = logging.getLogger("mesos-gpu.executor")
DEFAULT_INTERVAL = 30.0
FIRST_SAMPLE = 2.0


def interval() -> float:
    try:
        value = float(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL))
    except ValueError:
        value = DEFAULT_INTERVAL
    return value if value > 0 else DEFAULT_INTERVAL


class UsageReporter:
    def __init__(self, agent: AgentClient, container_id: str,
                 send: Callable[[str], None], every: Optional[float] = None) -> None:
        self.agent = agent
        self.container_id = container_id
        self.send = send                  # TASK_RUNNING with this status data
        self.every = every or interval()
        self.last: Optional[TaskGpuUsage] = None
        self.sent: Optional[TaskGpuUsage] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"usage-{container_id}",
                                        daemon=True)

    def start(self) -> "UsageReporter":
        self._thread.start()
        return self

    def sample(self) -> Optional[TaskGpuUsage]:
        try:
            usage = self.agent.usage(self.container_id)
        except AgentError as e:
            log.debug("usage of %s: %s", self.container_id, e)
            return self.last
        peak = self.last.peak_memory_used if self.last else 0
        self.last = TaskGpuUsage.of(usage, peak, time.time())
        return self.last

    def _run(self) -> None:
        wait = min(FIRST_SAMPLE, self.every)       # the first soon: short tasks report too
        while not self._stop.wait(wait):
            wait = self.every
            now = self.sample()
            if now is None or (self.sent is None and not now.in_use):
                continue                           # nothing to say yet: no update
            if now.differs(self.sent):
                self.sent = now
                self.send(status_data(now))

    def stop(self) -> Optional[str]:
        """Stop reporting; the status data for the terminal update (None: nothing known)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        return status_data(self.last) if self.last is not None else None
