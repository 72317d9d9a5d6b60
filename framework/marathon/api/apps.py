"""`/v2/apps`: apps, their tasks and versions."""
import re
from typing import Any, Callable, Dict, List, Optional

from framework.marathon.state import app_model
from framework.marathon.core import deployments
from framework.marathon.state import path_ids as ids
from framework.marathon.api.context import ApiContext
from framework.http.json_reader import index, parse_body
from framework.http.routing import Request, Response, Router
from framework.http.validation import ApiError, Violations, app_not_found, message

APP = r"(?P<app_id>/.+)"
ONLY_VERSION = "The 'version' field may only be combined with the 'id' field."


def register(router: Router, api: ApiContext) -> None:
    apps = AppsResource(api)
    router.add(r"/v2/apps", GET=apps.list, POST=apps.create, PUT=apps.put_many,
               PATCH=apps.patch_many)
    router.add(rf"/v2/apps{APP}/tasks/(?P<task_id>[^/]+)", DELETE=apps.kill_task)
    router.add(rf"/v2/apps{APP}/tasks", GET=apps.tasks, DELETE=apps.kill_tasks)
    router.add(rf"/v2/apps{APP}/restart", POST=apps.restart)
    router.add(rf"/v2/apps{APP}/versions/(?P<version>[^/]+)", GET=apps.version)
    router.add(rf"/v2/apps{APP}/versions", GET=apps.versions)
    router.add(rf"/v2/apps{APP}", GET=apps.show, PUT=apps.put, PATCH=apps.patch,
               DELETE=apps.delete)


def deployment(plan: dict, status: int = 200) -> Response:
    return Response(status, deployments.result(plan), {"Marathon-Deployment-Id": plan["id"]})


class AppsResource:
    def __init__(self, api: ApiContext) -> None:
        self.api = api
        self.group_manager = api.group_manager
        self.changes = api.apps

    # -- reading bodies -----------------------------------------------------------------
    def _read(self, raw: Any, app_id: Optional[str] = None) -> dict:
        violations = Violations()
        app = app_model.read_app(raw, violations, self.api.policy, app_id)
        violations.raise_if_any()
        return app

    def _merged(self, raw: Any, app_id: str, partial: bool, allow_create: bool,
                v: Violations, where: str) -> Optional[dict]:
        """An update body as a whole app (merged into the stored one when partial)."""
        existing = self.group_manager.apps.get(app_id)
        if existing is None and not allow_create:
            raise app_not_found(app_id)
        if existing is not None and partial:
            raw = app_model.merge_update(existing, raw)
        inner = Violations()
        app = app_model.read_app(raw, inner, self.api.policy, app_id, existing)
        v.merge(inner, where)
        return app

    # -- apps -----------------------------------------------------------------------------
    def create(self, r: Request) -> Response:
        app = self._read(parse_body(r.body))
        app, plan = self.changes.create(app, r.flag("force"))
        with self.group_manager.lock:
            body = self.api.view.app_json(app, set())
        body.update(tasksStaged=0, tasksRunning=0, tasksHealthy=0, tasksUnhealthy=0,
                    deployments=[{"id": plan["id"]}])
        return Response(201, body, {"Location": app["id"], "Marathon-Deployment-Id": plan["id"]})

    def put(self, r: Request, app_id: str) -> Response:
        return self._update(r, app_id, partial=r.flag("partialUpdate", True), allow_create=True)

    def patch(self, r: Request, app_id: str) -> Response:
        return self._update(r, app_id, partial=True, allow_create=False)

    def _update(self, r: Request, raw_id: str, partial: bool, allow_create: bool) -> Response:
        for problem in ids.errors(raw_id):
            raise ApiError(422, {"message": "Object is not valid",
                                 "details": [{"path": "/id", "errors": [problem]}]})
        app_id = ids.canonical(raw_id)
        raw = parse_body(r.body)
        if isinstance(raw, dict) and raw.get("version") is not None:
            return self._rollback(r, app_id, raw)
        with self.group_manager.lock:
            v = Violations()
            app = self._merged(raw, app_id, partial, allow_create, v, "/")
            v.raise_if_any()
            plan, created = self.changes.update(app_id, app, r.flag("force"))
        response = deployment(plan, 201 if created else 200)
        if created:
            response.headers["Location"] = app_id
        return response

    def _rollback(self, r: Request, app_id: str, raw: dict) -> Response:
        others = [k for k in raw if k not in ("id", "version") and raw[k] is not None]
        if others or not isinstance(raw["version"], str):
            raise ApiError(422, {"message": "Object is not valid",
                                 "details": [{"path": "/", "errors": [ONLY_VERSION]}]})
        return deployment(self.changes.rollback(app_id, raw["version"], r.flag("force")))

    def put_many(self, r: Request) -> Response:
        return self._update_many(r, partial=r.flag("partialUpdate", True), allow_create=True)

    def patch_many(self, r: Request) -> Response:
        return self._update_many(r, partial=True, allow_create=False)

    def _update_many(self, r: Request, partial: bool, allow_create: bool) -> Response:
        """PUT/PATCH /v2/apps: a list of apps (each with its id), one deployment."""
        raw = parse_body(r.body)
        if not isinstance(raw, list):
            raise ApiError(422, {"message": "Invalid JSON", "details": [
                {"path": "/", "errors": ["error.expected.jsarray"]}]})
        v = Violations()
        with self.group_manager.lock:
            apps: List[dict] = []
            seen = set()
            for i, item in enumerate(raw):
                where = index("/", i)
                raw_id = item.get("id") if isinstance(item, dict) else None
                if not isinstance(raw_id, str) or not raw_id.strip("/"):
                    v.type_error(f"{where}/id", "error.path.missing")
                    continue
                problems = ids.errors(raw_id)
                for problem in problems:
                    v.rule(f"{where}/id", problem)
                if problems:
                    continue
                app_id = ids.canonical(raw_id)
                if app_id in seen:
                    v.rule(f"{where}/id", f"app {app_id} is given twice")
                    continue
                seen.add(app_id)
                app = self._merged(item, app_id, partial, allow_create, v, where)
                if app is not None:
                    apps.append(app)
            v.raise_if_any()
            if not apps:
                raise ApiError(422, {"message": "Object is not valid", "details": [
                    {"path": "/", "errors": ["at least one app is required"]}]})
            plan, _ = self.changes.update_many(apps, r.flag("force"))
        return deployment(plan)

    def delete(self, r: Request, app_id: str) -> Response:
        return deployment(self.changes.delete(ids.canonical(app_id), r.flag("force", default=True)))

    def restart(self, r: Request, app_id: str) -> Response:
        return deployment(self.changes.restart(ids.canonical(app_id), r.flag("force")))

    def list(self, r: Request) -> Response:
        embeds = r.embeds()
        cmd, wanted_id, label = r.text("cmd"), r.text("id"), r.text("label")
        selector = label_selector(label) if label else None
        key = ("apps", tuple(sorted(embeds)), cmd, wanted_id, label, r.flag("gpus"))
        with self.group_manager.lock:
            def select() -> list:
                apps = list(self.group_manager.apps.values())
                if cmd:
                    apps = [a for a in apps if cmd.lower() in (a.get("cmd") or "").lower()]
                if wanted_id:
                    apps = [a for a in apps if wanted_id.lower() in a["id"].lower()]
                if selector:
                    apps = [a for a in apps if selector(a["labels"])]
                return apps
            body = self.api.view.answer_list(key, select, embeds, r.flag("gpus"),
                                             (b'{"apps":', b"}"))
        return Response(200, body, {"Content-Type": "application/json"})

    def show(self, r: Request, app_id: str) -> Response:
        app_id = ids.canonical(app_id)
        with self.group_manager.lock:
            app = self.group_manager.app(app_id)
            embeds = r.embeds() | {"tasks", "lastTaskFailure"}
            return Response(200, {"app": self.api.view.app_json(app, embeds, r.flag("gpus"))})

    def versions(self, r: Request, app_id: str) -> Response:
        return Response(200, {"versions": self.changes.versions(ids.canonical(app_id))})

    def version(self, r: Request, app_id: str, version: str) -> Response:
        return Response(200, app_model.to_json(self.changes.at_version(ids.canonical(app_id),
                                                                       version)))

    # -- tasks ------------------------------------------------------------------------------
    def tasks(self, r: Request, app_id: str) -> Response:
        app_id = ids.canonical(app_id)
        with self.group_manager.lock:
            self.group_manager.app(app_id)
            tasks = self.group_manager.live_tasks(app_id)
            return Response(200, {"tasks": [self.api.view.task_json(t, r.flag("gpus"))
                                            for t in tasks]})

    def kill_task(self, r: Request, app_id: str, task_id: str) -> Response:
        scale_and_wipe(r)
        task, plan = self.changes.kill_task(ids.canonical(app_id), task_id, r.flag("scale"),
                                            r.flag("force"))
        if plan is not None:
            return deployment(plan)
        with self.group_manager.lock:
            return Response(200, {"task": self.api.view.task_json(task, r.flag("gpus"))})

    def kill_tasks(self, r: Request, app_id: str) -> Response:
        scale_and_wipe(r)
        tasks, plan = self.changes.kill_tasks(ids.canonical(app_id), r.text("host"),
                                              r.flag("scale"), r.flag("force"))
        if plan is not None:
            return deployment(plan)
        with self.group_manager.lock:
            return Response(200, {"tasks": [self.api.view.task_json(t, r.flag("gpus"))
                                            for t in tasks]})


