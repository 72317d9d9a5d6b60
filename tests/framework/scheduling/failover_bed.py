"""A GPU scheduler whose master goes away: started on a master with the updates it
gives (`started_scheduler`), a one-GPU task running on it (`survivor_running`),
and a wait that counts an unreachable master as "not yet"."""
import functools
import time

from framework.scheduling.scheduler import GpuScheduler, RetryPolicy, SchedulerConfig
from framework.state.state_store import StateStore
from framework.tasks.taskinfo import ExecutorSettings
from framework.tasks.task_spec import TaskSpec
from tests.bed import waiting
from tests.framework.e2e import wait_for

FAILOVER_TIMEOUT = 300.0

# An unreachable or recovering master (connection refused, reset) counts as "not yet".
wait_until = functools.partial(waiting.wait_until, interval=0.1, ignore=(OSError,))


def started_scheduler(master_address, name, node, tmp_path):
    """A GpuScheduler on `master_address`, and the updates it gives as (time, record)."""
    config = SchedulerConfig(master=master_address, name=name, refuse_seconds=1,
                             failover_timeout=FAILOVER_TIMEOUT, retry=RetryPolicy(max_attempts=1),
                             executor=ExecutorSettings(agent_socket=str(node.socket)))
    sched = GpuScheduler(config, StateStore(tmp_path / "state"))
    updates = []
    sched.on_update(lambda r: updates.append((time.monotonic(), r)))
    sched.start()
    return sched, updates


def survivor_running(sched, node, timeout):
    """Subscribed, a one-GPU task "survivor" running: (framework id, its record,
    the agent daemon's containers)."""
    assert sched.wait_subscribed(timeout)
    sched.submit(TaskSpec(id="survivor", gpus=1, cpus=0.1, mem=32, cmd="sleep 300"))
    before = wait_for(sched, "survivor", {"TASK_RUNNING"}, 60)
    assert len(before.gpus) == 1
    return sched.framework_id, before, node.containers()
