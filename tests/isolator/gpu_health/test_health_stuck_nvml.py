"""NVML calls that hang (a driver in trouble: nvidia-smi stuck for minutes), made
with the fake NVML's `delay` control, in the real agent daemon: its API and /metrics
answer while the health monitor's poll and event wait are stuck, the stuck calls are
named, and when they answer, polling and events go on."""
import functools
import signal
import socket
import time
import urllib.request

import pytest

from localcluster.fake_nvml.control import Control
from tests.bed import waiting
from tests.bed.prometheus import families as parse, values
from tests.bed.cgroups import new_prober

FAST = ["--health_poll_interval", "0.2", "--health_quiet_period", "30",
        "--reconcile_interval", "0.5"]
STALL = 8.0             # seconds each stuck call takes; the monitor names it after 2
wait_until = functools.partial(waiting.wait_until, interval=0.05)


@pytest.fixture
def node(daemon_factory, tmp_path):
    def start(extra=()):
        control = tmp_path / "nvml.control"
        agent = daemon_factory("v100x8", extra=[*FAST, *extra], control=control)
        agent.nvml = Control(control)
        return agent
    return start


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _state(agent, minor):
    return next(g for g in agent.client.health().gpus if g.minor == minor)


def test_the_api_answers_while_the_monitors_nvml_calls_hang(node, probers):
    port = _port()
    agent = node(["--metrics_address", f"127.0.0.1:{port}"])
    c = agent.client
    n = agent.nvml
    wait_until(lambda: parse(c.metrics())["mesos_gpu_gpu_sample_age_seconds"].samples, 5,
               "a first poll")
    n.delay("nvmlDeviceGetRetiredPages", STALL, times=1)     # the poll thread's next one
    n.delay("nvmlEventSetWait", STALL, times=1)              # the event thread's next wait
    stuck_at = time.monotonic()
    wait_until(lambda: all(f in c.health().monitor for f in (
        "nvmlDeviceGetRetiredPages (GPU", "nvmlEventSetWait")), 5, "both stuck calls named")
    print("named stuck after", round(time.monotonic() - stuck_at, 2), "s:", c.health().monitor)
    # meanwhile: an XID (waits in the event set) and pages pending (seen by a poll)
    n.xid(1, 79)
    n.retired_pages(2, dbe=1, pending=True)

    def scrape():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            return r.read().decode()
    task = new_prober(probers)
    took = {}

    def timed(name, call):
        started = time.monotonic()
        result = call()
        took[name] = round(time.monotonic() - started, 4)
        return result
    grant = timed("prepare", lambda: c.prepare("during", 1))
    timed("isolate", lambda: c.isolate("during", pid=task.pid))
    timed("info", c.info)
    timed("health", c.health)
    timed("usage", lambda: c.usage("during"))                # its own NVML calls answer
    unix = timed("metrics (unix socket)", c.metrics)
    tcp = timed("metrics (--metrics_address)", scrape)
    timed("cleanup", lambda: c.cleanup("during"))
    print("API while NVML hangs (s):", took)
    # every answer came while the calls were still stuck (none waited for them)
    assert "nvmlDeviceGetRetiredPages" in c.health().monitor
    assert time.monotonic() - stuck_at < STALL
    assert grant.gpus and "during" not in c.info()["containers"]
    for text in (unix, tcp):
        rows = values(parse(text)["mesos_gpu_nvml_call_stuck_seconds"], "function")
        assert rows["nvmlDeviceGetRetiredPages"] >= 2 and rows["nvmlEventSetWait"] >= 2
        assert parse(text)["mesos_gpu_gpu_sample_age_seconds"].samples[0].value >= 2
    assert _state(agent, 1).state == "healthy"          # the event waits in the set
    # the calls answer: the XID arrives, polls go on and see the pages, nothing is named
    wait_until(lambda: _state(agent, 1).cause == "xid", STALL + 5, "the XID after the wait")
    wait_until(lambda: _state(agent, 2).cause == "retired_pages_pending", 5, "polls again")
    back = time.monotonic() - stuck_at
    print("events and polls again", round(back, 2), "s after the stall began")
    assert back >= STALL
    assert "has not answered" not in c.health().monitor
    families = parse(c.metrics())
    assert families["mesos_gpu_nvml_call_stuck_seconds"].samples == []
    assert families["mesos_gpu_gpu_sample_age_seconds"].samples[0].value < 2
    log = agent.log()
    assert "NVML nvmlDeviceGetRetiredPages (GPU" in log and "answered after" in log
    assert "NVML nvmlEventSetWait answered after" in log


def test_sigterm_while_a_poll_hangs_stops_the_daemon(node):
    agent = node()
    wait_until(lambda: parse(agent.client.metrics())["mesos_gpu_gpu_sample_age_seconds"].samples,
               5, "a first poll")
    agent.nvml.delay("nvmlDeviceGetTemperature", 600, times=1)
    wait_until(lambda: "nvmlDeviceGetTemperature" in agent.client.health().monitor, 5,
               "the poll stuck")
    started = time.monotonic()
    assert agent.stop(signal.SIGTERM, timeout=30) == 0
    print("stopped", round(time.monotonic() - started, 2), "s after SIGTERM")
    assert "NVML left initialised: NVML nvmlDeviceGetTemperature (GPU" in agent.log()
    assert "stopped:" in agent.log()


def test_usage_requests_stuck_in_nvml_leave_the_other_routes_free(node):
    """Usage asks NVML itself: while NVML hangs, a few usage requests wait on it and the
    next are refused at once by name, so the workers stay free (/metrics, Docker isolate)
    and nothing waits on another request's stuck call."""
    import threading
    from isolator.client import AgentClient, AgentError
    from isolator.containers.views import USAGE_SLOTS
    agent = node()
    c = agent.client
    for i in range(7):                        # one GPU left for a prepare meanwhile
        c.prepare(f"u{i}", 1)
    agent.nvml.delay("nvmlDeviceGetUtilizationRates", STALL)          # every call, poll's too
    answers, errors = {}, {}

    def ask(i):
        client = AgentClient(str(agent.work_dir / "agent.sock"), timeout=60)
        started = time.monotonic()
        try:
            answers[i] = (client.usage(f"u{i % 7}"), time.monotonic() - started)
        except AgentError as e:
            errors[i] = (e, time.monotonic() - started)
    asked = time.monotonic()
    threads = [threading.Thread(target=ask, args=(i,)) for i in range(USAGE_SLOTS + 6)]
    for t in threads:
        t.start()
    wait_until(lambda: len(errors) == 6, 5, "the usage requests past the slots refused")
    took = {}
    for name, call in (("metrics", c.metrics), ("info", c.info), ("health", c.health),
                       ("prepare", lambda: c.prepare("late", 1)),
                       ("cleanup", lambda: c.cleanup("late"))):
        started = time.monotonic()
        call()
        took[name] = round(time.monotonic() - started, 4)
    print("API while 4 usage requests hang in NVML (s):", took)
    assert time.monotonic() - asked < STALL and not answers        # the four still wait
    for e, seconds in errors.values():
        assert e.status == 503 and "usage requests are still waiting on NVML" in str(e)
    agent.nvml.heal("nvmlDeviceGetUtilizationRates")
    for t in threads:
        t.join(30)
    assert len(answers) == USAGE_SLOTS
    assert all(seconds >= STALL - 1 and u.gpus for u, seconds in answers.values())
    assert c.usage("u0").gpus                                   # the slots are free again
