"""The API's changes to apps, their tasks and deployments.

Each operation takes the group manager's lock, checks everything first (the app
exists, no deployment locks it unless forced), then commits one store
transaction; the instance keeper (framework.marathon.core.instance_keeper) carries the change
out. Nothing here talks to the scheduler.
"""
from typing import Dict, List, Optional, Tuple

from framework.marathon.state import app_model, groups
from framework.marathon.core.deployments import only_scaling
from framework.marathon.core.group_manager import GroupManager
from framework.http.validation import message, task_not_found
from framework.scheduling.task_record import TaskRecord

SERVICE_PORT_MIN, SERVICE_PORT_MAX = 10000, 20000


def old_service_ports(app: Optional[dict]) -> List[int]:
    return app_model.service_ports(app) if app else []


class AppChanges:
    def __init__(self, group_manager: GroupManager) -> None:
        self.group_manager = group_manager

    # -- apps -----------------------------------------------------------------------
    def create(self, app: dict, force: bool) -> Tuple[dict, dict]:
        r = self.group_manager
        with r.lock:
            app_id = app["id"]
            if app_id in r.apps:
                raise message(409, f"An app with id [{app_id}] already exists.")
            now = r.now()
            app = self.versioned(app, None, now)
            plan = r.change({app_id: app}, {}, now, force, posted=[app])
            return app, plan

    def update(self, app_id: str, app: dict, force: bool) -> Tuple[dict, bool]:
        """Replace (or create) the app; returns the plan and whether it was created."""
        plan, created = self.update_many([app], force)
        return plan, created[0]

    def update_many(self, apps: List[dict], force: bool) -> Tuple[dict, List[bool]]:
        """Replace (or create) several apps as one deployment (PUT/PATCH /v2/apps)."""
        r = self.group_manager
        with r.lock:
            now = r.now()
            changes: Dict[str, Optional[dict]] = {}
            ports: set = set()
            for app in apps:
                changes[app["id"]] = self.versioned(app, r.apps.get(app["id"]), now, ports)
            plan = r.change(changes, {}, now, force, posted=list(changes.values()))
            return plan, [plan["original"].get(a["id"]) is None for a in apps]

    def rollback(self, app_id: str, version: str, force: bool) -> dict:
        """PUT /v2/apps/{id} with {"version": ...}: the app as it was then."""
        r = self.group_manager
        with r.lock:
            current = r.app(app_id)
            stored = r.history.app_at(app_id, version)
            if stored is None:
                raise message(404, f"App '{app_id}' does not exist in version {version}")
            now = r.now()
            app = {k: v for k, v in stored.items() if k not in ("version", "versionInfo")}
            return r.change({app_id: self.versioned(app, current, now)}, {}, now, force)

    def delete(self, app_id: str, force: bool) -> dict:
        r = self.group_manager
        with r.lock:
            r.app(app_id)
            return r.change({app_id: None}, {}, r.now(), force)

    def restart(self, app_id: str, force: bool) -> dict:
        r = self.group_manager
        with r.lock:
            old = r.app(app_id)
            now = r.now()
            app = dict(old, version=now, versionInfo=dict(old["versionInfo"], lastConfigChangeAt=now))
            return r.change({app_id: app}, {}, now, force, restart=[app_id])

    def scale_by(self, app_id: str, delta: int, force: bool) -> dict:
        with self.group_manager.lock:
            old = self.group_manager.app(app_id)
            app = dict(old, instances=max(0, old["instances"] + delta))
            plan, _ = self.update(app_id, app, force)
            return plan

    def versions(self, app_id: str) -> List[str]:
        with self.group_manager.lock:
            self.group_manager.app(app_id)
            return self.group_manager.history.app_versions(app_id)

    def at_version(self, app_id: str, version: str) -> dict:
        with self.group_manager.lock:
            self.group_manager.app(app_id)
            app = self.group_manager.history.app_at(app_id, version)
        if app is None:
            raise message(404, f"App '{app_id}' does not exist in version {version}")
        return app

    def versioned(self, app: dict, old: Optional[dict], now: str,
                  ports: Optional[set] = None) -> dict:
        """`app` as version `now` of itself (`old`: the version it replaces);
        `ports`: service ports already given to other apps of the same change."""
        app = dict(app, version=now)
        taken = ports if ports is not None else set()
        mappings = (app.get("container") or {}).get("portMappings")
        if mappings:
            app["container"] = dict(app["container"], portMappings=self._service_ports(
                mappings, "servicePort", app["id"], old_service_ports(old), taken))
        else:
            app["portDefinitions"] = self._service_ports(
                app["portDefinitions"], "port", app["id"], old_service_ports(old), taken)
        if old is None:
            app["versionInfo"] = {"lastScalingAt": now, "lastConfigChangeAt": now}
        else:
            config = old["versionInfo"]["lastConfigChangeAt"] if only_scaling(old, app) else now
            app["versionInfo"] = {"lastScalingAt": now, "lastConfigChangeAt": config}
        return app

    def _service_ports(self, ports: List[dict], key: str, app_id: str, previous: List[int],
                       taken: set) -> List[dict]:
        """Service port 0 (a port definition's `port`, a port mapping's missing or
        0 `servicePort`) gets a free one (10000-20000), kept across updates; the
        ports given are added to `taken`."""
        used = {port for port, owner in self.group_manager.port_owners.items()
                if owner != app_id} | taken
        out, candidate = [], SERVICE_PORT_MIN
        for i, definition in enumerate(ports):
            definition = dict(definition)
            if not definition.get(key):
                if i < len(previous) and previous[i] and previous[i] not in used:
                    definition[key] = previous[i]
                else:
                    while candidate in used and candidate <= SERVICE_PORT_MAX:
                        candidate += 1
                    definition[key] = candidate
                used.add(definition[key])
                taken.add(definition[key])
            out.append(definition)
        return out

    # -- deployments ------------------------------------------------------------------
    def cancel(self, plan_id: str, force: bool) -> Optional[dict]:
        """Stop a deployment; without force roll its changes back (returns that plan)."""
        r = self.group_manager
        with r.lock:
            plan = r.plans.get(plan_id)
            if plan is None:
                raise message(404, f"DeploymentPlan {plan_id} does not exist")
            if force:
                r.drop_plan(plan_id)
                return None
            now = r.now()
            apps: Dict[str, Optional[dict]] = {}
            for app_id, original in plan["original"].items():
                if original is None:
                    apps[app_id] = None
                else:
                    current = r.apps.get(app_id)
                    app = {k: v for k, v in original.items() if k not in ("version", "versionInfo")}
                    apps[app_id] = self.versioned(app, current, now)
            return r.change(apps, {g: None if group is None else groups.Group.from_json(group)
                                   for g, group in plan["groupsBefore"].items()}, now, force=True)

    def reset_delay(self, app_id: str) -> None:
        r = self.group_manager
        with r.lock:
            r.app(app_id)
            r.backoff.pop(app_id, None)
            r.wake()

    # -- tasks ------------------------------------------------------------------------
    def kill_task(self, app_id: str, task_id: str, scale: bool,
                  force: bool) -> Tuple[TaskRecord, Optional[dict]]:
        r = self.group_manager
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
        r = self.group_manager
        with r.lock:
            r.app(app_id)
            chosen = [t for t in r.live_tasks(app_id)
                      if host is None or host == "*" or t.hostname == host]
            plan = self.scale_by(app_id, -len(chosen), force) if scale else None
            for task in chosen:
                r.request_kill(task.id)
            return chosen, plan

    def kill_many(self, task_ids: List[str], scale: bool, force: bool) -> Optional[dict]:
        """POST /v2/tasks/delete: all ids checked first; with scale one deployment
        scaling each app down. Returns that plan (scale) or None."""
        r = self.group_manager
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
                r.check_lock(per_app, force)
                now = r.now()
                changes = {app_id: self.versioned(dict(r.apps[app_id], instances=max(
                    0, r.apps[app_id]["instances"] - count)), r.apps[app_id], now)
                    for app_id, count in per_app.items()}
                plan = r.change(changes, {}, now, force=True)
            for task in tasks:
                r.request_kill(task.id)
            return plan
