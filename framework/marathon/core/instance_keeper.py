"""Keeps every app's `instances` running: the thread between the API and the scheduler.

Each pass folds the scheduler's task records (and the updates it reported
since) into the group manager, compares what each app wants with the tasks it has,
asks the scheduler to launch or kill, and finishes the deployments that are
done. It is the only thread that calls the scheduler, and it does so outside
the group manager's lock, so the pymesos callback thread and the HTTP threads never
wait on each other.

Upgrades (config change, restart) follow the app's upgradeStrategy as Marathon
does: keep at least `minimumHealthCapacity * instances` running, run at most
`maximumOverCapacity * instances` extra while old tasks are replaced. A new
task counts once it runs and, when the app has them, its health checks pass
and its readiness check says ready (framework.marathon.core.task_health,
readiness): only then is an old one stopped, or the deployment done.
"""
import logging
import math
import queue
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from framework.marathon.core import deployments
from framework.marathon.core import task_builder
from framework.marathon.core.deployments import START, STOP
from framework.marathon.state.upgrade_strategy import UpgradeStrategy
from framework.marathon.core.group_manager import Backoff, GroupManager
from framework.scheduling.task_record import FAILED_STATES, RUNNING, TaskRecord
from framework.tasks.task_spec import TaskSpec
from common.errors import UserError

log = logging.getLogger(__name__)

KILL_RETRY_SECONDS = 15.0


