"""What the Marathon API serves: apps, deployments, and the tasks as the
scheduler last reported them, in memory behind one lock, with the store behind it.

The API's services (framework.marathon.app_service) change apps and
deployments here; the reconciler (framework.marathon.reconciler) folds task
updates in and finishes deployments. Every change to apps and deployments is
one store transaction, made before the change shows in memory. Task records are
the scheduler's (stored by it, once); the registry keeps copies to answer from.
"""
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from framework.marathon import deployments
from framework.marathon.events import EventBus
from framework.marathon.validation import app_locked, app_not_found
from framework.state_store import SchedulerStore
from framework.task_record import RUNNING, TaskRecord
from framework.timestamps import format_timestamp

log = logging.getLogger(__name__)

APP, PLAN = "app", "deployment"


@dataclass
class Backoff:
    """Launch delay after failures (backoffSeconds * backoffFactor^n, capped)."""
    delay: float = 0.0
    until: float = 0.0
    since: str = field(default_factory=format_timestamp)


class Registry:
    def __init__(self, store: SchedulerStore, events: EventBus,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.events = events
        self.clock = clock
        self.lock = threading.RLock()
        self.apps: Dict[str, dict] = store.items(APP)
        self.plans: Dict[str, dict] = store.items(PLAN)
        self.tasks: Dict[str, TaskRecord] = {}     # the API's tasks, by id
        self.kill_requested: Dict[str, float] = {}  # task id -> when the kill was last sent
        self.backoff: Dict[str, Backoff] = {}
        self.last_failure: Dict[str, dict] = {}
        self._wake: Callable[[], None] = lambda: None
        log.info("apps: %d, deployments: %d", len(self.apps), len(self.plans))

    def on_change(self, wake: Callable[[], None]) -> None:
        """`wake()` is called after every change that may need the reconciler."""
        self._wake = wake

    def wake(self) -> None:
        self._wake()

    def now(self) -> str:
        return format_timestamp(self.clock())

    # -- reads (callers hold the lock) ---------------------------------------------------
    def app(self, app_id: str) -> dict:
        app = self.apps.get(app_id)
        if app is None:
            raise app_not_found(app_id)
        return app

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
            plans.setdefault(plan["appId"], []).append(plan["id"])
        tasks: Dict[str, List[TaskRecord]] = {}
        for task in self.tasks.values():
            if task.alive and task.launched:
                tasks.setdefault(task.app_id, []).append(task)
        return plans, tasks

    @staticmethod
    def counts(tasks: List[TaskRecord]) -> Dict[str, int]:
        return {"tasksStaged": sum(1 for t in tasks if t.state != RUNNING),
                "tasksRunning": sum(1 for t in tasks if t.state == RUNNING),
                "tasksHealthy": 0, "tasksUnhealthy": 0}

    def queued(self) -> List[Tuple[dict, int, Backoff]]:
        """Apps still waiting for instances: (app, how many, launch delay)."""
        alive: Dict[str, List[TaskRecord]] = {}
        for task in self.tasks.values():
            if task.alive:
                alive.setdefault(task.app_id, []).append(task)
        out = []
        for app in self.apps.values():
            live = alive.get(app["id"], [])
            waiting = sum(1 for t in live if t.pending)
            missing = max(0, app["instances"] - len(live))
            if waiting + missing:
                out.append((app, waiting + missing, self.backoff.get(app["id"], Backoff())))
        return out

    # -- changes -------------------------------------------------------------------------
    def check_lock(self, app_id: str, force: bool) -> None:
        locking = [p["id"] for p in self.plans.values() if p["appId"] == app_id]
        if locking and not force:
            raise app_locked(locking)

    def commit(self, app_id: str, app: Optional[dict], plan: dict) -> None:
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
        else:
            self.apps[app_id] = app
        self.backoff.pop(app_id, None)
        self.plans[plan["id"]] = plan
        self.events.publish("deployment_info", plan=deployments.to_json(plan),
                            currentStep=deployments.to_json(plan)["steps"][0])
        self.wake()

    def drop_plan(self, plan_id: str) -> dict:
        with self.store.transaction():
            self.store.delete(PLAN, plan_id)
        return self.plans.pop(plan_id)

    def request_kill(self, task_id: str) -> None:
        self.kill_requested.setdefault(task_id, 0.0)
        self.wake()
