"""Keeps every app's `instances` running: apps, deployments and tasks.

HTTP handlers change apps and deployments here (under one lock, each change
one store transaction, validated before anything is touched). A reconciler
thread compares what each app wants with the tasks it has and asks the
scheduler to launch or kill; it is also the only thread that calls the
scheduler, and it does so outside the lock, so the pymesos callback thread and
the HTTP threads never wait on each other.

Upgrades (config change, restart) follow the app's upgradeStrategy as Marathon
does: keep at least `minimumHealthCapacity * instances` running, run at most
`maximumOverCapacity * instances` extra while old tasks are replaced.
"""
import logging
import math
import queue
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Tuple

from framework.marathon import deployments, task_builder
from framework.marathon.app_model import only_scaling
from framework.marathon.deployments import RESTART, SCALE, START, STOP, timestamp
from framework.marathon.events import EventBus
from framework.marathon.task_records import TERMINAL_STATES, TaskView, view_of
from framework.marathon.validation import app_locked, app_not_found, message, task_not_found
from framework.state_store import StateStore
from common.errors import UserError

log = logging.getLogger(__name__)

APP, PLAN, TASK = "app", "deployment", "app_task"
SERVICE_PORT_MIN, SERVICE_PORT_MAX = 10000, 20000
KILL_RETRY_SECONDS = 15.0
FAILED_STATES = ("TASK_FAILED", "TASK_ERROR", "TASK_LOST", "TASK_DROPPED", "TASK_GONE")


@dataclass
class Backoff:
    """Launch delay after failures (backoffSeconds * backoffFactor^n, capped)."""
    delay: float = 0.0
    until: float = 0.0
    since: str = field(default_factory=timestamp)


