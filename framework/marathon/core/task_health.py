"""Task health as the Marathon API shows it, and the health checks the framework
runs itself (HTTP, HTTPS, TCP), beside the Mesos-level ones the executor runs and
reports in status updates: one view (`results`, `healthy`), as Marathon 1.10's
HealthCheckManager gives it. The rules (grace period, consecutive failures, kills,
events): ARCHITECTURE.md, "Task health checks".
"""
import logging
import time
from dataclasses import dataclass, fields
from typing import Callable, Dict, List, Optional, Set, Tuple

from framework.tasks import probes
from framework.marathon.core.check_runner import TICK_SECONDS, CheckRunner
from framework.marathon.state.health_checks import MESOS_PROTOCOLS
from framework.marathon.state.health_checks import HealthCheckDefinition
from framework.marathon.core.group_manager import GroupManager
from framework.scheduling.task_record import RUNNING, TaskRecord
from framework.tasks.timestamps import format_timestamp

log = logging.getLogger(__name__)

HEALTH = "health"              # the store's kind for framework-level results, by task id
FIRST_CHECK_AFTER = 10.0       # Marathon: the first check within min(interval, 10 s)
WORKERS = 8


@dataclass
class Health:
    """Marathon's Health of one task for one check."""
    first_success: Optional[float] = None
    last_success: Optional[float] = None
    last_failure: Optional[float] = None
    last_failure_cause: Optional[str] = None
    consecutive_failures: int = 0

    @property
    def alive(self) -> bool:
        return self.last_success is not None and (
            self.last_failure is None or self.last_success > self.last_failure)

    def to_json(self, task_id: str) -> dict:
        out: dict = {"alive": self.alive, "consecutiveFailures": self.consecutive_failures,
                     "instanceId": task_id}
        for name, key in (("first_success", "firstSuccess"), ("last_success", "lastSuccess"),
                          ("last_failure", "lastFailure")):
            if getattr(self, name) is not None:
                out[key] = format_timestamp(getattr(self, name))
        if self.last_failure_cause is not None:
            out["lastFailureCause"] = self.last_failure_cause
        return out

    def stored(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_record(cls, record: TaskRecord) -> Optional["Health"]:
        """The executor's report of a Mesos-level check, from the task's record."""
        if record.healthy is None:
            return None
        h = record.health
        return cls(h.get("firstSuccess"), h.get("lastSuccess"), h.get("lastFailure"),
                   h.get("lastFailureCause"), int(h.get("consecutiveFailures", 0)))


class TaskHealthMonitor(CheckRunner):
    def __init__(self, group_manager: GroupManager, clock=time.time,
                 on_result: Callable[[bool], None] = lambda alive: None) -> None:
        super().__init__("health", WORKERS)
        self.group_manager = group_manager
        self.clock = clock
        self.on_result = on_result      # each result of this framework's checks (/metrics)
        group_manager.task_health = self
        self._results: Dict[str, Dict[int, Health]] = {}
        # tasks killed for failing checks and not ended yet: a check that fails again
        # while the kill takes its time (a loaded node) kills and tells nothing new,
        # as Marathon skips an instance that is already being killed
        self._killing: Set[str] = set()
        for task_id, stored in group_manager.store.items(HEALTH).items():
            try:
                self._results[task_id] = {int(i): Health(**h) for i, h in stored.items()}
            except (TypeError, ValueError) as e:
                log.warning("dropping unreadable health of task %s: %s", task_id, e)
        self._due: Dict[Tuple[str, int], float] = {}
        self._in_flight: Set[Tuple[str, int]] = set()
        self._checks_of_version: Dict[Tuple[str, str], List[HealthCheckDefinition]] = {}

    # -- what the API shows (callers hold the group manager's lock) ---------------------------
    def checks_of(self, task: TaskRecord) -> List[HealthCheckDefinition]:
        """The health checks of the app version that launched `task` (read once per
        app configuration: a change of checks is a change of configuration)."""
        app = self.group_manager.apps.get(task.app_id)
        if app is None:
            return []
        current = app["versionInfo"]["lastConfigChangeAt"]
        if current == task.config_version or not task.app_version:
            key, source = (task.app_id, current), app
        else:
            key, source = (task.app_id, task.app_version), None
        checks = self._checks_of_version.get(key)
        if checks is None:
            if source is None:
                source = self.group_manager.history.app_at(task.app_id, task.app_version) or app
            checks = self._checks_of_version[key] = [
                HealthCheckDefinition.from_json(c) for c in source.get("healthChecks") or []]
        return checks

    def results(self, task: TaskRecord) -> List[Health]:
        """The task's Health for each check that has a result (checks' order)."""
        out = []
        mine = self._results.get(task.id, {})
        for i, check in enumerate(self.checks_of(task)):
            if check.protocol in MESOS_PROTOCOLS:
                health = Health.from_record(task)
            else:
                health = mine.get(i)
            if health is not None:
                out.append(health)
        return out

    def results_json(self, task: TaskRecord) -> List[dict]:
        return [h.to_json(task.id) for h in self.results(task)]

    def healthy(self, task: TaskRecord) -> Optional[bool]:
        """True: every check has a result and all are alive; False: some result
        is not alive; None: not every check has reported yet (or none exist)."""
        checks = self.checks_of(task)
        if not checks:
            return None
        results = self.results(task)
        if any(not h.alive for h in results):
            return False
        return True if len(results) == len(checks) else None

    def ready_for_deployment(self, app: dict, task: TaskRecord) -> bool:
        """A running task counts for a deployment: healthy when the app has checks."""
        if task.state != RUNNING:
            return False
        return not app.get("healthChecks") or self.healthy(task) is True

    # -- the executor's reports (the instance keeper, under the group manager's lock) ----
    def observe(self, before: Optional[TaskRecord], record: TaskRecord) -> None:
        """A task's record changed: publish what changed in its Mesos-level health."""
        if record.terminal:
            self.forget(record.id)
            if record.health.get("killed") and not (before and before.health.get("killed")):
                self._publish_kill(record, record.health.get("lastFailureCause") or "unknown")
            return
        was = Health.from_record(before) if before is not None else None
        now = Health.from_record(record)
        if now is None:
            return
        check = next((c.to_json() for c in self.checks_of(record)
                      if c.protocol in MESOS_PROTOCOLS), {})
        if now.consecutive_failures > (was.consecutive_failures if was else 0):
            self.group_manager.events.publish("failed_health_check_event", appId=record.app_id,
                                         taskId=record.id, instanceId=record.id,
                                         healthCheck=check)
        if was is None or was.alive != now.alive:
            self._publish_alive(record, now.alive)

    def forget(self, task_id: str) -> None:
        self._killing.discard(task_id)
        if self._results.pop(task_id, None) is not None:
            self._write(task_id, None)
        for key in [k for k in self._due if k[0] == task_id]:
            del self._due[key]

    # -- the framework's own checks ---------------------------------------------------------
    def due_jobs(self) -> List[Tuple]:
        now = self.clock()
        jobs = []
        with self.group_manager.lock:
            live = set()
            for task in self.group_manager.tasks.values():
                if task.state != RUNNING or task.kill_requested \
                        or task.id in self.group_manager.kill_requested:
                    continue
                for i, check in enumerate(self.checks_of(task)):
                    if not check.run_by_framework:
                        continue
                    key = (task.id, i)
                    live.add(key)
                    due = self._due.get(key)
                    if due is None:
                        started = task.started_at or now
                        due = self._due[key] = started + min(check.interval_seconds,
                                                             FIRST_CHECK_AFTER)
                    if due <= now and key not in self._in_flight:
                        self._in_flight.add(key)
                        self._due[key] = now + max(check.interval_seconds, TICK_SECONDS)
                        jobs.append((self._check, (task.copy(), i, check)))
            for key in set(self._due) - live:
                del self._due[key]
        return jobs

    def _check(self, task: TaskRecord, index: int, check: HealthCheckDefinition) -> None:
        try:
            outcome, cause = self._probe(task, check)
            with self.group_manager.lock:
                current = self.group_manager.tasks.get(task.id)
                if current is not None and current.state == RUNNING:
                    self._record(current, index, check, outcome, cause)
        except Exception:
            log.exception("health check of %s failed to run", task.id)
        finally:
            with self.group_manager.lock:
                self._in_flight.discard((task.id, index))

    def _probe(self, task: TaskRecord, check: HealthCheckDefinition) -> Tuple[Optional[bool], str]:
        """(True alive / False not / None ignored, the failure's cause)."""
        host = task.hostname
        port = check.port
        if port is None:
            port = host_port(task, check.port_index or 0)
        if not host or not port:
            return False, "Health check failed: unable to get the task's effectivePort"
        timeout = float(check.timeout_seconds)
        try:
            if check.protocol == "TCP":
                probes.tcp_connect(host, port, timeout)
                return True, ""
            answer = probes.http_get(host, port, check.path or "/",
                                     check.protocol == "HTTPS", timeout)
        except probes.ProbeError as e:
            return False, str(e)
        if 200 <= answer.status < 400:
            return True, ""
        if check.ignore_http_1xx and 100 <= answer.status < 200:
            return None, ""
        return False, f"{answer.status} {answer.reason}".strip()

    def _record(self, task: TaskRecord, index: int, check: HealthCheckDefinition,
                alive: Optional[bool], cause: str) -> None:
        """One result, as HealthCheckActor.handleHealthResult (group manager's lock held)."""
        if alive is None:
            return
        results = self._results.setdefault(task.id, {})
        health = results.get(index) or Health()
        was_alive, was_failures, was_task = health.alive, health.consecutive_failures, \
            self.healthy(task)
        now = self.clock()
        if alive:
            health.first_success = health.first_success or now
            health.last_success = now
            health.consecutive_failures = 0
        else:
            in_grace = health.first_success is None and \
                (task.started_at or now) + check.grace_period_seconds > now
            if in_grace:
                return
            self.group_manager.events.publish("failed_health_check_event", appId=task.app_id,
                                              taskId=task.id, instanceId=task.id,
                                              healthCheck=check.to_json())
            health.last_failure = now
            health.last_failure_cause = cause
            health.consecutive_failures += 1
            limit = check.max_consecutive_failures
            if limit > 0 and health.consecutive_failures >= limit:
                self._kill(task, health.consecutive_failures, cause)
        self.on_result(alive)
        results[index] = health
        if health.alive != was_alive or health.consecutive_failures != was_failures:
            self._write(task.id, results)
            self.group_manager.touched((task.app_id,))
        if health.alive != was_alive:
            self.group_manager.events.publish("health_status_changed_event", appId=task.app_id,
                                         instanceId=task.id, version=task.app_version,
                                         alive=health.alive)
        if self.healthy(task) != was_task and self.healthy(task) is not None:
            self._publish_instance(task, self.healthy(task))

    def _kill(self, task: TaskRecord, failures: int, cause: str) -> None:
        if task.id in self._killing:
            return
        self._killing.add(task.id)
        log.warning("task %s of %s failed %d health checks in a row: killing it (%s)", task.id,
                    task.app_id, failures, cause)
        self._publish_kill(task, cause)
        self.group_manager.request_kill(task.id)

    # -- events and the store -------------------------------------------------------------
    def _publish_alive(self, task: TaskRecord, alive: bool) -> None:
        self.group_manager.events.publish("health_status_changed_event", appId=task.app_id,
                                     instanceId=task.id, version=task.app_version, alive=alive)
        healthy = self.healthy(task)
        if healthy is not None:
            self._publish_instance(task, healthy)

    def _publish_instance(self, task: TaskRecord, healthy: bool) -> None:
        self.group_manager.events.publish("instance_health_changed_event", instanceId=task.id,
                                     runSpecId=task.app_id, runSpecVersion=task.app_version,
                                     healthy=healthy)

    def _publish_kill(self, task: TaskRecord, cause: str) -> None:
        self.group_manager.events.publish("unhealthy_instance_kill_event", appId=task.app_id,
                                     taskId=task.id, instanceId=task.id,
                                     version=task.app_version, reason=cause,
                                     host=task.hostname or "unknown", slaveId=task.agent_id or "")

    def _write(self, task_id: str, results: Optional[Dict[int, Health]]) -> None:
        try:
            if results is None:
                self.group_manager.store.delete(HEALTH, task_id)
            else:
                self.group_manager.store.put(HEALTH, task_id,
                                        {str(i): h.stored() for i, h in results.items()})
        except Exception as e:        # the store failing must not stop health checking
            log.warning("storing the health of task %s: %s", task_id, e)


def host_port(task: TaskRecord, index: int) -> Optional[int]:
    """The host port of the task's `index`th port (its record lists only the
    ports that got a host port)."""
    requests = task.spec.ports
    if index >= len(requests) or requests[index].host_port is None:
        return None
    position = sum(1 for r in requests[:index] if r.host_port is not None)
    return task.ports[position] if position < len(task.ports) else None
