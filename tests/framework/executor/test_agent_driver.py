"""Our executor's driver holds on to a restarting agent. A Mesos 1.11 agent on its way
up answers the executor's SUBSCRIBE first `404 Not Found.` (its HTTP server is up, the
agent's process not yet: a few milliseconds, longer on a busy machine; measured on the
bed's agent), then `503 Agent has not finished recovery`, then the event stream.
pymesos took the 404 as fatal: its IO thread died, the executor exited and its task was
lost ("Executor terminated"). The agent here is a socket replaying those answers
byte for byte, so that the window is hit every time, not once in a loaded run (the
real agent's restart: tests/framework/mesos_api/test_drivers_on_mesos.py)."""
import json
import os
import socket
import threading
import time

import pytest

from framework.executor.agent_driver import AgentPathExecutorDriver

PATH = "/slave(1)/api/v1/executor"
FRAMEWORK, EXECUTOR = "fw-0001", "mesos-gpu.app.1"
NOT_UP = b"HTTP/1.1 404 Not Found\r\nContent-Length: 14\r\n\r\n404 Not Found."
RECOVERING = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 31\r\n\r\n"
              b"Agent has not finished recovery")


def subscribed_stream() -> bytes:
    event = json.dumps({"type": "SUBSCRIBED", "subscribed": {
        "executor_info": {"executor_id": {"value": EXECUTOR}},
        "framework_info": {"id": {"value": FRAMEWORK}, "user": "root", "name": "fw"},
        "agent_info": {"hostname": "restarted-agent"}}}).encode()
    record = str(len(event)).encode() + b"\n" + event
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Mesos-Stream-Id: stream-1\r\nTransfer-Encoding: chunked\r\n\r\n"
            + f"{len(record):x}".encode() + b"\r\n" + record + b"\r\n")


class RestartingAgent:
    """Answers each connection's request with the next of `answers`; the last one's
    connection stays open (the event stream)."""

    def __init__(self, answers) -> None:
        self.answers = list(answers)
        self.requests = []
        self.heads = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.open = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return "127.0.0.1:%d" % self.sock.getsockname()[1]

    def _serve(self) -> None:
        while self.answers:
            conn, _ = self.sock.accept()
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            self.requests.append(request.split(b"\r\n", 1)[0].decode())
            self.heads.append(request.split(b"\r\n\r\n", 1)[0].decode())
            conn.sendall(self.answers.pop(0))
            if self.answers:
                conn.close()
            else:
                self.open.append(conn)

    def close(self) -> None:
        for conn in self.open:
            conn.close()
        self.sock.close()


@pytest.fixture
def agent_env(monkeypatch):
    def start(answers) -> RestartingAgent:
        agent = RestartingAgent(answers)
        monkeypatch.setenv("MESOS_AGENT_ENDPOINT", agent.endpoint)
        monkeypatch.setenv("MESOS_FRAMEWORK_ID", FRAMEWORK)
        monkeypatch.setenv("MESOS_EXECUTOR_ID", EXECUTOR)
        monkeypatch.setenv("MESOS_CHECKPOINT", "1")
        return agent
    return start


def run_driver(driver_class, agent):
    done = threading.Event()

    class Executor:
        def registered(self, *args):
            done.set()

        def __getattr__(self, name):
            return lambda *args: None

    driver = driver_class(Executor(), PATH)
    driver.start()
    try:
        deadline = time.monotonic() + 10
        while not (done.is_set() or driver.aborted) and time.monotonic() < deadline:
            time.sleep(0.05)
        return done.is_set(), driver.aborted
    finally:
        driver.stop()
        agent.close()


def test_the_driver_subscribes_through_the_agents_404_and_503(agent_env):
    agent = agent_env([NOT_UP, RECOVERING, subscribed_stream()])
    registered, aborted = run_driver(AgentPathExecutorDriver, agent)
    assert registered and not aborted
    assert agent.requests == [f"POST {PATH} HTTP/1.1"] * 3


def test_a_refusal_other_than_not_yet_ends_the_driver(agent_env):
    """401 (a bad token) is not the agent on its way up: no retry for ever."""
    refused = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n"
    agent = agent_env([refused, subscribed_stream()])
    registered, aborted = run_driver(AgentPathExecutorDriver, agent)
    assert not registered and aborted
    assert agent.requests == [f"POST {PATH} HTTP/1.1"]


def test_the_agents_token_goes_on_subscribe_and_leaves_the_environment(agent_env, monkeypatch):
    """An agent run with --authenticate_http_executors gives the executor a token; every
    call carries it (the secure bed's end-to-end cases show the agent taking them)."""
    monkeypatch.setenv("MESOS_EXECUTOR_AUTHENTICATION_TOKEN", "eyJ.token.sig")
    agent = agent_env([RECOVERING, subscribed_stream()])
    registered, aborted = run_driver(AgentPathExecutorDriver, agent)
    assert registered and not aborted
    assert all("Authorization: Bearer eyJ.token.sig" in head.split("\r\n") for head in agent.heads)
    assert len(agent.heads) == 2
    assert "MESOS_EXECUTOR_AUTHENTICATION_TOKEN" not in os.environ   # no task inherits it


