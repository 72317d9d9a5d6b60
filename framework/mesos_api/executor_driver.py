"""The executor's driver to its Mesos agent (v1 executor HTTP API).

Started by the agent, it reads who it is from the environment (MESOS_AGENT_ENDPOINT,
MESOS_FRAMEWORK_ID, MESOS_EXECUTOR_ID, MESOS_CHECKPOINT, ...). One IO thread holds the
subscription: SUBSCRIBE names the tasks launched and the updates sent that the agent
has not acknowledged yet (so a restarted agent learns them again), the events go to the
executor's callbacks in order; UPDATE and MESSAGE are calls with the stream's
Mesos-Stream-Id. An update is kept until the agent acknowledges it (`updates`).

A lost agent: a checkpointing framework's executor subscribes again, every
`retry_delay()` seconds, whatever the agent answers on its way up (refused, 404 while
its HTTP server is up and the agent not yet, 503 while it recovers): the agent takes
back only the executors that subscribe within its --executor_reregistration_timeout.
Without checkpointing, the loss of the agent is the end: the executor shuts down, as
Mesos' own executors do. SHUTDOWN, or a subscription refused otherwise (a 4xx answer:
a bad token, say), ends the driver (`aborted`).
"""
import http.client
import logging
import os
import signal
import threading
import time
import uuid
from typing import Any, Mapping, Optional

from framework.mesos_api.connection import CallConnection, EventStream, Refused
from framework.mesos_api.recordio import RecordIOError
from framework.mesos_api.values import decode_data, encode_data, parse_duration

log = logging.getLogger(__name__)

API_PATH = "/api/v1/executor"
RETRY_SECONDS = 0.2


