"""Keeps a scheduler connected to the Mesos master.

One driver at a time (framework.scheduling.mesos_driver.SchedulerDriver, with its
heartbeat watchdog): started with the framework info of the moment (the stored
framework id, so a restarted driver subscribes as the same framework),
restarted when it stops on its own (master unreachable, SUBSCRIBE refused, the
event stream ended) or when the scheduler asks (the master removed the
framework). A driver that keeps failing is restarted after 1 s, then 2, 4 ...
up to 60 s; a subscription resets the delay.

Every call to Mesos goes through `call`: a failure is logged, not raised
(reconciliation and the scheduler's maintenance heal what it leaves undone).

`may_act` says whether this framework instance may talk to Mesos now (with
several instances: only while it leads, framework.ha.election): when it may not,
no call is sent, no driver is restarted and no driver subscribes.
"""
import logging
import threading
import time
from typing import Any, Callable, Optional

from framework.scheduling.mesos_credential import Credential
from framework.scheduling.mesos_driver import MISSED_HEARTBEATS, SchedulerDriver

log = logging.getLogger(__name__)

CHECK_INTERVAL = 1.0
RESTART_SECONDS = 1.0
RESTART_MAX_SECONDS = 60.0


class DriverSupervisor:
    def __init__(self, scheduler: Any, framework_info: Callable[[], dict], master: str,
                 missed_heartbeats: float = MISSED_HEARTBEATS,
                 credential: Optional[Credential] = None) -> None:
        self.scheduler = scheduler            # the driver's callbacks
        self.credential = credential          # principal and secret for the master
        self.framework_info = framework_info
        self.master = master
        self.missed_heartbeats = missed_heartbeats
        self._lock = threading.Lock()
        self._driver: Optional[SchedulerDriver] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._restart_requested = False
        self._delay = RESTART_SECONDS
        self._next_restart_at = 0.0
        self.may_act: Callable[[], bool] = lambda: True

    @property
    def driver(self) -> Optional[SchedulerDriver]:
        return self._driver

    def start(self) -> None:
        self._stop.clear()
        self._start_driver()
        self._thread = threading.Thread(target=self._watch, name="mesos-driver-supervisor",
                                        daemon=True)
        self._thread.start()

    def stop(self, teardown: bool = False) -> None:
        """Disconnect: fail over (the framework and its tasks stay registered)
        unless `teardown`."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            driver, self._driver = self._driver, None
        if driver is not None:
            driver.stop(failover=not teardown)
            driver.join()

    def subscribed(self) -> None:
        """The master accepted the subscription: the next failure restarts fast."""
        self._delay = RESTART_SECONDS

    def restart(self) -> None:
        """Replace the driver at the next check, without waiting for its back-off."""
        self._restart_requested = True

    def call(self, method: str, *args: Any) -> None:
        driver = self._driver
        if driver is None:
            return
        if not self.may_act():
            log.info("not the leader now: %s not sent", method)
            return
        try:
            getattr(driver, method)(*args)
        except Exception as e:
            log.warning("%s failed: %s", method, e)

    # -- the supervisor thread ---------------------------------------------------------
    def _watch(self) -> None:
        while not self._stop.wait(CHECK_INTERVAL):
            try:
                self.check(time.time())
            except Exception:
                log.exception("driver supervision failed")

    def check(self, now: float) -> None:
        """Restart a stopped (or condemned) driver once its back-off allows."""
        driver = self._driver
        if driver is None or self._stop.is_set():
            return
        if not (driver.stopped.is_set() or self._restart_requested) or not self.may_act():
            return
        if not self._restart_requested and now < self._next_restart_at:
            return                              # a failing driver waits out its back-off
        self._restart_requested = False
        log.warning("restarting the scheduler driver (if it fails again: next try in %.0f s)",
                    self._delay)
        if not driver.stopped.is_set():
            driver.stop(failover=True)
            driver.join()
        if self._stop.is_set():
            return
        self._start_driver()
        self._next_restart_at = now + self._delay
        self._delay = min(RESTART_MAX_SECONDS, 2 * self._delay)

    def _start_driver(self) -> None:
        info = self.framework_info()
        log.info("connecting to Mesos master %s as %s (framework id %s, role %s, principal %s, "
                 "GPU_RESOURCES %s)", self.master, info["name"],
                 info.get("id", {}).get("value", "new"), info.get("role", "*"),
                 self.credential.principal if self.credential else "none",
                 "on" if {"type": "GPU_RESOURCES"} in info.get("capabilities", ()) else "off")
        driver = SchedulerDriver(self.scheduler, info, self.master,
                                 missed_heartbeats=self.missed_heartbeats,
                                 implicit_acknowledgements=False,
                                 may_subscribe=lambda: self.may_act(),
                                 credential=self.credential)
        with self._lock:
            self._driver = driver
        driver.start()
