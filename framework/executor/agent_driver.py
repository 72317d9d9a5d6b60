"""How our executor talks to its Mesos agent: pymesos' executor driver, posting to the
agent's own API path and holding on to a restarting agent.

A checkpointing framework's executor outlives its agent: the restarted agent waits
--executor_reregistration_timeout (2 s by default) for its executors to subscribe again
and kills the others (their tasks come back as new ones). On its way up the agent
answers first nothing (connection refused), then, for a few milliseconds (longer on a
busy machine), `404 Not Found.` (its HTTP server is up, the agent's own process not yet
there), then `503 Agent has not finished recovery`, then the subscription. pymesos
retries the first two kinds only, backs off 2, 4, 8 ... seconds, and takes the 404 as
fatal: its IO thread dies, the executor ends and takes its task with it. Here every one
of them is retried every RETRY_SECONDS, give or take a random quarter so the executors
of a node do not all knock in step (bench/reregistration.py measures it).

On an agent run with `--authenticate_http_executors` every call must carry the token the
agent gave the executor in MESOS_EXECUTOR_AUTHENTICATION_TOKEN (`Authorization: Bearer`,
a JWT signed with the agent's --executor_secret_key); pymesos sends none. Here the token
goes on SUBSCRIBE and on every call, and leaves the environment, so no task or child
inherits it (as Mesos' own executors do). Without one (an agent that does not ask) no
header is sent.
"""
import logging
import os
import random
import time
import uuid
from typing import Any, Mapping, Optional

import pymesos.process
from pymesos import Executor, MesosExecutorDriver, decode_data, encode_data
from pymesos.utils import parse_duration

import framework.scheduling.mesos_driver  # noqa: F401  (no interrupt_main from pymesos' IO thread)

log = logging.getLogger("mesos-gpu.executor")

NOT_ROUTED_YET = "Failed with HTTP 404"     # pymesos' RuntimeError for a 404 answer
TOKEN_ENV = "MESOS_EXECUTOR_AUTHENTICATION_TOKEN"
REFUSED = "Failed with HTTP 401"            # ... for an unauthenticated call


def agent_api_path(env: Mapping[str, str] = os.environ) -> str:
    if env.get("MESOS_EXECUTOR_API_PATH"):
        return env["MESOS_EXECUTOR_API_PATH"]
    pid = env.get("MESOS_SLAVE_PID", "")
    if "@" in pid:
        return f"/{pid.split('@', 1)[0]}/api/v1/executor"
    return "/api/v1/executor"


def duration_env(name: str, default: float, env: Mapping[str, str] = os.environ) -> float:
    """A Mesos duration the agent passes in the environment ("15mins", "2secs")."""
    text = env.get(name)
    if not text:
        return default
    try:
        return parse_duration(text)
    except (ValueError, KeyError, IndexError):
        log.warning("%s=%r is not a duration: using %gs", name, text, default)
        return default


class AgentPathExecutorDriver(MesosExecutorDriver):
    """pymesos' executor driver posting to the agent's own API path, re-subscribing
    to a restarted agent quickly enough to be recovered.

    pymesos backs off 2, 4, 8 ... seconds between connection attempts: ours retries
    every RETRY_SECONDS, never more than MESOS_SUBSCRIPTION_BACKOFF_MAX apart (the
    agent's own bound), whatever the agent answered (module docstring)."""
    RETRY_SECONDS = 0.2
    retry_not_found = True           # _Connection: a 404 or 503 to SUBSCRIBE is retried

    def __init__(self, executor: Executor, path: str) -> None:
        super().__init__(executor)
        self.path = path
        self.backoff_max = duration_env("MESOS_SUBSCRIPTION_BACKOFF_MAX", 2.0)
        token = os.environ.pop(TOKEN_ENV, None)
        self._authorization = f"Bearer {token}" if token else None
        log.info("calling the agent %s", "with the token it gave (executor authentication)"
                 if token else "without a token (the agent gave none)")

    def retry_delay(self) -> float:
        """RETRY_SECONDS +-25 %, within the agent's bound: every executor of a restarted
        agent retries, and in step they would arrive together each time."""
        return min(self.backoff_max, self.RETRY_SECONDS * random.uniform(0.75, 1.25))

    def _backoff(self, num_conn_retry: int) -> float:
        return self.retry_delay()

    def gen_request(self) -> bytes:
        request = super().gen_request().replace(b"POST /api/v1/executor ",
                                                f"POST {self.path} ".encode(), 1)
        if self._authorization is None:
            return request
        return request.replace(b"\r\n", f"\r\nAuthorization: {self._authorization}\r\n"
                               .encode(), 1)

    def _send(self, body: Any, path: Optional[str] = None, method: str = "POST",
              headers: Optional[dict] = None) -> Any:
        headers = dict(headers or {})
        if self._authorization is not None:
            headers["Authorization"] = self._authorization
        return super()._send(body, path or self.path, method, headers)

    def sendStatusUpdate(self, status: dict) -> None:
        """Keep each update until the agent acknowledges it (pymesos does not):
        they are re-sent on re-subscription and the executor waits for them
        before it exits."""
        status.setdefault("uuid", encode_data(uuid.uuid4().bytes))
        status.setdefault("source", "SOURCE_EXECUTOR")
        self.updates[uuid.UUID(bytes=decode_data(status["uuid"]))] = {"status": status}
        try:
            super().sendStatusUpdate(status)
        except (RuntimeError, OSError) as e:     # the agent is away (restarting)
            log.warning("status update %s of task %s not sent now (%s): it goes out when "
                        "the agent is back", status["state"], status["task_id"]["value"], e)


class _Connection(pymesos.process.Connection):
    """pymesos' connection, for a driver that asks (`retry_not_found`): a 404 before
    the event stream began is the agent not yet up, retried, not the end; a 503 (still
    recovering) is retried after the same pause, not at once: a busy loop of every
    executor on the node would take the CPU from the agent's own recovery."""

    def read(self) -> bool:
        retry = getattr(self._callback, "retry_not_found", False)
        try:
            alive = super().read()
        except RuntimeError as e:
            if self._stream_id is None and str(e).startswith(REFUSED):
                _say_refused(self._callback)
            if not (retry and self._stream_id is None and str(e).startswith(NOT_ROUTED_YET)):
                raise
            log.warning("the agent is not up yet (HTTP 404 to SUBSCRIBE): retrying")
            alive = False
        if not alive and retry and self._stream_id is None:
            time.sleep(self._callback.retry_delay())   # then pymesos connects again
        return alive


def _say_refused(driver: Any) -> None:
    """One line for an agent that refuses this executor as unauthenticated."""
    if getattr(driver, "_authorization", None):
        log.error("the agent refused this executor's token (HTTP 401): was the agent's "
                  "--executor_secret_key changed since it started the executor?")
    else:
        log.error("the agent refused this executor (HTTP 401): it runs with "
                  "--authenticate_http_executors and gave it no token (%s)", TOKEN_ENV)


pymesos.process.Connection = _Connection


