"""What the Marathon API serves: apps in their groups, deployments, versions,
and the tasks as the scheduler last reported them, in memory behind one lock,
with the store behind it.

The API's services (app_service, group_service) describe a change as the apps
and groups it sets or removes; `change` checks it against the whole tree
(no app where a group is, no dependency cycle) and the running deployments
(409 unless forced), then writes it, its versions and its deployment in one
store transaction before it shows in memory. The instance keeper folds task updates
in and moves deployments along. Task records are the scheduler's (stored by
it, once); the group manager keeps copies to answer from.
"""
import logging
import threading
import time
from dataclasses import dataclass, field, replace
from collections import deque
from typing import Callable, Deque, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

from framework.marathon.state import app_model, docker_credential
from framework.marathon.core import deployments
from framework.marathon.state import groups
from framework.marathon.state import health_checks
from framework.http.events import EventBus
from framework.http.validation import Violations, app_locked, app_not_found
from framework.marathon.core.versions import MAX_VERSIONS, VersionHistory
from framework.state.state_store import SchedulerStore
from framework.scheduling.task_record import RUNNING, TaskRecord
from framework.tasks.timestamps import format_timestamp, parse_timestamp

log = logging.getLogger(__name__)

APP, PLAN, GROUP = "app", "deployment", "group"
AppEdits = Dict[str, Optional[dict]]              # app id -> its new definition, None: removed
GroupEdits = Dict[str, Optional[groups.Group]]    # group id -> the group, None: removed
CHANGE_LOG = 4096


@dataclass
class Backoff:
    """Launch delay after failures (backoffSeconds * backoffFactor^n, capped)."""
    delay: float = 0.0
    until: float = 0.0
    since: str = field(default_factory=format_timestamp)


