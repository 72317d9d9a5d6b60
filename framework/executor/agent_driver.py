"""How our executor talks to its Mesos agent: our v1 executor driver
(framework.mesos_api.executor_driver), posting to the agent's own API path and holding
on to a restarting agent.

A checkpointing framework's executor outlives its agent: the restarted agent waits
--executor_reregistration_timeout (2 s by default) for its executors to subscribe again
and kills the others (their tasks come back as new ones). On its way up the agent
answers first nothing (connection refused), then, for a few milliseconds (longer on a
busy machine), `404 Not Found.` (its HTTP server is up, the agent's own process not yet
there), then `503 Agent has not finished recovery`, then the subscription. Every one of
them is retried every RETRY_SECONDS, give or take a random quarter so the executors
of a node do not all knock in step (bench/reregistration.py measures it).

On an agent run with `--authenticate_http_executors` every call must carry the token the
agent gave the executor in MESOS_EXECUTOR_AUTHENTICATION_TOKEN (`Authorization: Bearer`,
a JWT signed with the agent's --executor_secret_key). Here the token goes on SUBSCRIBE
and on every call, and leaves the environment, so no task or child inherits it (as
Mesos' own executors do). Without one (an agent that does not ask) no header is sent.
"""
import logging
import os
import random
from typing import Any, Mapping

from framework.mesos_api.executor_driver import ExecutorDriver
from framework.mesos_api.values import parse_duration

log = logging.getLogger("mesos-gpu.executor")

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
    except ValueError:
        log.warning("%s=%r is not a duration: using %gs", name, text, default)
        return default


class AgentPathExecutorDriver(ExecutorDriver):
    """The executor driver posting to the agent's own API path with the agent's token,
    re-subscribing to a restarted agent quickly enough to be recovered: every
    RETRY_SECONDS, never more than MESOS_SUBSCRIPTION_BACKOFF_MAX apart (the agent's own
    bound), whatever the agent answered (module docstring)."""
    RETRY_SECONDS = 0.2

    def __init__(self, executor: Any, path: str) -> None:
        token = os.environ.pop(TOKEN_ENV, None)
        super().__init__(executor, path, f"Bearer {token}" if token else None)
        self.backoff_max = duration_env("MESOS_SUBSCRIPTION_BACKOFF_MAX", 2.0)
        log.info("calling the agent %s", "with the token it gave (executor authentication)"
                 if token else "without a token (the agent gave none)")

    def retry_delay(self) -> float:
        """RETRY_SECONDS +-25 %, within the agent's bound: every executor of a restarted
        agent retries, and in step they would arrive together each time."""
        return min(self.backoff_max, self.RETRY_SECONDS * random.uniform(0.75, 1.25))

    def refused(self, error) -> None:
        """A 401 is executor authentication: say which side of it failed, in one line."""
        if error.status != 401:
            return super().refused(error)
        if self._authorization:
            log.error("the agent refused this executor's token (HTTP 401): was the agent's "
                      "--executor_secret_key changed since it started the executor?")
        else:
            log.error("the agent refused this executor (HTTP 401): it runs with "
                      "--authenticate_http_executors and gave it no token (%s)", TOKEN_ENV)