def test_no_token_no_authorization_header(agent_env, monkeypatch):
    monkeypatch.delenv("MESOS_EXECUTOR_AUTHENTICATION_TOKEN", raising=False)
    agent = agent_env([subscribed_stream()])
    registered, _ = run_driver(AgentPathExecutorDriver, agent)
    assert registered
    assert "authorization" not in agent.heads[0].lower()


def test_retries_are_jittered_within_the_agents_bound(agent_env):
    agent_env([])
    driver = AgentPathExecutorDriver(object(), PATH)
    delays = {driver.retry_delay() for _ in range(200)}
    assert len(delays) > 100                       # not all in step
    assert all(0.75 * driver.RETRY_SECONDS <= d <= 1.25 * driver.RETRY_SECONDS for d in delays)
    driver.backoff_max = 0.1
    assert max(driver.retry_delay() for _ in range(50)) <= 0.1


class RecordingAgent:
    """Answers SUBSCRIBE with the next of `streams` (each a list of events; the last
    stream stays open) and every other call with 202; keeps each call's JSON body."""

    def __init__(self, streams) -> None:
        self.streams = list(streams)
        self.calls = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.open = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return "127.0.0.1:%d" % self.sock.getsockname()[1]

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn) -> None:
        data = b""
        while True:
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, data = data.split(b"\r\n\r\n", 1)
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            while len(data) < length:
                data += conn.recv(65536)
            body, data = json.loads(data[:length]), data[length:]
            self.calls.append(body)
            if body["type"] != "SUBSCRIBE":
                conn.sendall(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
                continue
            events = self.streams.pop(0)
            records = b"".join(str(len(e)).encode() + b"\n" + e
                               for e in (json.dumps(e).encode() for e in events))
            conn.sendall(b"HTTP/1.1 200 OK\r\nMesos-Stream-Id: s\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n"
                         + f"{len(records):x}".encode() + b"\r\n" + records + b"\r\n")
            if self.streams:
                conn.close()                   # the agent goes away
            else:
                self.open.append(conn)
            return


def test_a_resubscription_names_what_the_agent_has_not_acknowledged(agent_env, monkeypatch):
    subscribed = {"type": "SUBSCRIBED", "subscribed": {
        "executor_info": {"executor_id": {"value": EXECUTOR}},
        "framework_info": {"id": {"value": FRAMEWORK}}, "agent_info": {"hostname": "a"}}}
    task = {"task_id": {"value": "t-1"}, "name": "t-1", "agent_id": {"value": "S0"}}
    agent = RecordingAgent([[subscribed, {"type": "LAUNCH", "launch": {"task": task}}],
                            [subscribed]])
    agent_env([]).close()
    monkeypatch.setenv("MESOS_AGENT_ENDPOINT", agent.endpoint)
    back = threading.Event()

    class Executor:
        def launchTask(self, driver, launched):
            driver.sendStatusUpdate({"task_id": launched["task_id"], "state": "TASK_RUNNING"})

        def reregistered(self, driver, agent_info):
            back.set()

        def __getattr__(self, name):
            return lambda *args: None

    driver = AgentPathExecutorDriver(Executor(), PATH)
    driver.start()
    try:
        assert back.wait(10)
    finally:
        driver.stop()
    first, update, again = agent.calls
    assert first["subscribe"] == {"unacknowledged_tasks": [], "unacknowledged_updates": []}
    assert update["type"] == "UPDATE" and update["update"]["status"]["state"] == "TASK_RUNNING"
    assert again["type"] == "SUBSCRIBE"
    assert again["subscribe"]["unacknowledged_tasks"] == [task]
    assert again["subscribe"]["unacknowledged_updates"] == [update["update"]]
    assert update["update"]["status"]["source"] == "SOURCE_EXECUTOR"
    assert update["update"]["status"]["uuid"] and update["executor_id"] == {"value": EXECUTOR}


UNAUTHORIZED = (b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"mesos-agent-"
                b"executor\"\r\nContent-Length: 17\r\n\r\n401 Unauthorized.")


@pytest.mark.parametrize("token", [None, "eyJ.stale.sig"])
def test_an_agent_refusing_the_executor_is_one_line_naming_why(agent_env, monkeypatch, caplog,
                                                               token):
    if token:
        monkeypatch.setenv("MESOS_EXECUTOR_AUTHENTICATION_TOKEN", token)
    else:
        monkeypatch.delenv("MESOS_EXECUTOR_AUTHENTICATION_TOKEN", raising=False)
    agent = agent_env([UNAUTHORIZED])
    registered, aborted = run_driver(AgentPathExecutorDriver, agent)
    assert not registered and aborted                # refused: not retried for ever
    said = [r.getMessage() for r in caplog.records if "HTTP 401" in r.getMessage()
            and r.name == "mesos-gpu.executor"]
    assert len(said) == 1 and "\n" not in said[0]
    assert ("token" in said[0]) and (("--authenticate_http_executors" in said[0]) != bool(token))
    assert not token or token not in said[0]