class GroupManager:
    def __init__(self, store: SchedulerStore, events: EventBus,
                 clock: Callable[[], float] = time.time, max_versions: int = MAX_VERSIONS) -> None:
        self.store = store
        self.events = events
        self.clock = clock
        self.lock = threading.RLock()
        self.apps: Dict[str, dict] = store.items(APP)
        self.groups: Dict[str, groups.Group] = {i: groups.Group.from_json(g)
                                                for i, g in store.items(GROUP).items()}
        self.plans: Dict[str, dict] = store.items(PLAN)
        self.history = VersionHistory(store, max_versions)
        self.groups.setdefault(groups.ROOT, groups.new_group(groups.ROOT, format_timestamp(clock())))
        # service port -> the app that has it (apps pick free ones: core/app_changes.py)
        self.port_owners: Dict[int, str] = {port: a["id"] for a in self.apps.values()
                                            for port in app_model.service_ports(a) if port}
        # group id -> the ids of its direct apps and groups
        self._members: Dict[str, Set[str]] = {}
        for path_id in list(self.apps) + list(self.groups):
            if path_id != groups.ROOT:
                self._members.setdefault(groups.parent(path_id), set()).add(path_id)
        self.tasks: Dict[str, TaskRecord] = {}     # the API's tasks, by id
        self.kill_requested: Dict[str, float] = {}  # task id -> when the kill was last sent
        self.backoff: Dict[str, Backoff] = {}
        self.last_failure: Dict[str, dict] = {}
        self.progress: Dict[str, int] = {}          # plan id -> its current step (from 0)
        self.held: Set[str] = set()                 # apps waiting for an earlier step
        self.task_health = None     # the tasks' health (core/task_health.py), once made
        self.readiness = None  # readiness checks of deployments (framework.marathon.core.readiness)
        # Bumped by every change an answer may show (the listing cache's key),
        # with what changed in a short log (framework.marathon.api.app_view).
        self.generation = 0
        self._log: Deque[Tuple[int, Optional[FrozenSet[str]]]] = deque(maxlen=CHANGE_LOG)
        self._last_version = ""
        self._wake: Callable[[], None] = lambda: None
        log.info("apps: %d, groups: %d, deployments: %d", len(self.apps), len(self.groups),
                 len(self.plans))

    def on_change(self, wake: Callable[[], None]) -> None:
        """`wake()` is called after every change that may need the instance keeper."""
        self._wake = wake

    def wake(self) -> None:
        self._wake()

    def now(self) -> str:
        """A new version: the time, and never the same twice (a restart within
        the same millisecond must still count as a new configuration)."""
        text = format_timestamp(self.clock())
        if text <= self._last_version:
            text = format_timestamp(parse_timestamp(self._last_version) + 0.001)
        self._last_version = text
        return text

    def touched(self, app_ids: Optional[Iterable[str]] = None) -> None:
        """Something an answer may show changed: the status of these apps
        (their tasks, deployments, last failure), or, with None, anything."""
        self.generation += 1
        self._log.append((self.generation, None if app_ids is None else frozenset(app_ids)))

    def changed_since(self, generation: int) -> Optional[Set[str]]:
        """The apps whose status changed after `generation`; None when more
        than that changed (definitions, groups) or the log does not reach back."""
        if generation == self.generation:
            return set()
        if not self._log or self._log[0][0] > generation + 1:
            return None
        out: Set[str] = set()
        for when, apps in reversed(self._log):
            if when <= generation:
                break
            if apps is None:
                return None
            out |= apps
        return out

    # -- reads (callers hold the lock) ---------------------------------------------------
    def tree(self) -> groups.Tree:
        return self.apps, self.groups

    def app(self, app_id: str) -> dict:
        app = self.apps.get(app_id)
        if app is None:
            raise app_not_found(app_id)
        return app

    def group(self, group_id: str) -> dict:
        group = self.groups.get(group_id)
        if group is None:
            raise groups.group_not_found(group_id)
        return group

    def live_tasks(self, app_id: Optional[str] = None) -> List[TaskRecord]:
        """Launched, alive tasks (of one app): what /v2/tasks lists; pending ones
        are in the queue instead."""
        return [t for t in self.tasks.values()
                if t.alive and t.launched and (app_id is None or t.app_id == app_id)]

    def by_app(self) -> Tuple[Dict[str, List[str]], Dict[str, List[TaskRecord]]]:
        """Deployment ids and launched live tasks per app, in one pass each
        (listing 1,000 apps must not scan every plan and task per app)."""
        plans: Dict[str, List[str]] = {}
        for plan in self.plans.values():
            for app_id in deployments.affected_apps(plan):
                plans.setdefault(app_id, []).append(plan["id"])
        tasks: Dict[str, List[TaskRecord]] = {}
        for task in self.tasks.values():
            if task.alive and task.launched:
                tasks.setdefault(task.app_id, []).append(task)
        return plans, tasks

    def counts(self, tasks: List[TaskRecord]) -> Dict[str, int]:
        healthy = unhealthy = 0
        if self.task_health is not None:
            for task in tasks:
                verdict = self.task_health.healthy(task) if task.state == RUNNING else None
                healthy += verdict is True
                unhealthy += verdict is False
        return {"tasksStaged": sum(1 for t in tasks if t.state != RUNNING),
                "tasksRunning": sum(1 for t in tasks if t.state == RUNNING),
                "tasksHealthy": healthy, "tasksUnhealthy": unhealthy}

    def queued(self) -> List[Tuple[dict, int, Backoff]]:
        """Apps still waiting for instances: (app, how many, launch delay); not
        the apps whose deployment step has not come yet."""
        alive: Dict[str, List[TaskRecord]] = {}
        for task in self.tasks.values():
            if task.alive:
                alive.setdefault(task.app_id, []).append(task)
        out = []
        for app in self.apps.values():
            if app["id"] in self.held:
                continue
            live = alive.get(app["id"], [])
            waiting = sum(1 for t in live if t.pending)
            missing = max(0, app["instances"] - len(live))
            if waiting + missing:
                out.append((app, waiting + missing, self.backoff.get(app["id"], Backoff())))
        return out

    def waiting_reason(self, app_id: str) -> Optional[str]:
        """Why an app's pending task is not launched yet, as the scheduler says."""
        return next((t.message for t in self.tasks.values() if t.app_id == app_id
                     and t.alive and t.pending and t.message), None)

    def locking(self, app_ids: Iterable[str]) -> List[str]:
        wanted = set(app_ids)
        return [p["id"] for p in self.plans.values()
                if wanted & set(deployments.affected_apps(p))]

    def check_lock(self, app_ids: Iterable[str], force: bool) -> None:
        locking = self.locking(app_ids)
        if locking and not force:
            raise app_locked(locking)

    # -- changes -------------------------------------------------------------------------
    def change(self, apps: AppEdits, group_changes: GroupEdits,
               version: str, force: bool, restart: Iterable[str] = (),
               posted: Iterable[dict] = ()) -> dict:
        """Set (or with None remove) these apps and groups, as one deployment.
        The groups on the way to each app and group are created, and every group
        above a change gets `version`. `posted`: the app definitions a client
        sent (an `api_post_event` each, before the deployment's event). Returns
        the plan. Nothing is written or shown unless every check passes."""
        new_apps, new_groups, touched, added_below = self._edit_tree(apps, group_changes, version)
        self._check_tree(new_apps, new_groups, apps, group_changes, added_below)
        replaced = self.locking(set(apps))
        if replaced and not force:
            raise app_locked(replaced)
        original = {i: self.apps.get(i) for i in apps}
        structural = (new_groups.keys() ^ self.groups.keys()) | set(group_changes)
        plan = deployments.new_plan(
            version, original, dict(apps), groups.dependency_layers((new_apps, new_groups)),
            {g: _json(self.groups.get(g)) for g in structural},
            {g: _json(new_groups.get(g)) for g in structural},
            restart)
        changed_groups = {g: new_groups.get(g) for g in structural | touched}
        members = self._members_after(apps, changed_groups, new_apps, new_groups)
        self._write(apps, changed_groups, new_apps, new_groups, plan, replaced, members)
        self._update_indexes(apps, changed_groups, members)
        for plan_id in replaced:
            old_plan = self.plans.pop(plan_id)
            self.progress.pop(plan_id, None)
            self.events.publish("deployment_failed", id=plan_id, plan=deployments.to_json(old_plan))
        self.apps, self.groups = new_apps, new_groups
        for app_id in apps:
            self.backoff.pop(app_id, None)
        self.plans[plan["id"]] = plan
        self.touched()
        self._publish_change(apps, original, posted, plan)
        self.wake()
        return plan

    def _edit_tree(self, apps: AppEdits, group_changes: GroupEdits,
                   version: str) -> Tuple[Dict[str, dict], Dict[str, dict], Set[str], Set[str]]:
        """The tree after the change (copies): its apps, its groups, the groups the
        change touches and those it adds something below."""
        new_apps = dict(self.apps)
        new_groups = dict(self.groups)
        for app_id, app in apps.items():
            if app is None:
                new_apps.pop(app_id, None)
            else:
                new_apps[app_id] = app
        for group_id, group in group_changes.items():
            if group is None:
                new_groups.pop(group_id, None)
            else:
                new_groups[group_id] = group
        touched, added_below = {groups.ROOT}, set()
        for path_id, value in list(apps.items()) + list(group_changes.items()):
            touched.update(groups.ancestors(path_id))
            if value is not None:
                added_below.update(groups.ancestors(path_id))
        touched.update(g for g, group in group_changes.items() if group is not None)
        for group_id in touched:
            if group_id in new_groups or group_id in added_below:
                current = new_groups.get(group_id) or groups.new_group(group_id, version)
                new_groups[group_id] = replace(current, version=version)
        return new_apps, new_groups, touched, added_below

    @staticmethod
    def _check_tree(new_apps: Dict[str, dict], new_groups: Dict[str, groups.Group],
                    apps: AppEdits, group_changes: GroupEdits,
                    added_below: Set[str]) -> None:
        """422 for an app where a group is (or the reverse) or a dependency cycle."""
        violations = Violations()
        paths = set(apps) | set(group_changes) | added_below
        groups.conflicts((new_apps, new_groups), paths, violations,
                         groups.may_add_cycle((new_apps, new_groups), apps, group_changes))
        violations.raise_if_any()

    def _members_after(self, apps: AppEdits,
                       changed_groups: GroupEdits, new_apps: Dict[str, dict],
                       new_groups: Dict[str, groups.Group]) -> Dict[str, Set[str]]:
        """Copies of the member sets (group -> its direct apps and groups) that change."""
        members: Dict[str, Set[str]] = {}
        for path_id in set(apps) | set(changed_groups):
            if path_id == groups.ROOT:
                continue
            parent = groups.parent(path_id)
            if parent not in members:
                members[parent] = set(self._members.get(parent, ()))
            if path_id in new_apps or path_id in new_groups:
                members[parent].add(path_id)
            else:
                members[parent].discard(path_id)
        return members

    def _update_indexes(self, apps: AppEdits,
                        changed_groups: GroupEdits,
                        members: Dict[str, Set[str]]) -> None:
        """The member sets and the service ports' owners, after a written change."""
        self._members.update(members)
        for app_id, app in apps.items():
            for port in app_model.service_ports(self.apps.get(app_id) or {}):
                if self.port_owners.get(port) == app_id:
                    del self.port_owners[port]
            for port in app_model.service_ports(app or {}):
                if port:
                    self.port_owners[port] = app_id
        for group_id, group in changed_groups.items():
            if group is None:
                self._members.pop(group_id, None)

    def _publish_change(self, apps: AppEdits, original: AppEdits,
                        posted: Iterable[dict], plan: dict) -> None:
        """The events of a change: what clients posted, health checks added or
        removed, the new deployment."""
        for app in posted:
            self.events.publish("api_post_event", clientIp="", uri=f"/v2/apps{app['id']}",
                                appDefinition=docker_credential.masked(app))
        for app_id, app in apps.items():
            health_checks.publish_changes(self.events, app_id, original.get(app_id), app)
        shown = deployments.to_json(plan)
        self.events.publish("deployment_info", plan=shown,
                            currentStep=(shown["steps"] or [{"actions": []}])[0])

    def _write(self, apps: AppEdits, changed_groups: GroupEdits,
               new_apps: Dict[str, dict], new_groups: Dict[str, groups.Group], plan: dict,
               replaced: List[str], members: Dict[str, Set[str]]) -> None:
        children: Dict[str, Tuple[Dict[str, str], Dict[str, str]]] = {}
        for group_id, group in changed_groups.items():
            if group is not None:
                below = members[group_id] if group_id in members else self._members.get(group_id, ())
                children[group_id] = ({i: new_apps[i]["version"] for i in below if i in new_apps},
                                      {i: new_groups[i].version for i in below
                                       if i in new_groups})
        try:
            with self.store.transaction():
                for plan_id in replaced:
                    self.store.delete(PLAN, plan_id)
                for app_id, app in apps.items():
                    if app is None:
                        self.store.delete(APP, app_id)
                        self.history.forget_app(app_id)
                    else:
                        self.store.put(APP, app_id, app)
                        self.history.record_app(app)
                for group_id, group in changed_groups.items():
                    if group is None:
                        self.store.delete(GROUP, group_id)
                        self.history.forget_group(group_id)
                    else:
                        self.store.put(GROUP, group_id, group.to_json())
                        self.history.record_group(group.to_json(), *children[group_id])
                self.store.put(PLAN, plan["id"], plan)
        except BaseException:
            self.history.reset()
            raise

    def drop_plan(self, plan_id: str) -> dict:
        with self.store.transaction():
            self.store.delete(PLAN, plan_id)
        self.progress.pop(plan_id, None)
        plan = self.plans.pop(plan_id)
        self.touched(deployments.affected_apps(plan))
        return plan

    def request_kill(self, task_id: str) -> None:
        self.kill_requested.setdefault(task_id, 0.0)
        self.wake()


def _json(group: Optional[groups.Group]) -> Optional[dict]:
    """A group as a deployment plan stores it (None: removed, or not there)."""
    return None if group is None else group.to_json()
