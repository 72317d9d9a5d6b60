"""Readiness checks of the tasks a deployment starts, as Marathon 1.10 runs them
(`core/readiness`, `core/deployment/impl/ReadinessBehavior`).

While a deployment touches an app with `readinessChecks`, each of its tasks of
the new configuration that runs (and, with health checks, is healthy) is asked
`GET <protocol>://<host>:<the port named portName><path>` every
`intervalSeconds` until it answers one of `httpStatusCodesForReady`. The
the instance keeper counts a new task toward the deployment (and stops an old one for
it) only once it is ready. The results show in the deployment's
`currentActions[].readinessCheckResults` and in the app's
`readinessCheckResults` (`?embed=app.readiness`); a task stays ready once it
was, and its result goes with it.
"""
import logging
import time
from typing import Dict, List, Optional, Set, Tuple

from framework.tasks import probes
from framework.marathon.core.check_runner import TICK_SECONDS, CheckRunner
from framework.marathon.core.task_health import host_port
from framework.marathon.state.readiness_checks import ReadinessCheck
from framework.marathon.core.group_manager import GroupManager
from framework.scheduling.task_record import RUNNING, TaskRecord

log = logging.getLogger(__name__)

WORKERS = 4


def port_named(app: dict, task: TaskRecord, name: str) -> Optional[int]:
    """The host port of the app's port called `name`."""
    mappings = (app.get("container") or {}).get("portMappings") or []
    ports = mappings or app.get("portDefinitions") or []
    index = next((i for i, p in enumerate(ports) if p.get("name") == name), None)
    return None if index is None else host_port(task, index)


class ReadinessMonitor(CheckRunner):
    def __init__(self, group_manager: GroupManager, clock=time.time) -> None:
        super().__init__("readiness", WORKERS)
        self.group_manager = group_manager
        self.clock = clock
        group_manager.readiness = self
        self._results: Dict[str, dict] = {}          # task id -> TaskReadinessCheckResult
        self._due: Dict[str, float] = {}
        self._in_flight: Set[str] = set()

    # -- what the instance keeper and the API ask (group manager's lock held) ----------------------
    def ready(self, app: dict, task: TaskRecord) -> bool:
        if not app.get("readinessChecks"):
            return True
        return bool(self._results.get(task.id, {}).get("ready"))

    def results_for(self, app_id: str) -> List[dict]:
        return [dict(result) for task_id, result in self._results.items()
                if task_id in self.group_manager.tasks
                and self.group_manager.tasks[task_id].app_id == app_id]

    def forget(self, task_id: str) -> None:
        self._results.pop(task_id, None)
        self._due.pop(task_id, None)

    # -- the checks -----------------------------------------------------------------------
    def _deploying(self) -> Set[str]:
        return {app_id for plan in self.group_manager.plans.values()
                for app_id, target in plan["target"].items() if target is not None}

    def due_jobs(self) -> List[Tuple]:
        now = self.clock()
        jobs = []
        r = self.group_manager
        with r.lock:
            for task_id in [t for t in self._results if t not in r.tasks]:
                self.forget(task_id)
            deploying = self._deploying()
            for task in r.tasks.values():
                app = r.apps.get(task.app_id)
                if app is None or task.app_id not in deploying or not app.get("readinessChecks") \
                        or task.state != RUNNING \
                        or task.config_version != app["versionInfo"]["lastConfigChangeAt"] \
                        or self._results.get(task.id, {}).get("ready") \
                        or task.id in self._in_flight:
                    continue
                if app.get("healthChecks") and r.task_health is not None \
                        and r.task_health.healthy(task) is not True:
                    continue                  # Marathon asks healthy tasks only
                check = ReadinessCheck.from_json(app["readinessChecks"][0])
                if self._due.get(task.id, 0.0) > now:
                    continue
                self._due[task.id] = now + max(check.interval_seconds, TICK_SECONDS)
                self._in_flight.add(task.id)
                jobs.append((self._check, (task.copy(), app, check)))
        return jobs

    def _check(self, task: TaskRecord, app: dict, check: ReadinessCheck) -> None:
        try:
            result = self._probe(task, app, check)
            with self.group_manager.lock:
                if task.id in self.group_manager.tasks:
                    before = self._results.get(task.id, {}).get("ready")
                    self._results[task.id] = result
                    self.group_manager.touched((task.app_id,))
                    if result["ready"] and not before:
                        log.info("task %s of %s is ready", task.id, task.app_id)
                        self.group_manager.wake()
        except Exception:
            log.exception("readiness check of %s failed to run", task.id)
        finally:
            with self.group_manager.lock:
                self._in_flight.discard(task.id)

    def _probe(self, task: TaskRecord, app: dict, check: ReadinessCheck) -> dict:
        result: dict = {"name": check.name, "taskId": task.id, "ready": False}
        port = port_named(app, task, check.port_name)
        if not task.hostname or port is None:
            return result
        try:
            answer = probes.http_get(task.hostname, port, check.path,
                                     check.protocol == "HTTPS", float(check.timeout_seconds))
        except probes.ProbeError as e:
            log.info("readiness check of %s: %s", task.id, e)
            return result
        result["ready"] = answer.status in check.http_status_codes_for_ready
        if check.preserve_last_response:
            result["lastResponse"] = {"status": answer.status,
                                      "contentType": answer.content_type,
                                      "body": answer.body.decode(errors="replace")}
        return result
