"""The scheduler's driver to the Mesos master (v1 scheduler HTTP API).

One IO thread holds the subscription: it finds the master (given, or the leader on
ZooKeeper), POSTs SUBSCRIBE (with the framework id once it has one, so a new stream or
a new master takes the framework back with its tasks), follows a 307 to the leading
master, reads the event stream and calls the scheduler's callbacks in order. Calls
(ACCEPT, DECLINE, KILL, ACKNOWLEDGE, RECONCILE, REVIVE, SUPPRESS, MESSAGE, TEARDOWN)
go from any thread on a connection of their own to the master holding the stream, with
its Mesos-Stream-Id; while no stream is open they are dropped (reconciliation heals).

A master that goes silent with the connection open (a partition, a frozen host) is
noticed by its missing heartbeats: no event for `missed_heartbeats` intervals (the
interval the SUBSCRIBED event names) drops the stream, and the driver subscribes again.
A lost stream is re-subscribed at once, then with a jittered back-off (RETRY_*) while
the master cannot be reached. The driver stops on its own (abort: `stopped` set,
`abort_reason`, the scheduler's `error` callback) only when the master refuses the
subscription (a 4xx answer: bad framework info, authentication) or the master's name
does not resolve; whoever started it decides what next (driver_supervisor.py).
"""
import http.client
import logging
import random
import socket
import threading
import time
from typing import Any, Callable, Optional

from framework.mesos_api.connection import CallConnection, EventStream, Redirected, Refused
from framework.mesos_api.detector import MasterDetector
from framework.mesos_api.recordio import RecordIOError

log = logging.getLogger(__name__)

API_PATH = "/api/v1/scheduler"
# The master's heartbeat interval until its SUBSCRIBED event says (Mesos 1.x:
# DEFAULT_HEARTBEAT_INTERVAL in src/master/constants.hpp, not configurable).
DEFAULT_HEARTBEAT_INTERVAL = 15.0
# Silence tolerated, in heartbeat intervals, before the stream counts as dead:
# 3 x 15 s = 45 s. The v1 API suggests "e.g. 5"; 3 still rides out a master's
# GC pause or a slow registry write, and a partition is noticed sooner.
MISSED_HEARTBEATS = 3.0
RETRY_FIRST, RETRY_MAX = 0.5, 15.0
# 4xx answers that are the master's state, not a refusal of this framework
_TRANSIENT = {404, 408, 429}


class Aborted(Exception):
    """The driver cannot go on by itself: the reason, one line."""


