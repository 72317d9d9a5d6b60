"""The executor's health checker: one task's Mesos-level health check
(framework.tasks.health_check), run next to it as Mesos's own checker runs it.

- MESOS_HTTP / MESOS_HTTPS: GET http(s)://127.0.0.1:<port><path> from inside
  the task's network namespace (a thread that entered it); 200-399 is healthy
  (HTTPS certificates are not verified);
- MESOS_TCP: a TCP connect to 127.0.0.1:<port> there;
- COMMAND: `/bin/sh -c <command>` inside all the task's namespaces, with its
  environment; exit code 0 is healthy.

Timing (mesos.HealthCheck): the first check `delay` seconds after the task
runs, then one every `interval`; a check that takes longer than `timeout` fails
(a command is killed). Failures within `grace_period` of the start are not
counted until a check has succeeded. Each counted failure and each return to
health is reported (`on_change`); after `max_failures` consecutive failures
(0: the first) the task is killed (`on_kill`).
"""
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Tuple

from framework.tasks import probes
from framework.executor import namespaces
from framework.tasks.health_check import COMMAND, MESOS_HTTPS, MESOS_TCP, HealthCheck

log = logging.getLogger(__name__)

OUTPUT_LIMIT = 2048          # bytes of a failed command's output kept for the cause


@dataclass(frozen=True)
class HealthStatus:
    """What one check (and the ones before it) found."""
    healthy: bool
    consecutive_failures: int
    cause: str = ""          # why the last check failed
    kill: bool = False


class HealthChecker:
    """Runs `check` against the task whose namespaces process `pid()` holds."""

    def __init__(self, check: HealthCheck, port: Optional[int], pid: Callable[[], Optional[int]],
                 env: Mapping[str, str], on_change: Callable[[HealthStatus], None],
                 on_kill: Callable[[HealthStatus], None], name: str = "") -> None:
        self.check = check
        self.port = port
        self.pid = pid
        self.env = dict(env)
        self.on_change = on_change
        self.on_kill = on_kill
        self.name = name
        self.stopped = threading.Event()
        self.consecutive_failures = 0
        self.succeeded = False
        self._process: Optional[subprocess.Popen] = None
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"health-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stopped.set()
        process = self._process
        if process is not None and process.poll() is None:
            _kill_group(process)

    # -- the loop (its own thread: it may enter the task's network namespace) --------
    def _run(self) -> None:
        started = time.monotonic()
        if self.stopped.wait(self.check.delay):
            return
        entered = self.check.protocol == COMMAND
        while not self.stopped.is_set():
            if not entered:
                entered = self._enter()
            ok, cause = self._probe() if entered else (False, self._enter_error)
            if self.stopped.is_set():
                return
            self._record(ok, cause, time.monotonic() - started)
            if self.stopped.wait(self.check.interval):
                return

    _enter_error = ""

    def _enter(self) -> bool:
        pid = self.pid()
        if pid is None:
            self._enter_error = "the task has no process to check"
            return False
        try:
            namespaces.enter_network(pid)
            return True
        except OSError as e:
            self._enter_error = str(e)
            return False

    def _record(self, ok: bool, cause: str, elapsed: float) -> None:
        if ok:
            first = not self.succeeded
            recovered = self.consecutive_failures > 0
            self.succeeded = True
            self.consecutive_failures = 0
            if first or recovered:
                log.info("health check of %s passed", self.name)
                self.on_change(HealthStatus(True, 0))
            return
        if not self.succeeded and elapsed <= self.check.grace_period:
            log.info("health check of %s failed within its grace period (%.0fs): %s", self.name,
                     self.check.grace_period, cause)
            return
        self.consecutive_failures += 1
        kill = self.consecutive_failures >= self.check.max_failures
        status = HealthStatus(False, self.consecutive_failures, cause, kill)
        log.warning("health check of %s failed (%d in a row): %s", self.name,
                    self.consecutive_failures, cause)
        self.on_change(status)
        if kill:
            self.stopped.set()
            self.on_kill(status)

    # -- one check ---------------------------------------------------------------------
    def _probe(self) -> Tuple[bool, str]:
        protocol = self.check.protocol
        try:
            if protocol == COMMAND:
                return self._command()
            if protocol == MESOS_TCP:
                return self._tcp()
            return self._http(protocol == MESOS_HTTPS)
        except Exception as e:            # a check never takes the executor down
            log.exception("health check of %s could not run", self.name)
            return False, f"the check could not run: {e}"

    def _address(self) -> Tuple[str, int]:
        return ("::1" if self.check.ipv6 else "127.0.0.1"), int(self.port or 0)

    def _tcp(self) -> Tuple[bool, str]:
        host, port = self._address()
        try:
            probes.tcp_connect(host, port, self.check.timeout)
            return True, ""
        except probes.ProbeError as e:
            return False, str(e)

    def _http(self, https: bool) -> Tuple[bool, str]:
        """Mesos's HTTP check: 200-399 is healthy."""
        host, port = self._address()
        try:
            answer = probes.http_get(host, port, self.check.path or "/", https,
                                     self.check.timeout)
        except probes.ProbeError as e:
            return False, str(e)
        if 200 <= answer.status < 400:
            return True, ""
        url = probes.url_of(host, port, self.check.path or "/", https)
        return False, f"GET {url}: HTTP {answer.status} {answer.reason}"

    def _command(self) -> Tuple[bool, str]:
        pid = self.pid()
        if pid is None:
            return False, "the task has no process to check"
        argv = namespaces.nsenter_argv(pid) + ["/bin/sh", "-c", self.check.command]
        # A process group of its own (to kill it whole on a timeout), in the
        # executor's session (so Mesos kills it with the executor).
        process = subprocess.Popen(argv, env=self.env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   process_group=0)
        self._process = process
        try:
            output, _ = process.communicate(timeout=self.check.timeout or None)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            process.communicate()
            return False, (f"command timed out after {self.check.timeout:g}s and was killed: "
                           f"{self.check.command}")
        finally:
            self._process = None
        if process.returncode == 0:
            return True, ""
        text = output[-OUTPUT_LIMIT:].decode(errors="replace").strip()
        code = process.returncode
        ended = f"exited with code {code}" if code >= 0 else f"was killed by signal {-code}"
        return False, f"command {ended}" + (f": {text}" if text else "")


def _kill_group(process: subprocess.Popen) -> None:
    """Kill a check's processes, nsenter last.

    nsenter's child lives in the task's PID namespace; orphaned by nsenter's
    death it would be handed to this executor (a subreaper), which never reaps
    it, and that zombie would keep the task's PID namespace (its container)
    from ever ending. So the processes of the group are killed first, nsenter
    reaps them and exits; only if it does not is it killed too."""
    for _ in range(3):
        others = [pid for pid in _group_members(process.pid) if pid != process.pid]
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            process.wait(timeout=1.0)
            return
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _group_members(pgid: int) -> list:
    """The processes of process group `pgid` (from /proc)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            members.append(int(entry))
    return members
