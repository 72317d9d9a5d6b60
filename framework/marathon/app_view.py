"""Apps as the API shows them: the definition plus counts, deployments, tasks
and the last failure, as `?embed=` asks; and whole listings, fast.

Listing 1,000 apps is mostly turning dicts into JSON text. The text of each
app's definition is kept per stored version (a new version is a new dict), the
status fields are written fresh, and a whole answer is kept until the registry
changes (its `generation`): a dashboard polling `GET /v2/apps` or `GET
/v2/groups` costs one dictionary lookup between changes.
"""
import json
from typing import Callable, Dict, List, Optional, Tuple

from framework.marathon import app_model
from framework.marathon.registry import Registry
from framework.marathon.task_json import task_json
from framework.task_record import TaskRecord

TASK_EMBEDS = {"tasks", "failures"}
FAILURE_EMBEDS = {"lastTaskFailure", "failures"}
STATUS_EMBEDS = {"counts", "deployments", "tasks", "failures", "lastTaskFailure",
                 "readiness", "taskStats"}
ANSWERS_KEPT = 16
IDLE = ('"tasksStaged":0,"tasksRunning":0,"tasksHealthy":0,"tasksUnhealthy":0,'
        '"deployments":[]}')
IDLE_WITH_TASKS = IDLE[:-1] + ',"tasks":[]}'


def compact(value) -> str:
    return json.dumps(value, separators=(",", ":"))


class AppView:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._texts: Dict[str, Tuple[dict, str, str, Dict[str, str]]] = {}   # by app id
        self._answers: Dict[tuple, bytes] = {}
        self._answers_generation = -1

    # -- one app (callers hold the registry's lock) ------------------------------------
    def task_json(self, task: TaskRecord, with_gpus: bool) -> dict:
        app = self.registry.apps.get(task.app_id) or {}
        health = self.registry.health
        results = health.results_json(task) if health is not None else []
        return task_json(task, app_model.service_ports(app), with_gpus, results)

    def status(self, app: dict, embeds: set, with_gpus: bool, index=None) -> dict:
        """Counts, deployments and (when embedded) tasks and the last failure."""
        plans, tasks = index or self.registry.by_app()
        app_tasks = tasks.get(app["id"], [])
        out = self.registry.counts(app_tasks)
        out["deployments"] = [{"id": i} for i in plans.get(app["id"], [])]
        if embeds & TASK_EMBEDS:
            out["tasks"] = [self.task_json(t, with_gpus) for t in app_tasks]
        if embeds & FAILURE_EMBEDS:
            failure = self.registry.last_failure.get(app["id"])
            if failure:
                out["lastTaskFailure"] = failure
        if "readiness" in embeds and self.registry.readiness is not None:
            out["readinessCheckResults"] = self.registry.readiness.results_for(app["id"])
        return out

    def app_json(self, app: dict, embeds: set, with_gpus: bool = False, index=None) -> dict:
        out = app_model.to_json(app)
        out.update(self.status(app, embeds, with_gpus, index))
        return out

    def app_text(self, app: dict, embeds: Optional[set], with_gpus: bool, index) -> str:
        """One app as JSON text: its definition serialized once per stored
        version, the status fields (when `embeds` is not None) fresh."""
        parts: List[str] = []
        self._app_parts(app, embeds, with_gpus, index, parts)
        return "".join(parts)

    def _definition(self, app: dict) -> Tuple[dict, str, str, Dict[str, str]]:
        cached = self._texts.get(app["id"])
        if cached is None or cached[0] is not app:
            text = compact(app_model.to_json(app))
            # the definition; ready for more fields; with the status of an idle app
            cached = (app, text, text[:-1] + ",", {})
            self._texts[app["id"]] = cached
        return cached

    def definition_parts(self, app: dict, parts: List[str]) -> None:
        parts.append(self._definition(app)[1])

    def _app_parts(self, app: dict, embeds: Optional[set], with_gpus: bool, index,
                   parts: List[str]) -> None:
        if embeds is None:
            parts.append(self._definition(app)[1])
            return
        parts.append(self._definition(app)[2])
        parts.append(self._status_text(app, embeds, with_gpus, index))

    def _status_text(self, app: dict, embeds: set, with_gpus: bool, index) -> str:
        """The status fields and the closing brace. An app without tasks,
        deployments or failure (most of a large listing) takes a constant."""
        plans, tasks = index
        app_id = app["id"]
        if app_id not in plans and app_id not in tasks and (
                not embeds & FAILURE_EMBEDS or app_id not in self.registry.last_failure):
            return IDLE_WITH_TASKS if embeds & TASK_EMBEDS else IDLE
        return compact(self.status(app, embeds, with_gpus, index))[1:]

    # -- whole answers ---------------------------------------------------------------------
    def answer(self, key: tuple, build: Callable[[], str]) -> bytes:
        """The answer for `key` (the route and its query), built once per
        registry generation (callers hold the registry's lock)."""
        if self._answers_generation != self.registry.generation:
            self._answers = {}
            self._answers_generation = self.registry.generation
            live = self.registry.apps
            if len(self._texts) > len(live) + 64:      # forget the texts of removed apps
                self._texts = {i: t for i, t in self._texts.items() if i in live}
        body = self._answers.get(key)
        if body is None:
            body = build().encode()
            if len(self._answers) >= ANSWERS_KEPT:
                self._answers.pop(next(iter(self._answers)))
            self._answers[key] = body
        return body

    def list_text(self, apps: List[dict], embeds: Optional[set], with_gpus: bool) -> str:
        index = self.registry.by_app()
        plans, tasks = index
        failures = self.registry.last_failure if embeds and embeds & FAILURE_EMBEDS else {}
        idle = IDLE_WITH_TASKS if embeds and embeds & TASK_EMBEDS else IDLE
        texts = self._texts
        parts = []
        for app in apps:
            app_id = app["id"]
            cached = texts.get(app_id)
            if cached is None or cached[0] is not app:
                cached = self._definition(app)
            if embeds is None:
                parts.append(cached[1])
            elif app_id in plans or app_id in tasks or app_id in failures:
                parts.append(cached[2] + self._status_text(app, embeds, with_gpus, index))
            else:                       # most apps of a large listing: nothing is happening
                whole = cached[3].get(idle)
                if whole is None:
                    whole = cached[3][idle] = cached[2] + idle
                parts.append(whole)
        return "[" + ",".join(parts) + "]"
