"""The scheduler's driver as this framework uses it: our v1 API driver
(framework.mesos_api.scheduler_driver) with the framework's credential and the
--master forms it accepts.

- the capabilities are exactly the ones asked for (a framework may stay away from GPU
  agents: no GPU_RESOURCES added behind its back);
- the principal and secret go as HTTP basic auth on SUBSCRIBE and every call, any
  UTF-8 credential, and the principal in FrameworkInfo; a SUBSCRIBE the master refuses
  (401, 403) is one line naming the principal (mesos_credential.refusal);
- a master given as `http://host:port/` is accepted.
"""
import logging
from typing import Any, Callable, Optional

from common.errors import UserError
from framework.mesos_api import scheduler_driver
from framework.mesos_api.scheduler_driver import DEFAULT_HEARTBEAT_INTERVAL, MISSED_HEARTBEATS
from framework.scheduling.mesos_credential import Credential, refusal

log = logging.getLogger(__name__)
MASTER_FORMS = "HOST:PORT, HOST, http://HOST:PORT or zk://HOST:PORT[,...]/PATH"
__all__ = ["DEFAULT_HEARTBEAT_INTERVAL", "MISSED_HEARTBEATS", "SchedulerDriver",
           "check_master", "master_address"]


def check_master(master: str) -> str:
    """--master as the driver can use it; UserError naming the forms otherwise."""
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


class SchedulerDriver(scheduler_driver.SchedulerDriver):
    """The v1 driver with the framework's credential (see the module docstring)."""

    def __init__(self, scheduler: Any, framework: dict, master: str,
                 missed_heartbeats: float = MISSED_HEARTBEATS,
                 may_subscribe: Callable[[], bool] = lambda: True,
                 credential: Optional[Credential] = None,
                 implicit_acknowledgements: bool = False) -> None:
        if not missed_heartbeats > 1:
            raise UserError(f"missed_heartbeats: {missed_heartbeats!r} must be more than 1 "
                            f"(the master may be silent for one heartbeat interval)")
        super().__init__(scheduler, framework, master_address(master), missed_heartbeats,
                         may_subscribe, credential.authorization() if credential else None,
                         implicit_acknowledgements)
        self.credential = credential

    @property
    def framework(self) -> dict:
        framework = super().framework
        if self.credential is not None:     # the master checks it against the authenticated one
            framework["principal"] = self.credential.principal
        return framework

    def refusal_reason(self, master: str, status: int, detail: str) -> str:
        if status in (401, 403):
            return refusal(master, self.credential, status, detail)
        return super().refusal_reason(master, status, detail)
