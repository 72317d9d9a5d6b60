"""The API's changes to apps, their tasks and deployments.

Each operation takes the registry's lock, checks everything first (the app
exists, no deployment locks it unless forced), then commits one store
transaction; the reconciler (framework.marathon.reconciler) carries the change
out. Nothing here talks to the scheduler.
"""
from typing import Dict, List, Optional, Tuple

from framework.marathon import deployments
from framework.marathon.app_model import only_scaling
from framework.marathon.deployments import RESTART, SCALE, START, STOP
from framework.marathon.registry import Registry
from framework.marathon.validation import message, task_not_found
from framework.task_record import TaskRecord

SERVICE_PORT_MIN, SERVICE_PORT_MAX = 10000, 20000


class AppService:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    # -- apps -----------------------------------------------------------------------
    def create(self, app: dict, force: bool) -> Tuple[dict, dict]:
        r = self.registry
        with r.lock:
            app_id = app["id"]
            if app_id in r.apps:
                raise message(409, f"An app with id [{app_id}] already exists.")
            r.check_lock(app_id, force)
            now = r.now()
            app = self._versioned(app, None, now)
            plan = deployments.new_plan(app_id, START, now, None, app)
            r.events.publish("api_post_event", clientIp="", uri=f"/v2/apps{app_id}",
                             appDefinition=app)
            r.commit(app_id, app, plan)
            return app, plan

    def update(self, app_id: str, app: dict, force: bool) -> Tuple[dict, bool]:
        """Replace (or create) the app; returns the plan and whether it was created."""
        r = self.registry
        with r.lock:
            old = r.apps.get(app_id)
            r.check_lock(app_id, force)
            now = r.now()
            app = self._versioned(app, old, now)
            action = START if old is None else (SCALE if only_scaling(old, app) else RESTART)
            plan = deployments.new_plan(app_id, action, now, old, app)
            r.events.publish("api_post_event", clientIp="", uri=f"/v2/apps{app_id}",
                             appDefinition=app)
            r.commit(app_id, app, plan)
            return plan, old is None

    def delete(self, app_id: str, force: bool) -> dict:
        r = self.registry
        with r.lock:
            old = r.app(app_id)
            r.check_lock(app_id, force)
            plan = deployments.new_plan(app_id, STOP, r.now(), old, None)
            r.commit(app_id, None, plan)
            return plan

    def restart(self, app_id: str, force: bool) -> dict:
        r = self.registry
        with r.lock:
            old = r.app(app_id)
            r.check_lock(app_id, force)
            now = r.now()
            app = dict(old, version=now, versionInfo=dict(old["versionInfo"], lastConfigChangeAt=now))
            plan = deployments.new_plan(app_id, RESTART, now, old, app)
            r.commit(app_id, app, plan)
            return plan

    def scale_by(self, app_id: str, delta: int, force: bool) -> dict:
        with self.registry.lock:
            old = self.registry.app(app_id)
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
        used = {d["port"] for other in self.registry.apps.values() if other["id"] != app["id"]
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

    # -- deployments ------------------------------------------------------------------
    def cancel(self, plan_id: str, force: bool) -> Optional[dict]:
        """Stop a deployment; without force roll the app back (returns that plan)."""
        r = self.registry
        with r.lock:
            plan = r.plans.get(plan_id)
            if plan is None:
                raise message(404, f"DeploymentPlan {plan_id} does not exist")
            if force:
                r.drop_plan(plan_id)
                return None
            app_id, original = plan["appId"], plan["original"]
            now = r.now()
            if original is None:
                rollback = deployments.new_plan(app_id, STOP, now, plan["target"], None)
                r.commit(app_id, None, rollback)
            else:
                app = dict(original, version=now)
                rollback = deployments.new_plan(app_id, RESTART, now, plan["target"], app)
                r.commit(app_id, app, rollback)
            return rollback

    def reset_delay(self, app_id: str) -> None:
        r = self.registry
        with r.lock:
            r.app(app_id)
            r.backoff.pop(app_id, None)
            r.wake()

    # -- tasks ------------------------------------------------------------------------
    def kill_task(self, app_id: str, task_id: str, scale: bool,
                  force: bool) -> Tuple[TaskRecord, Optional[dict]]:
        r = self.registry
        with r.lock:
            r.app(app_id)
            task = r.tasks.get(task_id)
            if task is None or task.app_id != app_id or not task.alive:
                raise task_not_found(task_id)
            plan = self.scale_by(app_id, -1, force) if scale else None
            r.request_kill(task_id)
            return task, plan

    def kill_tasks(self, app_id: str, host: Optional[str], scale: bool,
                   force: bool) -> Tuple[List[TaskRecord], Optional[dict]]:
        r = self.registry
        with r.lock:
            r.app(app_id)
            chosen = [t for t in r.live_tasks(app_id)
                      if host is None or host == "*" or t.hostname == host]
            plan = self.scale_by(app_id, -len(chosen), force) if scale else None
            for task in chosen:
                r.request_kill(task.id)
            return chosen, plan

    def kill_many(self, task_ids: List[str], scale: bool, force: bool) -> Optional[dict]:
        """POST /v2/tasks/delete: all ids checked first; with scale one scale-down
        per app, all in one transaction. Returns the last plan (scale) or None."""
        r = self.registry
        with r.lock:
            tasks = []
            for task_id in task_ids:
                task = r.tasks.get(task_id)
                if task is None or not task.alive or task.app_id not in r.apps:
                    raise task_not_found(task_id)
                tasks.append(task)
            per_app: Dict[str, int] = {}
            for task in tasks:
                per_app[task.app_id] = per_app.get(task.app_id, 0) + 1
            plan = None
            if scale:
                for app_id in per_app:
                    r.check_lock(app_id, force)
                with r.store.transaction():
                    for app_id, count in per_app.items():
                        plan = self.scale_by(app_id, -count, force=True)
            for task in tasks:
                r.request_kill(task.id)
            return plan