class ExecutorDriver:
    def __init__(self, executor: Any, path: str = API_PATH,
                 authorization: Optional[str] = None,
                 env: Mapping[str, str] = os.environ) -> None:
        self.executor = executor
        self.path = path
        self.agent_endpoint = env["MESOS_AGENT_ENDPOINT"]
        self.framework_id = {"value": env["MESOS_FRAMEWORK_ID"]}
        self.executor_id = {"value": env["MESOS_EXECUTOR_ID"]}
        grace = env.get("MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD")
        self.grace_shutdown_period = parse_duration(grace) if grace else 0.0
        self.checkpoint = env.get("MESOS_CHECKPOINT", "") not in ("", "0", "false")
        self.local = bool(env.get("MESOS_LOCAL"))
        self._authorization = authorization
        self.tasks: dict[str, dict] = {}            # launched, no update acknowledged yet
        self.updates: dict[uuid.UUID, dict] = {}    # sent, not acknowledged: {"status": ...}
        self.executor_info: Optional[dict] = None
        self.framework_info: Optional[dict] = None
        self._lock = threading.Lock()
        self._stopping = False
        self._stopped = threading.Event()
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._stream: Optional[EventStream] = None
        self._calls: Optional[CallConnection] = None
        self._away = False                          # disconnected() said, no SUBSCRIBED since
        self._tries = 0                             # failed SUBSCRIBEs since the last stream

    @property
    def aborted(self) -> bool:
        return self._stopped.is_set() or self._stopping

    @property
    def connected(self) -> bool:
        return self._calls is not None

    def retry_delay(self) -> float:
        return RETRY_SECONDS

    # -- life cycle -------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("a driver starts once")
        self._thread = threading.Thread(target=self._run, name="mesos-executor-driver",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            stream = self._stream
        self._wake.set()
        if stream is not None:
            stream.close()

    abort = stop

    def join(self, timeout: Optional[float] = None) -> None:
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def run(self) -> None:
        self.start()
        self.join()

    # -- calls -------------------------------------------------------------------------
    def sendStatusUpdate(self, status: dict) -> None:
        """Kept until acknowledged (re-sent with the next SUBSCRIBE); an agent that is
        away now gets it when it is back."""
        status.setdefault("timestamp", time.time())
        status.setdefault("uuid", encode_data(uuid.uuid4().bytes))
        status.setdefault("source", "SOURCE_EXECUTOR")
        status.setdefault("executor_id", self.executor_id)
        with self._lock:
            self.updates[uuid.UUID(bytes=decode_data(status["uuid"]))] = {"status": status}
        try:
            self._call({"type": "UPDATE", "update": {"status": status}})
        except (Refused, OSError, http.client.HTTPException) as e:
            log.warning("status update %s of task %s not sent now (%s): it goes out when "
                        "the agent is back", status["state"], status["task_id"]["value"], e)

    def sendFrameworkMessage(self, data: str) -> None:
        self._call({"type": "MESSAGE", "message": {"data": data}})

    def _call(self, body: dict) -> None:
        calls = self._calls
        if calls is None:
            raise ConnectionError("not subscribed to the agent")
        calls.post({**body, "framework_id": self.framework_id,
                    "executor_id": self.executor_id})

    # -- the IO thread ---------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stopping:
                subscribed = self._follow()
                if self._stopping:
                    break
                if not self._away:
                    self._away = True
                    self._callback("disconnected")
                if subscribed and not self.checkpoint:
                    log.error("the agent is gone and the framework does not checkpoint: "
                              "shutting down")
                    self._shutdown()
                    break
                self._wake.wait(self.retry_delay())
                self._wake.clear()
        except Exception:
            log.exception("the executor driver failed")
        finally:
            self._stopping = True
            self._stopped.set()

    def _follow(self) -> bool:
        stream = EventStream(self.agent_endpoint, self.path, None)
        with self._lock:
            if self._stopping:
                return False
            self._stream = stream
        subscribed = False
        try:
            stream.open(self._subscribe_call(), self._headers())
            for event in stream.events():
                if event.get("type") == "SUBSCRIBED" and not subscribed:
                    subscribed = True
                    headers = self._headers()
                    if stream.stream_id:
                        headers["Mesos-Stream-Id"] = stream.stream_id
                    self._calls = CallConnection(self.agent_endpoint, self.path, headers)
                self._dispatch(event)
                if self._stopping:
                    break
        except Refused as e:
            if 400 <= e.status < 500 and e.status != 404:
                self.refused(e)
                self._stopping = True
            else:
                self._retrying(f"not up yet ({e} to SUBSCRIBE)")
        except (OSError, http.client.HTTPException, RecordIOError, ValueError) as e:
            if not self._stopping:
                self._retrying(f"{type(e).__name__}: {e}")
        finally:
            with self._lock:
                self._stream = None
                calls, self._calls = self._calls, None
            stream.close()
            if calls is not None:
                calls.close()
        return subscribed

    def refused(self, error: Refused) -> None:
        """The agent refused the subscription for good: one line saying so."""
        log.error("the agent %s refused the subscription (%s): stopping",
                  self.agent_endpoint, error)

    def _retrying(self, why: str) -> None:
        """The first failure of an absence is said; the retries that follow (every
        retry_delay(), for as long as the agent takes) only with debug logging."""
        self._tries += 1
        level = logging.WARNING if self._tries == 1 else logging.DEBUG
        log.log(level, "the agent %s: %s: subscribing again every %.1f s", self.agent_endpoint,
                why, self.retry_delay())

    def _subscribe_call(self) -> dict:
        with self._lock:
            tasks, updates = list(self.tasks.values()), list(self.updates.values())
        return {"type": "SUBSCRIBE", "framework_id": self.framework_id,
                "executor_id": self.executor_id,
                "subscribe": {"unacknowledged_tasks": tasks,
                              "unacknowledged_updates": updates}}

    def _headers(self) -> dict[str, str]:
        return {"Authorization": self._authorization} if self._authorization else {}

    # -- events --------------------------------------------------------------------------
    def _dispatch(self, event: dict) -> None:
        kind = str(event.get("type", "")).lower()
        body = event.get(kind) or {}
        if kind == "subscribed":
            first = self.executor_info is None
            self.executor_info, self.framework_info = body["executor_info"], body["framework_info"]
            self._away, self._tries = False, 0
            if first:
                self._callback("registered", body["executor_info"], body["framework_info"],
                               body.get("agent_info", {}))
            else:
                self._callback("reregistered", body.get("agent_info", {}))
        elif kind == "launch":
            with self._lock:
                self.tasks[body["task"]["task_id"]["value"]] = body["task"]
            self._callback("launchTask", body["task"])
        elif kind == "launch_group":
            with self._lock:
                for task in body["task_group"].get("tasks", []):
                    self.tasks[task["task_id"]["value"]] = task
            self._callback("launchTaskGroup", body.get("executor_info", {}), body["task_group"])
        elif kind == "kill":
            self._callback("killTask", body["task_id"])
        elif kind == "acknowledged":
            with self._lock:
                self.updates.pop(uuid.UUID(bytes=decode_data(body["uuid"])), None)
                self.tasks.pop(body["task_id"]["value"], None)
        elif kind == "message":
            self._callback("frameworkMessage", body.get("data", ""))
        elif kind == "shutdown":
            self._shutdown()
        elif kind == "error":
            self._callback("error", body.get("message", ""))
        elif kind != "heartbeat":
            log.warning("unknown event from the agent: %.200s", event)

    def _shutdown(self) -> None:
        """The executor kills its tasks; the agent's grace period bounds it: after it
        the whole process group goes (not under MESOS_LOCAL, one process for all)."""
        if not self.local:
            threading.Thread(target=self._kill_after_grace, name="shutdown-grace",
                             daemon=True).start()
        self._callback("shutdown")
        self.stop()

    def _kill_after_grace(self) -> None:
        time.sleep(self.grace_shutdown_period)
        log.error("shutdown grace period of %.1f s over: killing the process group",
                  self.grace_shutdown_period)
        os.killpg(0, signal.SIGKILL)

    def _callback(self, name: str, *args: Any) -> None:
        try:
            getattr(self.executor, name)(self, *args)
        except Exception:
            log.exception("executor callback %s failed", name)