class InstanceKeeper:
    def __init__(self, group_manager: GroupManager, scheduler: Any,
                 leading: Callable[[], bool] = lambda: True,
                 default_user: Optional[str] = None,
                 pull_config_dir: Optional[str] = None,
                 allow_docker_credential: bool = False) -> None:
        self.group_manager = group_manager
        self.default_user = default_user    # --mesos_user: tasks without an image
        self.pull_config_dir = pull_config_dir    # --pull_config_dir: pullConfig secrets
        self.allow_docker_credential = allow_docker_credential   # --allow_docker_credential
        self.scheduler = scheduler
        self.leading = leading          # only the leading instance launches and kills
        self._updates: "queue.Queue[TaskRecord]" = queue.Queue()
        self._finished: List[str] = []    # terminal tasks the scheduler may drop now
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        group_manager.on_change(self.wake)
        if scheduler is not None:
            scheduler.on_update(self._on_update)
        with group_manager.lock:
            self._refresh()             # the tasks the scheduler recovered, before the API serves
            self._advance_plans(finish=False)
        log.info("tasks on record: %d", len(group_manager.tasks))

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="marathon-instance-keeper",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=10)

    def wake(self) -> None:
        self._wake.set()

    def _on_update(self, record: TaskRecord) -> None:
        """Scheduler callback (pymesos thread): hand over and return at once."""
        self._updates.put(record)
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(1.0)
            self._wake.clear()
            if self._stop.is_set():
                break
            if not self.leading():
                continue
            try:
                self.reconcile()
            except Exception:  # keep reconciling; the next pass starts from fresh state
                log.exception("reconcile pass failed")

    # -- one pass -----------------------------------------------------------------------
    def reconcile(self) -> None:
        """One pass: fold in task updates, decide launches and kills, act, finish plans."""
        launches, kills = self._decide()
        for spec, app in launches:
            self._launch(spec, app)
        for task_id in kills:
            if self.scheduler is None:      # nothing was launched: just drop it
                with self.group_manager.lock:
                    self._forget(task_id)
                continue
            try:
                self.scheduler.kill(task_id)
            except Exception as e:  # the next pass retries
                log.warning("kill %s failed: %s", task_id, e)
        self._finish_plans()
        with self.group_manager.lock:
            finished, self._finished = self._finished, []
        for task_id in finished:
            try:
                self.scheduler.forget(task_id)
            except Exception as e:
                log.debug("forget %s: %s", task_id, e)

    def _refresh(self) -> None:
        """Fold the updates reported since the last pass, then the scheduler's
        records (newer than any of them), into the group manager."""
        r = self.group_manager
        if self.scheduler is None:
            return                          # nothing launches: tasks stay pending
        records = []
        while True:
            try:
                records.append(self._updates.get_nowait())
            except queue.Empty:
                break
        records.extend(self.scheduler.tasks())
        reported = set()
        for record in records:
            if record.id in self._finished or (not record.app_version and record.id not in r.tasks):
                continue                    # ended in this pass, or not launched through the API
            reported.add(record.id)
            self._apply(record)
        for task_id in [t for t in r.tasks if t not in reported]:
            log.info("task %s is gone (the scheduler no longer knows it)", task_id)
            self._forget(task_id)

    def _apply(self, record: TaskRecord) -> None:
        r = self.group_manager
        before = r.tasks.get(record.id)
        r.tasks[record.id] = record
        if before != record:
            r.touched((record.app_id,))
        if r.task_health is not None:
            r.task_health.observe(before, record)
        if before is None or before.state != record.state:
            r.events.publish("status_update_event", slaveId=record.agent_id or "",
                             taskId=record.id, taskStatus=record.state,
                             message=record.message or "", appId=record.app_id,
                             host=record.hostname or "", ports=list(record.ports), ipAddresses=[],
                             version=record.app_version,
                             **({"imageVariant": dict(record.variant)} if record.variant else {}))
            if record.state == RUNNING:
                r.backoff.pop(record.app_id, None)
        if record.terminal:
            if record.state in FAILED_STATES and record.app_id in r.apps:
                self._record_failure(record)
            self._forget(record.id)
            self._finished.append(record.id)

    def _record_failure(self, record: TaskRecord) -> None:
        r = self.group_manager
        app = r.apps[record.app_id]
        now = r.clock()
        backoff = r.backoff.get(record.app_id) or Backoff()
        backoff.delay = min(float(app["maxLaunchDelaySeconds"]),
                            backoff.delay * app["backoffFactor"] if backoff.delay
                            else float(app["backoffSeconds"]))
        backoff.until = now + backoff.delay
        r.backoff[record.app_id] = backoff
        r.last_failure[record.app_id] = {
            "appId": record.app_id, "host": record.hostname or "", "message": record.message or "",
            "state": record.state, "taskId": record.id, "timestamp": r.now(),
            "version": record.app_version, "slaveId": record.agent_id or ""}

    def _forget(self, task_id: str) -> None:
        gone = self.group_manager.tasks.pop(task_id, None)
        if gone is not None:
            self.group_manager.touched((gone.app_id,))
        self.group_manager.kill_requested.pop(task_id, None)
        for monitor in (self.group_manager.task_health, self.group_manager.readiness):
            if monitor is not None:
                monitor.forget(task_id)

    def _up(self, app: dict, task: TaskRecord) -> bool:
        """A task of the app's current version counts toward a deployment: it
        runs, and is healthy and ready when the app has those checks."""
        r = self.group_manager
        if task.state != RUNNING:
            return False
        if app.get("healthChecks") and r.task_health is not None \
                and not r.task_health.ready_for_deployment(app, task):
            return False
        return r.readiness is None or r.readiness.ready(app, task)

    # -- decisions ----------------------------------------------------------------------
    def _decide(self) -> Tuple[List[Tuple[TaskSpec, dict]], List[str]]:
        r = self.group_manager
        with r.lock:
            self._refresh()
            launches, kills = [], []
            by_app: Dict[str, List[TaskRecord]] = {}
            for task in r.tasks.values():
                if task.alive:
                    by_app.setdefault(task.app_id, []).append(task)
            for app_id, tasks in by_app.items():
                if app_id not in r.apps:
                    kills.extend(t.id for t in tasks)
            r.held = self._held()
            for app in r.apps.values():
                if app["id"] in r.held:
                    continue        # its deployment step has not come: wait for its dependencies
                tasks = by_app.get(app["id"])
                if tasks is None and app["instances"] == 0:
                    continue        # nothing wanted, nothing running (most apps of a big idle list)
                config = app["versionInfo"]["lastConfigChangeAt"]
                if tasks and len(tasks) == app["instances"] and all(
                        t.config_version == config and t.id not in r.kill_requested for t in tasks):
                    continue        # as it should be: _plan_app would neither launch nor kill
                app_launches, app_kills = self._plan_app(app, tasks or [])
                launches.extend(app_launches)
                kills.extend(app_kills)
            now = r.clock()
            due = []
            for task_id in dict.fromkeys(kills + list(r.kill_requested)):
                if task_id not in r.tasks:
                    r.kill_requested.pop(task_id, None)
                    continue
                if now - r.kill_requested.get(task_id, 0.0) >= KILL_RETRY_SECONDS:
                    r.kill_requested[task_id] = now
                    due.append(task_id)
            return launches, due

    def _plan_app(self, app: dict, tasks: List[TaskRecord]) -> Tuple[list, List[str]]:
        """Launches and kills that move one app toward its definition."""
        r = self.group_manager
        target = app["instances"]
        config = app["versionInfo"]["lastConfigChangeAt"]
        live = [t for t in tasks if t.id not in r.kill_requested]
        current = [t for t in live if t.config_version == config]
        old = [t for t in live if t.config_version != config]
        kills: List[TaskRecord] = []
        if len(current) > target:
            kills.extend(self._pick_victims(app, current, len(current) - target))
            current = [t for t in current if t not in kills]
        strategy = UpgradeStrategy.from_json(app["upgradeStrategy"])
        min_healthy = math.ceil(target * strategy.minimum_health_capacity)
        max_total = target + math.floor(target * strategy.maximum_over_capacity)
        running_current = sum(1 for t in current if self._up(app, t))
        running_old = sum(1 for t in old if t.state == RUNNING)
        for task in sorted(old, key=lambda t: t.state == RUNNING):
            if task.state != RUNNING:
                kills.append(task)
            elif running_current + running_old - 1 >= min_healthy:
                kills.append(task)
                running_old -= 1
        remaining_old = len([t for t in old if t not in kills])
        room = max_total - len(current) - remaining_old
        wanted = max(0, min(target - len(current), room))
        if wanted == 0 and remaining_old and not kills and len(current) < target:
            # The strategy leaves no way forward (no room, no spare healthy
            # task): replace one old task rather than stall forever.
            kills.append(next(t for t in old if t not in kills))
            wanted = 1 if room >= 0 else 0
        backoff = r.backoff.get(app["id"])
        if backoff and r.clock() < backoff.until:
            wanted = 0
        launches = [self._prepare_launch(app) for _ in range(wanted)]
        return [launch for launch in launches if launch is not None], [t.id for t in kills]

    @staticmethod
    def _pick_victims(app: dict, tasks: List[TaskRecord], count: int) -> List[TaskRecord]:
        """Not-yet-running first, then by killSelection (YOUNGEST_FIRST by default)."""
        youngest_first = app["killSelection"] != "OLDEST_FIRST"
        ordered = sorted(tasks, key=lambda t: (t.state == RUNNING,
                                               -t.staged_at if youngest_first else t.staged_at))
        return ordered[:count]

    def _prepare_launch(self, app: dict) -> Optional[Tuple[TaskSpec, dict]]:
        """A new instance of `app`, pending in the group manager until the scheduler has it."""
        r = self.group_manager
        task_id = task_builder.new_task_id(app["id"])
        try:
            spec = task_builder.task_spec(app, task_id, self.default_user, self.pull_config_dir,
                                          self.allow_docker_credential)
        except UserError as e:
            log.error("app %s cannot be launched: %s", app["id"], e)
            r.last_failure[app["id"]] = {
                "appId": app["id"], "host": "", "message": str(e), "state": "TASK_ERROR",
                "taskId": task_id, "timestamp": r.now(), "version": app["version"],
                "slaveId": ""}
            r.backoff[app["id"]] = Backoff(delay=float(app["maxLaunchDelaySeconds"]),
                                           until=r.clock() + app["maxLaunchDelaySeconds"])
            r.touched((app["id"],))     # its lastTaskFailure
            return None
        r.tasks[task_id] = TaskRecord(spec=spec, app_version=app["version"],
                                      config_version=app["versionInfo"]["lastConfigChangeAt"],
                                      staged_at=r.clock())
        return spec, app

    def _launch(self, spec: TaskSpec, app: dict) -> None:
        if self.scheduler is None:
            return
        try:
            self.scheduler.submit(spec, app_version=app["version"],
                                  config_version=app["versionInfo"]["lastConfigChangeAt"])
        except Exception as e:
            log.error("submit %s failed: %s", spec.id, e)
            with self.group_manager.lock:
                pending = self.group_manager.tasks.get(spec.id)
                if pending is not None:
                    failed = pending.copy()
                    failed.state, failed.message = "TASK_ERROR", str(e)
                    self._updates.put(failed)
                self.wake()

    # -- deployments ----------------------------------------------------------------------
    def _held(self) -> set:
        """Apps in a step of their deployment after its current one."""
        r = self.group_manager
        held = set()
        for plan in r.plans.values():
            for step in plan["steps"][r.progress.get(plan["id"], 0) + 1:]:
                held.update(action["app"] for action in step)
        return held

    def _finish_plans(self) -> None:
        with self.group_manager.lock:
            self._advance_plans(finish=True)

    def _advance_plans(self, finish: bool) -> None:
        """Move each deployment to its first step not done; with `finish`, drop
        the ones with every step done."""
        r = self.group_manager
        live: Dict[str, List[TaskRecord]] = {}
        for task in r.tasks.values():
            if task.alive:
                live.setdefault(task.app_id, []).append(task)
        for plan in list(r.plans.values()):
            step = r.progress.get(plan["id"], 0)
            while step < len(plan["steps"]) and all(
                    self._action_done(action, live.get(action["app"], []))
                    for action in plan["steps"][step]):
                step += 1
            if step != r.progress.get(plan["id"], 0):
                r.progress[plan["id"]] = step
                r.touched(())           # (no listing shows a deployment's step)
                r.wake()            # apps of the next step may start now
            if step < len(plan["steps"]) or not finish:
                continue
            r.drop_plan(plan["id"])
            r.events.publish("deployment_success", id=plan["id"],
                             plan=deployments.to_json(plan, step))
            for app_id, target in plan["target"].items():
                if target is None:
                    r.events.publish("app_terminated_event", appId=app_id)

    def _action_done(self, action: dict, live: List[TaskRecord]) -> bool:
        """A stopped app has no live task; a started one exists; a scaled or
        restarted one runs exactly its instances, all of its current config."""
        if action["action"] == STOP:
            return not live and action["app"] not in self.group_manager.apps
        if action["action"] == START:
            return True
        app = self.group_manager.apps.get(action["app"])
        if app is None:
            return True                 # removed by a later deployment
        config = app["versionInfo"]["lastConfigChangeAt"]
        running = [t for t in live if t.config_version == config and self._up(app, t)]
        return len(live) == app["instances"] and len(running) == app["instances"]
