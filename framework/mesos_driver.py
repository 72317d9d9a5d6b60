"""The pymesos scheduler driver, with the few corrections this project needs.

pymesos 0.3.15 speaks the v1 HTTP API well (SUBSCRIBE stream, 307 redirects to
the leading master, reconnect back-off), but:

- it always adds the GPU_RESOURCES capability when the master is 1.0 or newer,
  so a framework could not choose to stay away from GPU agents: here the
  capabilities are exactly the ones asked for;
- when its IO thread dies (a refused SUBSCRIBE, an exception in a callback) it
  calls `interrupt_main()`, which raises KeyboardInterrupt in whatever the main
  thread is doing (Yelp/Tron PR #560): here callback exceptions are logged and
  an abort is reported to the scheduler's `error` callback instead;
- a master given as `http://host:port/` breaks its host/port split: accepted.
"""
import logging
import threading
from typing import Any, Optional

import pymesos.process
from pymesos import MesosSchedulerDriver

log = logging.getLogger(__name__)


class _NoInterruptMain:
    """Stands in for the `thread` module pymesos.process uses only to call
    interrupt_main(); the driver reports aborts itself (see `_shutdown`)."""

    @staticmethod
    def interrupt_main() -> None:
        log.debug("pymesos IO thread aborted; not interrupting the main thread")


pymesos.process.thread = _NoInterruptMain


def master_address(master: str) -> str:
    """`host:port` from `host`, `host:port` or `http://host:port/` (zk:// kept)."""
    if master.startswith(("zk://", "zoo://")):
        return master
    address = master.split("://", 1)[-1].rstrip("/")
    return address if ":" in address else address + ":5050"


class SchedulerDriver(MesosSchedulerDriver):
    """pymesos' driver with exact capabilities and no main-thread interrupts."""

    def __init__(self, scheduler: Any, framework: dict, master: str, **kwargs: Any) -> None:
        super().__init__(scheduler, framework, master_address(master), **kwargs)
        self._stopping = False
        self.abort_reason: Optional[str] = None
        self.stopped = threading.Event()

    @property
    def framework(self) -> dict:
        framework = dict(self._framework)
        if not framework.get("capabilities"):
            framework.pop("capabilities", None)
        return framework

    def process_event(self, event: dict) -> None:
        try:
            super().process_event(event)
        except Exception:  # a bug in a callback must not kill the event stream
            log.exception("scheduler callback failed on a %s event", event.get("type"))

    def stop(self, failover: bool = False) -> None:
        self._stopping = True
        super().stop(failover)

    def _shutdown(self) -> None:
        """Runs on the IO thread as it ends: after stop() (TEARDOWN unless
        failing over), or after an abort (never TEARDOWN: the tasks must live)."""
        try:
            if self._stopping:
                super()._shutdown()
            else:
                self._report_abort()
        finally:
            self.stopped.set()

    def _report_abort(self) -> None:
        error = pymesos.process._exc_info
        pymesos.process._exc_info = None  # else a later Ctrl-C would re-raise it
        self.abort_reason = str(error[1]) if error else "the event stream ended"
        log.error("connection to the Mesos master aborted: %s", self.abort_reason)
        try:
            self.sched.error(self, f"driver aborted: {self.abort_reason}")
        except Exception:
            log.exception("scheduler error callback failed")