class AppManager:
    def __init__(self, store: StateStore, scheduler: Any, events: EventBus,
                 clock: Callable[[], float] = time.time, startup_grace: float = 30.0) -> None:
        self.store = store
        self.scheduler = scheduler
        self.events = events
        self.clock = clock
        self.lock = threading.RLock()
        self.apps: Dict[str, dict] = store.items(APP)
        self.plans: Dict[str, dict] = store.items(PLAN)
        # Our record of each task we launched: app, version, when.
        self.task_meta: Dict[str, dict] = store.items(TASK)
        self.views: Dict[str, TaskView] = {}
        self.kill_requested: Dict[str, float] = {}
        self.submitted: set = set()   # task ids handed to the scheduler by this process
        self._finished: List[str] = []   # terminal tasks the scheduler may drop now
        self.backoff: Dict[str, Backoff] = {}
        self.last_failure: Dict[str, dict] = {}
        self._grace_until = clock() + startup_grace if self.task_meta else 0.0
        self._updates: "queue.Queue" = queue.Queue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if scheduler is not None and hasattr(scheduler, "on_update"):
            scheduler.on_update(self._on_update)
        log.info("apps: %d, deployments: %d, tasks on record: %d",
                 len(self.apps), len(self.plans), len(self.task_meta))

    # -- lifecycle ------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="marathon-reconciler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(timeout=10)

    def wake(self) -> None:
        self._wake.set()

    def _on_update(self, record: Any) -> None:
        """Scheduler callback (pymesos thread): hand over and return at once."""
        self._updates.put(record)
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(1.0)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.reconcile()
            except Exception:  # keep reconciling; the next pass starts from fresh state
                log.exception("reconcile pass failed")

    # -- apps -----------------------------------------------------------------------
    def get(self, app_id: str) -> dict:
        with self.lock:
            app = self.apps.get(app_id)
            if app is None:
                raise app_not_found(app_id)
            return app

    def create(self, app: dict, force: bool) -> Tuple[dict, dict]:
        with self.lock:
            app_id = app["id"]
            if app_id in self.apps:
                raise message(409, f"An app with id [{app_id}] already exists.")
            self._check_lock(app_id, force)
            now = timestamp(self.clock())
            app = self._versioned(app, None, now)
            plan = deployments.new_plan(app_id, START, now, None, app)
            self.events.publish("api_post_event", clientIp="", uri=f"/v2/apps{app_id}",
                                appDefinition=app)
            self._commit(app_id, app, plan)
            return app, plan

    def update(self, app_id: str, app: dict, force: bool) -> Tuple[dict, bool]:
        """Replace (or create) the app; returns the plan and whether it was created."""
        with self.lock:
            old = self.apps.get(app_id)
            self._check_lock(app_id, force)
            now = timestamp(self.clock())
            app = self._versioned(app, old, now)
            action = START if old is None else (SCALE if only_scaling(old, app) else RESTART)
            plan = deployments.new_plan(app_id, action, now, old, app)
            self.events.publish("api_post_event", clientIp="", uri=f"/v2/apps{app_id}",
                                appDefinition=app)
            self._commit(app_id, app, plan)
            return plan, old is None

    def delete(self, app_id: str, force: bool) -> dict:
        with self.lock:
            old = self.get(app_id)
            self._check_lock(app_id, force)
            plan = deployments.new_plan(app_id, STOP, timestamp(self.clock()), old, None)
            self._commit(app_id, None, plan)
            return plan

    def restart(self, app_id: str, force: bool) -> dict:
        with self.lock:
            old = self.get(app_id)
            self._check_lock(app_id, force)
            now = timestamp(self.clock())
            app = dict(old, version=now, versionInfo=dict(old["versionInfo"], lastConfigChangeAt=now))
            plan = deployments.new_plan(app_id, RESTART, now, old, app)
            self._commit(app_id, app, plan)
            return plan

    def scale_by(self, app_id: str, delta: int, force: bool) -> dict:
        with self.lock:
            old = self.get(app_id)
            app = dict(old, instances=max(0, old["instances"] + delta))
            plan, _ = self.update(app_id, app, force)
            return plan

    def _versioned(self, app: dict, old: Optional[dict], now: str) -> dict:
        app = dict(app, version=now)
        app["portDefinitions"] = self._service_ports(app, old)
        if old is None:
            app["versionInfo"] = {"lastScalingAt": now, "lastConfigChangeAt": now}
        else:
            config = old["versionInfo"]["lastConfigChangeAt"] if only_scaling(old, app) else now
            app["versionInfo"] = {"lastScalingAt": now, "lastConfigChangeAt": config}
        return app

    def _service_ports(self, app: dict, old: Optional[dict]) -> List[dict]:
        """Port 0 in a port definition gets a free service port (10000-20000), kept across updates."""
        used = {d["port"] for other in self.apps.values() if other["id"] != app["id"]
                for d in other.get("portDefinitions", ())}
        previous = [d["port"] for d in (old or {}).get("portDefinitions", ())]
        out, candidate = [], SERVICE_PORT_MIN
        for i, definition in enumerate(app["portDefinitions"]):
            definition = dict(definition)
            if definition["port"] == 0:
                if i < len(previous) and previous[i] not in used:
                    definition["port"] = previous[i]
                else:
                    while candidate in used and candidate <= SERVICE_PORT_MAX:
                        candidate += 1
                    definition["port"] = candidate
                used.add(definition["port"])
            out.append(definition)
        return out

    def _check_lock(self, app_id: str, force: bool) -> None:
        locking = [p["id"] for p in self.plans.values() if p["appId"] == app_id]
        if locking and not force:
            raise app_locked(locking)

    def _commit(self, app_id: str, app: Optional[dict], plan: dict) -> None:
        """One transaction: the app (or its removal), the new plan, forced-out plans gone."""
        replaced = [p for p in self.plans.values() if p["appId"] == app_id]
        with self.store.transaction():
            for old_plan in replaced:
                self.store.delete(PLAN, old_plan["id"])
            if app is None:
                self.store.delete(APP, app_id)
            else:
                self.store.put(APP, app_id, app)
            self.store.put(PLAN, plan["id"], plan)
        for old_plan in replaced:
            del self.plans[old_plan["id"]]
            self.events.publish("deployment_failed", id=old_plan["id"],
                                plan=deployments.to_json(old_plan))
        if app is None:
            self.apps.pop(app_id, None)
            self.backoff.pop(app_id, None)
        else:
            self.apps[app_id] = app
            self.backoff.pop(app_id, None)
        self.plans[plan["id"]] = plan
        self.events.publish("deployment_info", plan=deployments.to_json(plan),
                            currentStep=deployments.to_json(plan)["steps"][0])
        self.wake()

    # -- deployments ------------------------------------------------------------------
    def cancel(self, plan_id: str, force: bool) -> Optional[dict]:
        """Stop a deployment; without force roll the app back (returns that plan)."""
        with self.lock:
            plan = self.plans.get(plan_id)
            if plan is None:
                raise message(404, f"DeploymentPlan {plan_id} does not exist")
            if force:
                with self.store.transaction():
                    self.store.delete(PLAN, plan_id)
                del self.plans[plan_id]
                return None
            app_id, original = plan["appId"], plan["original"]
            now = timestamp(self.clock())
            if original is None:
                rollback = deployments.new_plan(app_id, STOP, now, plan["target"], None)
                self._commit(app_id, None, rollback)
            else:
                app = dict(original, version=now)
                rollback = deployments.new_plan(app_id, RESTART, now, plan["target"], app)
                self._commit(app_id, app, rollback)
            return rollback

    def plan_ids_for(self, app_id: str) -> List[str]:
        with self.lock:
            return [p["id"] for p in self.plans.values() if p["appId"] == app_id]

    def by_app(self) -> Tuple[Dict[str, List[str]], Dict[str, List[TaskView]]]:
        """Deployment ids and launched live tasks per app, in one pass each
        (listing 1,000 apps must not scan every plan and task per app)."""
        with self.lock:
            plans: Dict[str, List[str]] = {}
            for plan in self.plans.values():
                plans.setdefault(plan["appId"], []).append(plan["id"])
            tasks: Dict[str, List[TaskView]] = {}
            for view in self.views.values():
                if view.alive and view.launched:
                    tasks.setdefault(view.app_id, []).append(view)
            return plans, tasks

    # -- tasks ------------------------------------------------------------------------
    def tasks_of(self, app_id: str) -> List[TaskView]:
        """Launched, live tasks of an app (queued ones are in the queue, not here)."""
        with self.lock:
            return [v for v in self.views.values()
                    if v.app_id == app_id and v.alive and v.launched]

    def all_tasks(self) -> List[TaskView]:
        with self.lock:
            return [v for v in self.views.values() if v.alive and v.launched]

    def kill_task(self, app_id: str, task_id: str, scale: bool, force: bool) -> Tuple[TaskView, Optional[dict]]:
        with self.lock:
            self.get(app_id)
            view = self.views.get(task_id)
            if view is None or view.app_id != app_id or not view.alive:
                raise task_not_found(task_id)
            plan = self.scale_by(app_id, -1, force) if scale else None
            self._request_kill(task_id)
            return view, plan

    def kill_tasks(self, app_id: str, host: Optional[str], scale: bool, force: bool) -> Tuple[List[TaskView], Optional[dict]]:
        with self.lock:
            self.get(app_id)
            chosen = [v for v in self.tasks_of(app_id)
                      if host is None or host == "*" or v.host == host]
            plan = self.scale_by(app_id, -len(chosen), force) if scale else None
            for view in chosen:
                self._request_kill(view.task_id)
            return chosen, plan

    def kill_many(self, task_ids: List[str], scale: bool, force: bool) -> Optional[dict]:
        """POST /v2/tasks/delete: all ids checked first; with scale one scale-down
        per app, all in one transaction. Returns the last plan (scale) or None."""
        with self.lock:
            views = []
            for task_id in task_ids:
                view = self.views.get(task_id)
                if view is None or not view.alive or view.app_id not in self.apps:
                    raise task_not_found(task_id)
                views.append(view)
            per_app: Dict[str, int] = {}
            for view in views:
                per_app[view.app_id] = per_app.get(view.app_id, 0) + 1
            plan = None
            if scale:
                for app_id in per_app:
                    self._check_lock(app_id, force)
                with self.store.transaction():
                    for app_id, count in per_app.items():
                        plan = self.scale_by(app_id, -count, force=True)
            for view in views:
                self._request_kill(view.task_id)
            return plan

    def _request_kill(self, task_id: str) -> None:
        self.kill_requested.setdefault(task_id, 0.0)
        self.wake()

    def counts(self, app_id: str, tasks: Optional[List[TaskView]] = None) -> Dict[str, int]:
        tasks = self.tasks_of(app_id) if tasks is None else tasks
        return {"tasksStaged": sum(1 for t in tasks if t.state != "TASK_RUNNING"),
                "tasksRunning": sum(1 for t in tasks if t.state == "TASK_RUNNING"),
                "tasksHealthy": 0, "tasksUnhealthy": 0}

    def queued(self) -> List[Tuple[dict, int, Backoff]]:
        """Apps still waiting for instances: (app, how many, launch delay)."""
        with self.lock:
            out = []
            for app in self.apps.values():
                live = [v for v in self.views.values() if v.app_id == app["id"] and v.alive]
                waiting = sum(1 for v in live if not v.launched)
                missing = max(0, app["instances"] - len(live))
                if waiting + missing:
                    out.append((app, waiting + missing, self.backoff.get(app["id"], Backoff())))
            return out

    def waiting_reason(self, app_id: str) -> Optional[str]:
        """Why an app's queued task is not launched yet, as the scheduler says."""
        with self.lock:
            return next((v.message for v in self.views.values() if v.app_id == app_id
                         and v.alive and not v.launched and v.message), None)

    def reset_delay(self, app_id: str) -> None:
        with self.lock:
            self.get(app_id)
            self.backoff.pop(app_id, None)
            self.wake()

    # -- reconciliation -----------------------------------------------------------------
    def reconcile(self) -> None:
        """One pass: fold in task updates, decide launches and kills, act, finish plans."""
        launches, kills = self._decide()
        for spec in launches:
            self._launch(spec)
        for task_id in kills:
            if self.scheduler is None:      # nothing was launched: just drop it
                with self.lock:
                    self._forget(task_id)
                continue
            try:
                self.scheduler.kill(task_id)
            except Exception as e:  # the next pass retries
                log.warning("kill %s failed: %s", task_id, e)
        self._finish_plans()
        with self.lock:
            finished, self._finished = self._finished, []
        for task_id in finished:
            forget = getattr(self.scheduler, "forget", None)
            if forget is not None:
                try:
                    forget(task_id)
                except Exception as e:
                    log.debug("forget %s: %s", task_id, e)

    def _refresh_views(self) -> None:
        """Fold the scheduler's task list and queued updates into our views."""
        records = list(self.scheduler.tasks()) if self.scheduler is not None else []
        while True:
            try:
                records.append(self._updates.get_nowait())
            except queue.Empty:
                break
        reported = set()
        for record in records:
            view = view_of(record)
            if view is None or view.task_id not in self.task_meta:
                continue
            reported.add(view.task_id)
            self._apply(view)
        in_grace = self.clock() < self._grace_until
        for task_id, meta in list(self.task_meta.items()):
            if task_id in reported:
                continue
            known = self.views.get(task_id)
            if known is not None and (task_id in self.submitted or not known.from_scheduler
                                      and in_grace):
                continue            # queued with the scheduler, or still reconciling
            if known is None and in_grace:
                self.views[task_id] = TaskView.queued(task_id, meta)
                continue
            log.info("task %s is gone (the scheduler no longer knows it)", task_id)
            self._forget(task_id)

    def _apply(self, view: TaskView) -> None:
        meta = self.task_meta[view.task_id]
        before = self.views.get(view.task_id)
        started = before.started_at if before is not None else None
        if started is None and view.state == "TASK_RUNNING":
            started = timestamp(self.clock())
        view = replace(view.with_meta(meta), started_at=started)
        self.views[view.task_id] = view
        if before is None or before.state != view.state or not before.from_scheduler:
            self.events.publish("status_update_event", slaveId=view.agent_id or "",
                                taskId=view.task_id, taskStatus=view.state,
                                message=view.message or "", appId=view.app_id,
                                host=view.host or "", ports=[], ipAddresses=[],
                                version=view.version,
                                **({"imageVariant": dict(view.variant)} if view.variant else {}))
            if view.state == "TASK_RUNNING":
                self.backoff.pop(view.app_id, None)
        if view.state in TERMINAL_STATES:
            if view.state in FAILED_STATES and view.app_id in self.apps:
                self._record_failure(view)
            self._forget(view.task_id)
            self._finished.append(view.task_id)

    def _record_failure(self, view: TaskView) -> None:
        app = self.apps[view.app_id]
        now = self.clock()
        backoff = self.backoff.get(view.app_id) or Backoff()
        backoff.delay = min(float(app["maxLaunchDelaySeconds"]),
                            backoff.delay * app["backoffFactor"] if backoff.delay
                            else float(app["backoffSeconds"]))
        backoff.until = now + backoff.delay
        self.backoff[view.app_id] = backoff
        self.last_failure[view.app_id] = {
            "appId": view.app_id, "host": view.host or "", "message": view.message or "",
            "state": view.state, "taskId": view.task_id, "timestamp": timestamp(now),
            "version": view.version, "slaveId": view.agent_id or ""}

    def _forget(self, task_id: str) -> None:
        with self.store.transaction():
            self.store.delete(TASK, task_id)
        self.task_meta.pop(task_id, None)
        self.views.pop(task_id, None)
        self.kill_requested.pop(task_id, None)
        self.submitted.discard(task_id)

    def _decide(self) -> Tuple[list, List[str]]:
        with self.lock:
            self._refresh_views()
            launches, kills = [], []
            by_app: Dict[str, List[TaskView]] = {}
            for view in self.views.values():
                if view.alive:
                    by_app.setdefault(view.app_id, []).append(view)
            for app_id, views in by_app.items():
                if app_id not in self.apps:
                    kills.extend(v.task_id for v in views)
            for app in self.apps.values():
                app_launches, app_kills = self._plan_app(app, by_app.get(app["id"], []))
                launches.extend(app_launches)
                kills.extend(app_kills)
            now = self.clock()
            due = []
            for task_id in dict.fromkeys(kills + list(self.kill_requested)):
                if task_id not in self.views:
                    self.kill_requested.pop(task_id, None)
                    continue
                if now - self.kill_requested.get(task_id, 0.0) >= KILL_RETRY_SECONDS:
                    self.kill_requested[task_id] = now
                    due.append(task_id)
            return launches, due

    def _plan_app(self, app: dict, views: List[TaskView]) -> Tuple[list, List[str]]:
        """Launches and kills that move one app toward its definition."""
        target = app["instances"]
        config = app["versionInfo"]["lastConfigChangeAt"]
        live = [v for v in views if v.task_id not in self.kill_requested]
        current = [v for v in live if v.config_version == config]
        old = [v for v in live if v.config_version != config]
        kills: List[TaskView] = []
        if len(current) > target:
            kills.extend(self._pick_victims(app, current, len(current) - target))
            current = [v for v in current if v not in kills]
        strategy = app["upgradeStrategy"]
        min_healthy = math.ceil(target * strategy["minimumHealthCapacity"])
        max_total = target + math.floor(target * strategy["maximumOverCapacity"])
        running_current = sum(1 for v in current if v.state == "TASK_RUNNING")
        running_old = sum(1 for v in old if v.state == "TASK_RUNNING")
        for view in sorted(old, key=lambda v: v.state == "TASK_RUNNING"):
            if view.state != "TASK_RUNNING":
                kills.append(view)
            elif running_current + running_old - 1 >= min_healthy:
                kills.append(view)
                running_old -= 1
        remaining_old = len([v for v in old if v not in kills])
        room = max_total - len(current) - remaining_old
        wanted = max(0, min(target - len(current), room))
        if wanted == 0 and remaining_old and not kills and len(current) < target:
            # The strategy leaves no way forward (no room, no spare healthy
            # task): replace one old task rather than stall forever.
            kills.append(next(v for v in old if v not in kills))
            wanted = 1 if room >= 0 else 0
        backoff = self.backoff.get(app["id"])
        if backoff and self.clock() < backoff.until:
            wanted = 0
        launches = [self._prepare_launch(app) for _ in range(wanted)]
        return [spec for spec in launches if spec is not None], [v.task_id for v in kills]

    @staticmethod
    def _pick_victims(app: dict, views: List[TaskView], count: int) -> List[TaskView]:
        """Not-yet-running first, then by killSelection (YOUNGEST_FIRST by default)."""
        youngest_first = app["killSelection"] != "OLDEST_FIRST"
        ordered = sorted(views, key=lambda v: (v.state == "TASK_RUNNING",
                                               -v.staged_seconds if youngest_first else v.staged_seconds))
        return ordered[:count]

    def _prepare_launch(self, app: dict):
        task_id = task_builder.new_task_id(app["id"])
        try:
            spec = task_builder.task_spec(app, task_id)
        except UserError as e:
            log.error("app %s cannot be launched: %s", app["id"], e)
            self.last_failure[app["id"]] = {
                "appId": app["id"], "host": "", "message": str(e), "state": "TASK_ERROR",
                "taskId": task_id, "timestamp": timestamp(self.clock()), "version": app["version"],
                "slaveId": ""}
            self.backoff[app["id"]] = Backoff(delay=float(app["maxLaunchDelaySeconds"]),
                                              until=self.clock() + app["maxLaunchDelaySeconds"])
            return None
        meta = {"appId": app["id"], "version": app["version"],
                "configVersion": app["versionInfo"]["lastConfigChangeAt"],
                "stagedAt": timestamp(self.clock())}
        with self.store.transaction():
            self.store.put(TASK, task_id, meta)
        self.task_meta[task_id] = meta
        self.views[task_id] = TaskView.queued(task_id, meta)
        self.submitted.add(task_id)
        return spec

    def _launch(self, spec: Any) -> None:
        if self.scheduler is None:
            return
        try:
            self.scheduler.submit(spec)
        except Exception as e:
            log.error("submit %s failed: %s", spec.id, e)
            with self.lock:
                self._updates.put({"task_id": spec.id, "state": "TASK_ERROR", "message": str(e)})
                self.wake()

    def _finish_plans(self) -> None:
        with self.lock:
            for plan in list(self.plans.values()):
                if self._plan_done(plan):
                    with self.store.transaction():
                        self.store.delete(PLAN, plan["id"])
                    del self.plans[plan["id"]]
                    self.events.publish("deployment_success", id=plan["id"],
                                        plan=deployments.to_json(plan))
                    if plan["action"] == STOP:
                        self.events.publish("app_terminated_event", appId=plan["appId"])

    def _plan_done(self, plan: dict) -> bool:
        app_id = plan["appId"]
        live = [v for v in self.views.values() if v.app_id == app_id and v.alive]
        if plan["target"] is None:
            return not live
        app = self.apps.get(app_id)
        if app is None:
            return True
        config = app["versionInfo"]["lastConfigChangeAt"]
        running = [v for v in live if v.state == "TASK_RUNNING" and v.config_version == config]
        return len(live) == app["instances"] and len(running) == app["instances"]
