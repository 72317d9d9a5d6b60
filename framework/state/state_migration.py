"""The layouts of the framework's state and the steps between them.

The layout's number is stored with the state (kind LAYOUT_KIND, key
LAYOUT_KEY); a state without it is layout 1. Opening a state of an older layout
upgrades it in one transaction (all of it or nothing), so an upgrade
interrupted by a crash is simply done again at the next start. A state of a
newer layout than this code knows is refused: this code would misread it.

- Layout 1: each task stored twice, as `scheduler.task` (the scheduler's
  record) and `app_task` (the API's: app, versions, when staged).
- Layout 2: one record per task, kind `task` (framework.scheduling.task_record.TaskRecord).
- Layout 3: groups (kind `group`), app and group versions (`app_version:<id>`,
  `group_version:<id>`), deployments of several apps in steps.

Each step is written for the layouts it joins and never changes afterwards;
it does not use the code that reads the current layout.
"""
import logging
from typing import Any, Callable, Protocol

from common.errors import UserError
from framework.tasks.timestamps import format_timestamp, parse_timestamp

log = logging.getLogger(__name__)

LAYOUT_KIND, LAYOUT_KEY = "store", "layout"
CURRENT_LAYOUT = 3
# layout 1's kinds
V1_SCHEDULER_TASK, V1_APP_TASK = "scheduler.task", "app_task"
V2_TASK = "task"


class Records(Protocol):
    def put(self, kind: str, key: str, value: dict) -> None: ...
    def delete(self, kind: str, key: str) -> None: ...
    def items(self, kind: str) -> dict[str, dict]: ...
    def transaction(self) -> Any: ...


def layout_of(store: Records) -> int:
    marker = store.items(LAYOUT_KIND).get(LAYOUT_KEY)
    return int(marker["version"]) if marker else 1


def upgrade(store: Records, where: str) -> int:
    """Bring `store` (named `where` in messages) to CURRENT_LAYOUT; returns the
    layout it had."""
    with store.transaction():
        found = layout_of(store)
        if found > CURRENT_LAYOUT:
            raise UserError(f"{where}: state layout {found} is newer than this mesos-gpu "
                            f"understands (layout {CURRENT_LAYOUT}); run the newer version")
        for version in range(found, CURRENT_LAYOUT):
            STEPS[version](store)
            log.info("%s: state upgraded from layout %d to %d", where, version, version + 1)
        store.put(LAYOUT_KIND, LAYOUT_KEY, {"version": CURRENT_LAYOUT})
    return found


def _one_record_per_task(store: Records) -> None:
    """Layout 1 -> 2: the scheduler's record gains the API's facts (app
    version, config version, staged time); the API's copy goes."""
    app_tasks = store.items(V1_APP_TASK)
    for key, record in store.items(V1_SCHEDULER_TASK).items():
        meta = app_tasks.pop(key, None) or {}
        merged = dict(record)
        merged["app_version"] = meta.get("version", "")
        merged["config_version"] = meta.get("configVersion", "")
        staged = parse_timestamp(meta.get("stagedAt", ""))
        merged["staged_at"] = staged if staged is not None else record.get("updated", 0.0)
        # Layout 1 never stored when a task started; its last change is the best
        # known time for one that is running now.
        merged["started_at"] = record.get("updated") if record.get("state") == "TASK_RUNNING" else None
        merged.setdefault("role", "")
        store.put(V2_TASK, key, merged)
        store.delete(V1_SCHEDULER_TASK, key)
    for key in store.items(V1_APP_TASK):
        if key in app_tasks:
            # Written by the API just before a crash kept it from reaching the
            # scheduler: never submitted, so nothing runs it; the API starts
            # another instance in its place (layout 1's code did the same).
            log.warning("state upgrade: task %s of app %s was never submitted; dropped",
                        key, app_tasks[key].get("appId"))
        store.delete(V1_APP_TASK, key)


def _parent(path_id: str) -> str:
    return path_id.rsplit("/", 1)[0] or "/"


def _groups_versions_and_steps(store: Records) -> None:
    """Layout 2 -> 3: the groups the app ids imply (each with the latest
    version below it), each app's and group's current version recorded, and
    each one-app deployment as a plan of steps."""
    apps = store.items("app")
    groups: dict[str, dict] = {"/": {"id": "/", "dependencies": [], "version": ""}}
    for app_id, app in sorted(apps.items()):
        group_id = app_id
        while group_id != "/":
            group_id = _parent(group_id)
            group = groups.setdefault(group_id, {"id": group_id, "dependencies": [], "version": ""})
            group["version"] = max(group["version"], app["version"])
        store.put("app_version:" + app_id, app["version"], app)
    for group_id, group in groups.items():
        if not group["version"]:            # no app below it (a new state): now
            group["version"] = format_timestamp()
        children_apps = {a: apps[a]["version"] for a in apps if _parent(a) == group_id}
        children_groups = {g: groups[g]["version"] for g in groups
                           if g != "/" and _parent(g) == group_id}
        store.put("group", group_id, group)
        store.put("group_version:" + group_id, group["version"],
                  dict(group, apps=children_apps, groups=children_groups))
    for plan_id, plan in store.items("deployment").items():
        if "steps" in plan:
            continue
        app_id, action = plan["appId"], plan["action"]
        # Layout 2's StartApplication ran until the app's instances ran; in
        # layout 3 (as in Marathon) starting is done at once and a scale follows.
        steps = [[{"action": action, "app": app_id}]]
        if action == "StartApplication":
            steps.append([{"action": "ScaleApplication", "app": app_id}])
        store.put("deployment", plan_id, {
            "id": plan["id"], "version": plan["version"],
            "original": {app_id: plan["original"]}, "target": {app_id: plan["target"]},
            "groupsBefore": {}, "groupsAfter": {}, "steps": steps})


STEPS: dict[int, Callable[[Records], None]] = {1: _one_record_per_task,
                                               2: _groups_versions_and_steps}