def scale_and_wipe(r: Request) -> None:
    if r.flag("scale") and r.flag("wipe"):
        raise message(400, "You cannot use scale and wipe at the same time.")


# -- label selectors (GET /v2/apps?label=...) ---------------------------------------------
_SELECTOR = re.compile(
    r"\s*((?:\\.|[-A-Za-z0-9_.])+)\s*(?:(==|!=)\s*((?:\\.|[-A-Za-z0-9_.])*)|"
    r"\s(in|notin)\s*\(([^)]*)\))?\s*")


def label_selector(query: str) -> Callable[[Dict[str, str]], bool]:
    """Marathon's label selector: `a`, `a==x`, `a!=x`, `a in (x,y)`, `a notin (x)`,
    comma-separated, all must hold; backslash escapes. Unparseable: 400."""
    tests = []
    for part in _split_selectors(query):
        match = _SELECTOR.fullmatch(part)
        if not match:
            raise message(400, f"Invalid label selector query: {query}")
        name = _unescape(match.group(1))
        operator = match.group(2) or match.group(4)
        if operator in ("==", "!="):
            value = _unescape(match.group(3))
            tests.append(lambda labels, n=name, v=value, eq=(operator == "=="):
                         n in labels and (labels[n] == v) == eq)
        elif operator in ("in", "notin"):
            values = {_unescape(v.strip()) for v in match.group(5).split(",")}
            tests.append(lambda labels, n=name, vs=values, inside=(operator == "in"):
                         n in labels and (labels[n] in vs) == inside)
        else:
            tests.append(lambda labels, n=name: n in labels)
    return lambda labels: all(test(labels) for test in tests)


def _split_selectors(query: str) -> List[str]:
    parts, current, depth, escaped = [], "", 0, False
    for char in query:
        if escaped:
            current, escaped = current + char, False
            continue
        if char == "\\":
            current, escaped = current + char, True
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)
