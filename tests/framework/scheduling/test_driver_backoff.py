"""A master that cannot be reached (its name does not resolve) must not make the
scheduler restart its driver every second for ever: restarts back off 1, 2, 4 ...
seconds (up to 60), and a subscription resets the delay."""
import logging
import re
import time

from framework.scheduling.scheduler import GpuScheduler, SchedulerConfig
from framework.state.state_store import StateStore
from framework.tasks.taskinfo import ExecutorSettings


def test_driver_restarts_back_off_while_the_master_is_unreachable(tmp_path, caplog):
    config = SchedulerConfig(master="no-such-master.invalid:5050", name="fw-backoff",
                             executor=ExecutorSettings(agent_socket=None))
    sched = GpuScheduler(config, StateStore(tmp_path / "state"))
    caplog.set_level(logging.WARNING, logger="framework.scheduling.driver_supervisor")
    sched.start()
    try:
        time.sleep(12)
    finally:
        sched.stop()
    delays = [int(m.group(1)) for r in caplog.records
              if (m := re.search(r"restarting the scheduler driver .*next try in (\d+) s",
                                 r.getMessage()))]
    assert len(delays) >= 2, [r.getMessage() for r in caplog.records][-10:]
    assert len(delays) <= 5, delays                    # once a second would be ~11
    assert delays == [2 ** i for i in range(len(delays))], delays
    assert not sched.wait_subscribed(0)
