"""A GpuScheduler in a process of its own, for tests that kill it with SIGKILL.

    python -m tests.framework.scheduler_process MASTER STATE_DIR TASK_ID CMD

Submits one 1-GPU host task (unless the store already has it), prints
"RUNNING <framework id>" once the task runs, then waits to be killed.
"""
import logging
import sys
import threading
import time

from framework.scheduling.scheduler import GpuScheduler, SchedulerConfig
from framework.state.state_store import StateStore
from framework.tasks.taskinfo import ExecutorSettings
from framework.tasks.task_spec import TaskSpec


def main(master: str, state_dir: str, task_id: str, cmd: str) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    config = SchedulerConfig(master=master, name="fw-crash-test", refuse_seconds=1,
                             executor=ExecutorSettings(agent_socket=None))
    sched = GpuScheduler(config, StateStore(state_dir)).start()
    running = threading.Event()
    sched.on_update(lambda r: r.state == "TASK_RUNNING" and running.set())
    if sched.task(task_id) is None:
        sched.submit(TaskSpec(id=task_id, gpus=1, cpus=0.1, mem=32, cmd=cmd))
    running.wait(120)
    print(f"RUNNING {sched.framework_id}", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
