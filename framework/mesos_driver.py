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
- a master given as `http://host:port/` breaks its host/port split: accepted;
- it logs through a stderr handler of its own besides the root logger's (every
  line twice) and with a full traceback each time a master is unreachable: here
  its records go through the root logger only, one line each (tracebacks with -v).
"""
import logging
import threading
from typing import Any, Optional

import pymesos.process
from pymesos import MesosSchedulerDriver

from volumes.errors import UserError

log = logging.getLogger(__name__)
MASTER_FORMS = "HOST:PORT, HOST, http://HOST:PORT or zk://HOST:PORT[,...]/PATH"


class _NoInterruptMain:
    """Stands in for the `thread` module pymesos.process uses only to call
    interrupt_main(); the driver reports aborts itself (see `_shutdown`)."""

    @staticmethod
    def interrupt_main() -> None:
        log.debug("pymesos IO thread aborted; not interrupting the main thread")


pymesos.process.thread = _NoInterruptMain


class _OneLineRecords(logging.Filter):
    """A pymesos record with a traceback becomes one line ending in the error."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is not None and not logging.getLogger().isEnabledFor(logging.DEBUG):
            record.msg = f"{record.getMessage().rstrip(': ')}: {type(error).__name__}: {error}"
            record.args, record.exc_info, record.exc_text = None, None, None
        return True


def _quiet_pymesos_logging() -> None:
    top = logging.getLogger("pymesos")
    for handler in list(top.handlers):
        top.removeHandler(handler)
    for name in [n for n in logging.root.manager.loggerDict if n.split(".")[0] == "pymesos"]:
        logging.getLogger(name).addFilter(_OneLineRecords())


_quiet_pymesos_logging()


def check_master(master: str) -> str:
    """--master as pymesos can use it; UserError naming the forms otherwise."""
    text = master.strip()
    scheme, sep, rest = text.rpartition("://")
    ok = bool(rest) and not any(c.isspace() for c in text) and scheme in (
        ("http", "https", "zk", "zoo") if sep else ("",))
    if ok and scheme not in ("zk", "zoo"):
        host, _, port = master_address(text).rpartition(":")
        ok = bool(host) and port.isdigit() and 0 < int(port) < 65536
    if not ok:
        raise UserError(f"--master {master!r}: not a Mesos master address ({MASTER_FORMS})")
    return text


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
