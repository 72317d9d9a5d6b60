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
- it encodes a principal and secret as ASCII only, and a SUBSCRIBE the master refuses
  (401, 403) ends in a RuntimeError with the answer's repr: here any UTF-8 credential
  is sent, and a refusal is one line naming the principal (mesos_credential.refusal);
- it logs through a stderr handler of its own besides the root logger's (every
  line twice) and with a full traceback each time a master is unreachable: here
  its records go through the root logger only, one line each (tracebacks with -v).
"""
import logging
import re
import threading
import time
from typing import Any, Callable, Optional

import pymesos.process
from pymesos import MesosSchedulerDriver

from common.errors import UserError
from framework.scheduling.mesos_credential import Credential, refusal

log = logging.getLogger(__name__)
# pymesos' RuntimeError for a SUBSCRIBE answered with an error status
_REFUSED = re.compile(r"Failed with HTTP (\d+): (?:b'(.*)'|(.*))$", re.S)
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


# The master's heartbeat interval until its SUBSCRIBED event says (Mesos 1.x:
# DEFAULT_HEARTBEAT_INTERVAL in src/master/constants.hpp, not configurable).
DEFAULT_HEARTBEAT_INTERVAL = 15.0
# Silence tolerated, in heartbeat intervals, before the stream counts as dead:
# 3 x 15 s = 45 s. The v1 API suggests "e.g. 5"; 3 still rides out a master's
# GC pause or a slow registry write, and a partition is noticed sooner.
MISSED_HEARTBEATS = 3.0
WATCHDOG_TICK = 1.0


class SchedulerDriver(MesosSchedulerDriver):
    """pymesos' driver with exact capabilities, no main-thread interrupts, and
    a heartbeat watchdog.

    pymesos notices a lost master only when the TCP connection closes; a
    master that goes silent with the connection open (network partition,
    frozen host) would hold the framework forever. The master sends an event
    at least every `heartbeat_interval_seconds` (HEARTBEAT when it has nothing
    else), so `missed_heartbeats` intervals without any event mean the stream
    is dead: the watchdog closes it and pymesos subscribes again, as after a
    master change (the scheduler re-subscribes with its framework id and
    reconciles). A connection that gets no answer at all counts the same way.
    """

    def __init__(self, scheduler: Any, framework: dict, master: str,
                 missed_heartbeats: float = MISSED_HEARTBEATS,
                 may_subscribe: Callable[[], bool] = lambda: True,
                 credential: Optional[Credential] = None, **kwargs: Any) -> None:
        if not missed_heartbeats > 1:
            raise UserError(f"missed_heartbeats: {missed_heartbeats!r} must be more than 1 "
                            f"(the master may be silent for one heartbeat interval)")
        super().__init__(scheduler, framework, master_address(master), **kwargs)
        self.credential = credential
        # pymesos sends this header on SUBSCRIBE and on every call
        self._basic_credential = credential.authorization() if credential else None
        self._stopping = False
        self.abort_reason: Optional[str] = None
        self.stopped = threading.Event()
        self.missed_heartbeats = missed_heartbeats
        # Checked before each SUBSCRIBE (pymesos re-subscribes on its own after a
        # lost connection): an instance that no longer leads must not take the
        # framework back from the one that does.
        self.may_subscribe = may_subscribe
        self.heartbeat_interval = DEFAULT_HEARTBEAT_INTERVAL
        # monotonic time of the last event (or of the connection attempt) on
        # the open stream; None while no stream is open (pymesos reconnects).
        self._last_event: Optional[float] = None

    @property
    def silence_limit(self) -> float:
        """Seconds without an event after which the stream counts as dead."""
        return self.missed_heartbeats * self.heartbeat_interval

    def start(self) -> None:
        super().start()
        threading.Thread(target=self._watch, name="mesos-heartbeat-watchdog",
                         daemon=True).start()

    def gen_request(self) -> bytes:
        """The SUBSCRIBE request of a new connection (IO thread): the silence
        is counted from here until the first event."""
        if not self.may_subscribe():
            raise RuntimeError("this framework instance does not lead: not subscribing")
        self._last_event = time.monotonic()
        return super().gen_request()

    def on_close(self) -> None:
        self._last_event = None
        super().on_close()

    @property
    def framework(self) -> dict:
        framework = dict(self._framework)
        if self.credential is not None:     # the master checks it against the authenticated one
            framework["principal"] = self.credential.principal
        if not framework.get("capabilities"):
            framework.pop("capabilities", None)
        return framework

    def process_event(self, event: dict) -> None:
        self._last_event = time.monotonic()
        if event.get("type") == "SUBSCRIBED":
            self._note_heartbeat_interval(event.get("subscribed") or {})
        try:
            super().process_event(event)
        except Exception:  # a bug in a callback must not kill the event stream
            log.exception("scheduler callback failed on a %s event", event.get("type"))

    def stop(self, failover: bool = False) -> None:
        self._stopping = True
        super().stop(failover)

    def _note_heartbeat_interval(self, subscribed: dict) -> None:
        interval = subscribed.get("heartbeat_interval_seconds")
        if isinstance(interval, (int, float)) and interval > 0:
            self.heartbeat_interval = float(interval)
        log.info("master heartbeats every %g s: reconnecting after %g s without an event",
                 self.heartbeat_interval, self.silence_limit)

    def _watch(self) -> None:
        """Watchdog thread: close a stream that has been silent too long."""
        while not self.stopped.wait(WATCHDOG_TICK):
            last = self._last_event
            if last is None or self._stopping:
                continue
            silence = time.monotonic() - last
            if silence >= self.silence_limit:
                self._last_event = None
                log.warning("no event from the master %s for %.0f s (%g heartbeats of %g s): "
                            "reconnecting", self.master, silence, self.missed_heartbeats,
                            self.heartbeat_interval)
                self._reconnect()

    def _reconnect(self) -> None:
        """Close the stream and subscribe again, on pymesos' own path for a new
        master: its IO thread, woken, sees `_master` differ from `_new_master`,
        closes the connection (`disconnected` callback) and connects anew."""
        with self._lock:
            if not self._started or self._master is None or self._new_master != self._master:
                return              # stopping, or a master change already replaces the stream
            self._master = None
            self._stream_id = None  # calls fail fast until the new stream is up
        self._notify()

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
        refused = _REFUSED.match(self.abort_reason)
        if refused and refused.group(1) in ("401", "403"):
            self.abort_reason = refusal(self.master, self.credential, int(refused.group(1)),
                                        refused.group(2) or refused.group(3) or "")
            log.error("%s", self.abort_reason)
        else:
            log.error("connection to the Mesos master aborted: %s", self.abort_reason)
        try:
            self.sched.error(self, f"driver aborted: {self.abort_reason}")
        except Exception:
            log.exception("scheduler error callback failed")