class SchedulerDriver:
    """`sched` gets the callbacks (framework.mesos_api.callbacks.Scheduler), `framework`
    is the FrameworkInfo as a dict (its `id` once known), `master` HOST:PORT or a
    zk:// URL. `authorization` is the Authorization header of SUBSCRIBE and every call
    (HTTP basic for an authenticating master); `may_subscribe` is asked before each
    SUBSCRIBE (an instance that no longer leads must not take the framework back)."""

    def __init__(self, sched: Any, framework: dict, master: str,
                 missed_heartbeats: float = MISSED_HEARTBEATS,
                 may_subscribe: Callable[[], bool] = lambda: True,
                 authorization: Optional[str] = None,
                 implicit_acknowledgements: bool = False) -> None:
        if not missed_heartbeats > 1:
            raise ValueError(f"missed_heartbeats: {missed_heartbeats!r} must be more than 1 "
                             f"(the master may be silent for one heartbeat interval)")
        self.sched = sched
        self._framework = dict(framework)
        self.master_uri = master
        self.missed_heartbeats = missed_heartbeats
        self.may_subscribe = may_subscribe
        self.implicit_acknowledgements = implicit_acknowledgements
        self._authorization = authorization
        self.heartbeat_interval = DEFAULT_HEARTBEAT_INTERVAL
        self.abort_reason: Optional[str] = None
        self.stopped = threading.Event()
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stopping = False
        self._failover = True
        self._thread: Optional[threading.Thread] = None
        self._detector: Optional[MasterDetector] = None
        self._detected: Optional[str] = None         # the leader ZooKeeper names
        self._stream: Optional[EventStream] = None   # the stream being opened or read
        self._calls: Optional[CallConnection] = None  # set while subscribed
        self._master: Optional[str] = None           # host:port of the open stream

    # -- what the rest of the framework reads ----------------------------------------
    @property
    def master(self) -> Optional[str]:
        """host:port of the master holding the stream (None while none does)."""
        return self._master

    @property
    def framework_id(self) -> Optional[str]:
        return (self._framework.get("id") or {}).get("value")

    @property
    def framework(self) -> dict:
        """The FrameworkInfo sent with SUBSCRIBE: capabilities exactly as given."""
        framework = dict(self._framework)
        if not framework.get("capabilities"):
            framework.pop("capabilities", None)
        return framework

    @property
    def connected(self) -> bool:
        return self._calls is not None

    @property
    def aborted(self) -> bool:
        return self.stopped.is_set()

    @property
    def silence_limit(self) -> float:
        """Seconds without an event after which the stream counts as dead."""
        return self.missed_heartbeats * self.heartbeat_interval

    # -- life cycle -------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("a driver starts once")
        self._thread = threading.Thread(target=self._run, name="mesos-scheduler-driver",
                                        daemon=True)
        self._thread.start()

    def stop(self, failover: bool = False) -> None:
        """End the subscription: TEARDOWN (the framework and its tasks go) unless
        `failover` (they stay for the next subscription with this framework id)."""
        if not failover and self.connected:
            try:
                self._call({"type": "TEARDOWN"})
                self._framework.pop("id", None)
            except Exception as e:
                log.warning("TEARDOWN of framework %s failed: %s", self.framework_id, e)
        with self._lock:
            self._stopping, self._failover = True, failover
            stream = self._stream
        self._wake.set()
        if stream is not None:
            stream.close()

    def abort(self) -> None:
        self.stop(failover=True)

    def join(self, timeout: Optional[float] = None) -> None:
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def run(self) -> None:
        self.start()
        self.join()

    # -- calls -------------------------------------------------------------------------
    def acceptOffers(self, offer_ids: Any, operations: list,
                     filters: Optional[dict] = None) -> None:
        if not operations:
            return self.declineOffer(offer_ids, filters)
        accept: dict = {"offer_ids": _ids(offer_ids), "operations": operations}
        if filters is not None:
            accept["filters"] = filters
        self._call({"type": "ACCEPT", "accept": accept})

    def launchTasks(self, offer_ids: Any, tasks: list, filters: Optional[dict] = None) -> None:
        if not tasks:
            return self.declineOffer(offer_ids, filters)
        self.acceptOffers(offer_ids, [{"type": "LAUNCH", "launch": {"task_infos": tasks}}],
                          filters)

    def declineOffer(self, offer_ids: Any, filters: Optional[dict] = None) -> None:
        decline: dict = {"offer_ids": _ids(offer_ids)}
        if filters is not None:
            decline["filters"] = filters
        self._call({"type": "DECLINE", "decline": decline})

    def reviveOffers(self, roles: tuple = ()) -> None:
        self._call({"type": "REVIVE", **({"revive": {"roles": list(roles)}} if roles else {})})

    def suppressOffers(self, roles: tuple = ()) -> None:
        self._call({"type": "SUPPRESS",
                    **({"suppress": {"roles": list(roles)}} if roles else {})})

    def killTask(self, task_id: dict, agent_id: Optional[dict] = None) -> None:
        kill: dict = {"task_id": task_id}
        if agent_id is not None:
            kill["agent_id"] = agent_id
        self._call({"type": "KILL", "kill": kill})

    def acknowledgeStatusUpdate(self, status: dict) -> None:
        if "uuid" not in status:
            return                       # updates without one need no acknowledgement
        self._call({"type": "ACKNOWLEDGE", "acknowledge": {
            "agent_id": status["agent_id"], "task_id": status["task_id"],
            "uuid": status["uuid"]}})

    def acknowledgeOperationStatusUpdate(self, status: dict) -> None:
        if "uuid" in status and "operation_id" in status:
            self._call({"type": "ACKNOWLEDGE_OPERATION_STATUS",
                        "acknowledge_operation_status": status})

    def reconcileTasks(self, tasks: list) -> None:
        """Explicit for the tasks given (their ids, and agent ids where known);
        implicit (every task of the framework) for []."""
        wanted = [{k: t[k] for k in ("task_id", "agent_id") if k in t} for t in tasks]
        self._call({"type": "RECONCILE", "reconcile": {"tasks": wanted}})

    def sendFrameworkMessage(self, executor_id: dict, agent_id: dict, data: str) -> None:
        self._call({"type": "MESSAGE", "message": {
            "agent_id": agent_id, "executor_id": executor_id, "data": data}})

    def _call(self, body: dict) -> Any:
        calls, framework_id = self._calls, self.framework_id
        if calls is None or framework_id is None:
            log.debug("%s not sent: not subscribed", body["type"])
            return None
        return calls.post({**body, "framework_id": {"value": framework_id}})

    # -- the IO thread ---------------------------------------------------------------
    def _run(self) -> None:
        failures = 0
        try:
            if self.master_uri.startswith(("zk://", "zoo://")):
                self._detector = MasterDetector(self.master_uri, self._leader_detected)
                self._detector.start()
            redirect: Optional[str] = None
            while not self._stopping:
                target = redirect or self._target()
                redirect = None
                if target is None:
                    self._wake.wait(1.0)          # ZooKeeper names no leader (yet)
                    self._wake.clear()
                    continue
                if not self.may_subscribe():
                    raise Aborted("this framework instance does not lead: not subscribing")
                try:
                    subscribed = self._follow(target)
                except Redirected as r:
                    log.info("master %s: the leading master is %s", target, r.leader)
                    redirect = r.leader if r.leader != target else None
                    failures += redirect is None
                    subscribed = False
                if self._stopping:
                    break
                if subscribed:
                    failures = 0               # a lost stream: subscribe again at once
                    continue
                if redirect is None:
                    delay = _retry_delay(failures)
                    failures += 1
                    self._wake.wait(delay)
                    self._wake.clear()
        except Aborted as e:
            self._report_abort(str(e))
        except Exception as e:               # a bug here must not pass unseen
            log.exception("the scheduler driver failed")
            self._report_abort(f"{type(e).__name__}: {e}")
        finally:
            if self._detector is not None:
                self._detector.stop()
            self.stopped.set()

    def _target(self) -> Optional[str]:
        if self._detector is not None:
            return self._detected
        return self.master_uri

    def _leader_detected(self, leader: Optional[str]) -> None:
        with self._lock:
            self._detected = leader
            stream = self._stream
        if stream is not None and stream.address != leader:
            stream.close()                     # the IO thread follows the new leader
        self._wake.set()

    def _follow(self, address: str) -> bool:
        """SUBSCRIBE to `address` and read its events until the stream ends; True if
        the master took the subscription."""
        stream = EventStream(address, API_PATH, self.silence_limit)
        with self._lock:
            if self._stopping:
                return False
            self._stream = stream
        subscribed = False
        last_event = time.monotonic()
        try:
            stream.open(self._subscribe_call(), self._headers())
            for event in stream.events():
                last_event = time.monotonic()
                if event.get("type") == "SUBSCRIBED" and not subscribed:
                    subscribed = True
                    self._subscribed(stream, event.get("subscribed") or {})
                self._dispatch(event)
            if not self._stopping:
                log.warning("master %s ended the event stream", address)
        except TimeoutError:
            log.warning("no event from the master %s for %.0f s (%g heartbeats of %g s): "
                        "reconnecting", address, time.monotonic() - last_event,
                        self.missed_heartbeats, self.heartbeat_interval)
        except Refused as e:
            if 400 <= e.status < 500 and e.status not in _TRANSIENT:
                raise Aborted(self.refusal_reason(address, e.status, e.detail)) from None
            log.warning("master %s answered SUBSCRIBE with %s: trying again", address, e)
        except socket.gaierror as e:
            raise Aborted(f"master {address}: {e.strerror or e}") from None
        except (OSError, http.client.HTTPException, RecordIOError, ValueError) as e:
            if not self._stopping:
                log.warning("connection to the master %s: %s: %s", address,
                            type(e).__name__, e)
        finally:
            with self._lock:
                self._stream = None
                calls, self._calls, self._master = self._calls, None, None
            stream.close()
            if calls is not None:
                calls.close()
            if subscribed:
                self._callback("disconnected")
        return subscribed

    def _subscribe_call(self) -> dict:
        call: dict = {"type": "SUBSCRIBE", "subscribe": {"framework_info": self.framework}}
        if self.framework_id:
            call["framework_id"] = {"value": self.framework_id}
        return call

    def _headers(self) -> dict[str, str]:
        return {"Authorization": self._authorization} if self._authorization else {}

    def _subscribed(self, stream: EventStream, subscribed: dict) -> None:
        interval = subscribed.get("heartbeat_interval_seconds")
        if isinstance(interval, (int, float)) and interval > 0:
            self.heartbeat_interval = float(interval)
        stream.set_timeout(self.silence_limit)
        log.info("master heartbeats every %g s: reconnecting after %g s without an event",
                 self.heartbeat_interval, self.silence_limit)
        headers = self._headers()
        if stream.stream_id:
            headers["Mesos-Stream-Id"] = stream.stream_id
        with self._lock:
            self._master = stream.address
            self._calls = CallConnection(stream.address, API_PATH, headers)

    # -- events --------------------------------------------------------------------------
    def _dispatch(self, event: dict) -> None:
        kind = str(event.get("type", "")).lower()
        body = event.get(kind) or {}
        if kind == "subscribed":
            known = self.framework_id is not None
            self._framework["id"] = body["framework_id"]
            host, _, port = (self._master or ":").rpartition(":")
            master_info = {"hostname": host, "port": int(port) if port.isdigit() else None,
                           **{k: v for k, v in (body.get("master_info") or {}).items()
                              if k == "version"}}
            if known:
                self._callback("reregistered", master_info)
            else:
                self._callback("registered", dict(body["framework_id"]), master_info)
        elif kind == "offers":
            if body.get("offers"):
                self._callback("resourceOffers", body["offers"])
            if body.get("inverse_offers"):
                self._callback("inverseOffers", body["inverse_offers"])
        elif kind == "inverse_offers":
            self._callback("inverseOffers", body.get("inverse_offers", []))
        elif kind == "rescind":
            self._callback("offerRescinded", body["offer_id"])
        elif kind == "rescind_inverse_offer":
            self._callback("inverseOfferRescinded", body["inverse_offer_id"])
        elif kind == "update":
            self._callback("statusUpdate", body["status"])
            if self.implicit_acknowledgements:
                self.acknowledgeStatusUpdate(body["status"])
        elif kind == "update_operation_status":
            self._callback("operationStatusUpdate", body["status"])
        elif kind == "message":
            self._callback("frameworkMessage", body["executor_id"], body["agent_id"],
                           body.get("data", ""))
        elif kind == "failure":
            if "executor_id" in body:
                self._callback("executorLost", body["executor_id"], body["agent_id"],
                               body.get("status"))
            else:
                self._callback("slaveLost", body["agent_id"])
        elif kind == "error":
            self._callback("error", body.get("message", ""))
        elif kind == "heartbeat":
            self._callback("processHeartBeat")
        else:
            log.warning("unknown event from the master: %.200s", event)

    def _callback(self, name: str, *args: Any) -> None:
        """A bug in a callback must not end the event stream."""
        try:
            getattr(self.sched, name)(self, *args)
        except Exception:
            log.exception("scheduler callback %s failed", name)

    def refusal_reason(self, master: str, status: int, detail: str) -> str:
        """One line for a SUBSCRIBE the master refused (subclasses name credentials)."""
        return f"the Mesos master {master} refused the subscription (HTTP {status}: {detail})"

    def _report_abort(self, reason: str) -> None:
        self.abort_reason = reason
        log.error("%s", reason if reason.startswith("the Mesos master") else
                  f"connection to the Mesos master aborted: {reason}")
        self._callback("error", f"driver aborted: {reason}")


def _ids(offer_ids: Any) -> list:
    return [offer_ids] if isinstance(offer_ids, dict) else list(offer_ids)


def _retry_delay(failures: int) -> float:
    """RETRY_FIRST doubling up to RETRY_MAX, +-25 %: frameworks do not knock in step."""
    return min(RETRY_MAX, RETRY_FIRST * 2 ** min(failures, 10)) * random.uniform(0.75, 1.25)
