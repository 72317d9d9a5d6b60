"""Apps as the API shows them: the definition plus counts, deployments, tasks
and the last failure, as `?embed=` asks; and whole listings, fast.

Listing 1,000 apps is mostly turning dicts into JSON text. The text of each
app's definition is kept per stored version (a new version is a new dict), with
its status when nothing happens to it; a whole answer is kept, with the part of
each app, and the group manager's log of changes says what to write again: nothing
for a dashboard polling `GET /v2/apps` or `GET /v2/groups` between changes, the
few apps whose tasks moved when only they did, everything when definitions or
groups changed.
"""
import json
from typing import Callable, Dict, List, Optional, Tuple, Union

from framework.marathon.state import app_model
from framework.marathon.core.group_manager import GroupManager
from framework.marathon.api.task_json import task_json
from framework.scheduling.task_record import TaskRecord

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
    def __init__(self, group_manager: GroupManager) -> None:
        self.group_manager = group_manager
        # by app id: (the stored app, its JSON text, the text ready for more
        # fields, the same as bytes, {idle status: the whole app as bytes})
        self._texts: Dict[str, Tuple[dict, str, str, bytes, Dict[str, bytes]]] = {}
        self._answers: Dict[tuple, _Answer] = {}

    # -- one app (callers hold the group manager's lock) ------------------------------------
    def task_json(self, task: TaskRecord, with_gpus: bool) -> dict:
        app = self.group_manager.apps.get(task.app_id) or {}
        health = self.group_manager.task_health
        results = health.results_json(task) if health is not None else []
        return task_json(task, app_model.service_ports(app), with_gpus, results)

    def status(self, app: dict, embeds: set, with_gpus: bool, index=None) -> dict:
        """Counts, deployments and (when embedded) tasks and the last failure."""
        plans, tasks = index or self.group_manager.by_app()
        app_tasks = tasks.get(app["id"], [])
        out = self.group_manager.counts(app_tasks)
        out["deployments"] = [{"id": i} for i in plans.get(app["id"], [])]
        if embeds & TASK_EMBEDS:
            out["tasks"] = [self.task_json(t, with_gpus) for t in app_tasks]
        if embeds & FAILURE_EMBEDS:
            failure = self.group_manager.last_failure.get(app["id"])
            if failure:
                out["lastTaskFailure"] = failure
        if "readiness" in embeds and self.group_manager.readiness is not None:
            out["readinessCheckResults"] = self.group_manager.readiness.results_for(app["id"])
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

    def _definition(self, app: dict) -> Tuple[dict, str, str, bytes, Dict[str, bytes]]:
        cached = self._texts.get(app["id"])
        if cached is None or cached[0] is not app:
            text = compact(app_model.to_json(app))
            cached = (app, text, text[:-1] + ",", text.encode(), {})
            self._texts[app["id"]] = cached
        return cached

    def definition_parts(self, app: dict, parts: List[bytes]) -> None:
        parts.append(self._definition(app)[3])

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
                not embeds & FAILURE_EMBEDS or app_id not in self.group_manager.last_failure):
            return IDLE_WITH_TASKS if embeds & TASK_EMBEDS else IDLE
        return compact(self.status(app, embeds, with_gpus, index))[1:]

    # -- whole answers ---------------------------------------------------------------------
    def answer(self, key: tuple, build: Callable[[], Union[str, bytes]],
               shows_status: bool = True) -> bytes:
        """The answer for `key` (the route and its query), built again only
        when the group manager changed something it shows (callers hold the lock);
        `shows_status`: it shows apps' tasks, deployments or failures."""
        kept = self._answers.get(key)
        if kept is not None:
            changed = self.group_manager.changed_since(kept.generation)
            if changed is not None and (not changed or not shows_status):
                kept.generation = self.group_manager.generation
                return kept.body
        built = build()
        body = built.encode() if isinstance(built, str) else built
        self._keep(key, _Answer(self.group_manager.generation, body))
        return body

    def answer_list(self, key: tuple, select: Callable[[], List[dict]], embeds: set,
                    with_gpus: bool, wrap: Tuple[bytes, bytes] = (b"", b"")) -> bytes:
        """`wrap[0]` + the JSON array of the apps `select()` gives + `wrap[1]`;
        when only some apps' status changed since the answer was built, just
        their texts are written again."""
        group_manager = self.group_manager
        kept = self._answers.get(key)
        if kept is not None and kept.parts is not None:
            changed = group_manager.changed_since(kept.generation)
            if changed is not None:
                if changed:
                    index = group_manager.by_app()
                    for app_id in changed & kept.positions.keys():
                        app = group_manager.apps[app_id]
                        kept.parts[kept.positions[app_id]] = self._app_bytes(
                            app, embeds, with_gpus, index)
                    kept.body = b"".join((wrap[0], b"[", b",".join(kept.parts), b"]", wrap[1]))
                kept.generation = group_manager.generation
                return kept.body
        live = group_manager.apps
        if len(self._texts) > len(live) + 64:      # forget the texts of removed apps
            self._texts = {i: t for i, t in self._texts.items() if i in live}
        apps = select()
        parts = self._list_parts(apps, embeds, with_gpus)
        answer = _Answer(group_manager.generation,
                         b"".join((wrap[0], b"[", b",".join(parts), b"]", wrap[1])),
                         parts, {a["id"]: i for i, a in enumerate(apps)})
        self._keep(key, answer)
        return answer.body

    def _keep(self, key: tuple, answer: "_Answer") -> None:
        self._answers.pop(key, None)
        if len(self._answers) >= ANSWERS_KEPT:
            self._answers.pop(next(iter(self._answers)))        # the least recently built
        self._answers[key] = answer

    def list_text(self, apps: List[dict], embeds: Optional[set], with_gpus: bool) -> bytes:
        """A JSON array of the apps, as bytes."""
        return b"[" + b",".join(self._list_parts(apps, embeds, with_gpus)) + b"]"

    def _list_parts(self, apps: List[dict], embeds: Optional[set], with_gpus: bool) -> List[bytes]:
        index = self.group_manager.by_app()
        return [self._app_bytes(app, embeds, with_gpus, index) for app in apps]

    def _app_bytes(self, app: dict, embeds: Optional[set], with_gpus: bool, index) -> bytes:
        """One app of a listing as bytes; an app nothing happens to (most of a
        large listing) is its cached text."""
        cached = self._texts.get(app["id"])
        if cached is None or cached[0] is not app:
            cached = self._definition(app)
        if embeds is None:
            return cached[3]
        plans, tasks = index
        app_id = app["id"]
        if app_id in plans or app_id in tasks or (
                embeds & FAILURE_EMBEDS and app_id in self.group_manager.last_failure):
            return (cached[2] + self._status_text(app, embeds, with_gpus, index)).encode()
        idle = IDLE_WITH_TASKS if embeds & TASK_EMBEDS else IDLE
        whole = cached[4].get(idle)
        if whole is None:
            whole = cached[4][idle] = (cached[2] + idle).encode()
        return whole


class _Answer:
    """A kept answer: the generation it is true for, its bytes, and for a
    listing its apps' parts and where each app's part is."""
    __slots__ = ("generation", "body", "parts", "positions")

    def __init__(self, generation: int, body: bytes, parts: Optional[List[bytes]] = None,
                 positions: Optional[Dict[str, int]] = None) -> None:
        self.generation, self.body, self.parts, self.positions = generation, body, parts, positions
