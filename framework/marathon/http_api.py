"""The Marathon v2 routes: request in, (status, JSON body, headers) out.

Kept free of sockets so every route can be read in one place; `server.py`
puts it behind an HTTP server. Query booleans are read as Marathon (JAX-RS)
reads them: `true` in any case is true, anything else false.
"""
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional
from urllib.parse import parse_qs, unquote

from framework.marathon import app_model, deployments, ids
from framework.marathon.app_manager import AppManager
from framework.marathon.json_reader import parse_body
from framework.marathon.security import DockerPolicy
from framework.marathon.task_records import TaskView
from framework.marathon.validation import ApiError, Violations, app_not_found, message

log = logging.getLogger(__name__)

VERSION = "1.10.26-mesos-gpu"
EMBED_PREFIXES = ("apps.", "app.")


@dataclass
class Response:
    status: int
    body: Any = None                      # JSON-able, str (text/plain) or None
    headers: Dict[str, str] = field(default_factory=dict)


@dataclass
class Request:
    method: str
    path: str
    query: Dict[str, List[str]]
    body: bytes = b""
    accept: str = ""
    client: str = ""

    @classmethod
    def parse(cls, method: str, target: str, body: bytes = b"", accept: str = "",
              client: str = "") -> "Request":
        raw_path, _, raw_query = target.partition("?")
        path = re.sub(r"/{2,}", "/", unquote(raw_path))
        return cls(method, path, parse_qs(raw_query, keep_blank_values=True), body, accept, client)

    def flag(self, name: str, default: bool = False) -> bool:
        values = self.query.get(name)
        return default if not values else values[-1].strip().lower() == "true"

    def text(self, name: str) -> Optional[str]:
        values = self.query.get(name)
        return values[-1] if values else None

    def embeds(self) -> set:
        out = set()
        for value in self.query.get("embed", ()):
            for prefix in EMBED_PREFIXES:
                if value.startswith(prefix):
                    value = value[len(prefix):]
            out.add(value)
        return out


class MarathonApi:
    def __init__(self, manager: AppManager, policy: DockerPolicy, info: Callable[[], dict]) -> None:
        self.manager = manager
        self.policy = policy
        self.info = info
        self._texts: Dict[str, tuple] = {}     # app id -> (stored app, its JSON text)

    def handle(self, request: Request) -> Response:
        try:
            return self._route(request)
        except ApiError as e:
            return Response(e.status, e.body, e.headers)

    # -- routing ------------------------------------------------------------------------
    def _route(self, r: Request) -> Response:
        path, method = r.path, r.method
        if path in ("/ping", "/ping/"):
            self._allow(method, "GET")
            if "application/json" in r.accept:
                return Response(200, "pong", {"Content-Type": "application/json"})
            return Response(200, "pong\n")
        if not path.startswith("/v2/"):
            raise message(404, "URI not found")
        rest = path[len("/v2"):].rstrip("/") or "/"
        if rest == "/info":
            self._allow(method, "GET")
            return Response(200, self.info())
        if rest == "/apps":
            self._allow(method, "GET", "POST")
            return self.list_apps(r) if method == "GET" else self.create_app(r)
        if rest.startswith("/apps/"):
            return self._app_route(r, rest[len("/apps"):])
        if rest == "/tasks":
            self._allow(method, "GET")
            return self.list_tasks(r)
        if rest == "/tasks/delete":
            self._allow(method, "POST")
            return self.delete_tasks(r)
        if rest == "/deployments":
            self._allow(method, "GET")
            with self.manager.lock:
                return Response(200, [deployments.to_json(p) for p in self.manager.plans.values()])
        if rest.startswith("/deployments/"):
            self._allow(method, "DELETE")
            return self.cancel_deployment(r, rest[len("/deployments/"):])
        if rest == "/queue":
            self._allow(method, "GET")
            return self.queue()
        match = re.fullmatch(r"/queue(/.+)/delay", rest)
        if match:
            self._allow(method, "DELETE")
            self.manager.reset_delay(ids.canonical(match.group(1)))
            return Response(204)
        raise message(404, "URI not found")

    def _app_route(self, r: Request, rest: str) -> Response:
        method = r.method
        match = re.fullmatch(r"(/.+)/tasks/([^/]+)", rest)
        if match and method == "DELETE":
            return self.kill_task(r, ids.canonical(match.group(1)), match.group(2))
        match = re.fullmatch(r"(/.+)/tasks", rest)
        if match:
            self._allow(method, "GET", "DELETE")
            app_id = ids.canonical(match.group(1))
            return self.app_tasks(r, app_id) if method == "GET" else self.kill_tasks(r, app_id)
        match = re.fullmatch(r"(/.+)/restart", rest)
        if match:
            self._allow(method, "POST")
            return self._deployment(self.manager.restart(ids.canonical(match.group(1)),
                                                         r.flag("force")))
        match = re.fullmatch(r"(/.+)/versions(?:/([^/]+))?", rest)
        if match and method == "GET":
            return self.versions(ids.canonical(match.group(1)), match.group(2))
        self._allow(method, "GET", "PUT", "PATCH", "DELETE")
        app_id = ids.canonical(rest)
        if method == "GET":
            return self.show_app(r, app_id)
        if method == "DELETE":
            return self._deployment(self.manager.delete(app_id, r.flag("force", default=True)))
        return self.update_app(r, rest, partial=(method == "PATCH" or r.flag("partialUpdate", True)),
                               allow_create=(method == "PUT"))

    @staticmethod
    def _allow(method: str, *methods: str) -> None:
        if method not in methods:
            raise ApiError(405, {"message": "HTTP 405 Method Not Allowed"},
                           {"Allow": ", ".join(methods)})

    # -- apps -----------------------------------------------------------------------------
    def _read(self, raw: Any, app_id: Optional[str] = None) -> dict:
        violations = Violations()
        app = app_model.read_app(raw, violations, self.policy, app_id)
        violations.raise_if_any()
        return app

    def create_app(self, r: Request) -> Response:
        app = self._read(parse_body(r.body))
        app, plan = self.manager.create(app, r.flag("force"))
        body = app_model.to_json(app)
        body.update(tasksStaged=0, tasksRunning=0, tasksHealthy=0, tasksUnhealthy=0,
                    deployments=[{"id": plan["id"]}])
        return Response(201, body, {"Location": app["id"], "Marathon-Deployment-Id": plan["id"]})

    def update_app(self, r: Request, raw_id: str, partial: bool, allow_create: bool) -> Response:
        for problem in ids.errors(raw_id):
            raise ApiError(422, {"message": "Object is not valid",
                                 "details": [{"path": "/id", "errors": [problem]}]})
        app_id = ids.canonical(raw_id)
        raw = parse_body(r.body)
        with self.manager.lock:
            existing = self.manager.apps.get(app_id)
            if existing is None and not allow_create:
                raise app_not_found(app_id)
            if existing is not None and partial:
                raw = app_model.merge_update(existing, raw)
            app = self._read(raw, app_id)
            plan, created = self.manager.update(app_id, app, r.flag("force"))
        headers = {"Marathon-Deployment-Id": plan["id"]}
        if created:
            headers["Location"] = app_id
        return Response(201 if created else 200, deployments.result(plan), headers)

    def list_apps(self, r: Request) -> Response:
        embeds = r.embeds()
        cmd, wanted_id, label = r.text("cmd"), r.text("id"), r.text("label")
        with self.manager.lock:
            apps = list(self.manager.apps.values())
            if cmd:
                apps = [a for a in apps if cmd.lower() in (a.get("cmd") or "").lower()]
            if wanted_id:
                apps = [a for a in apps if wanted_id.lower() in a["id"].lower()]
            if label:
                selector = label_selector(label)
                apps = [a for a in apps if selector(a["labels"])]
            index = self.manager.by_app()
            texts = [self._app_text(a, embeds, r.flag("gpus"), index) for a in apps]
            if not (cmd or wanted_id or label):      # forget the texts of deleted apps
                self._texts = {a["id"]: self._texts[a["id"]] for a in apps}
        return Response(200, ('{"apps":[' + ",".join(texts) + "]}").encode(),
                        {"Content-Type": "application/json"})

    def _app_text(self, app: dict, embeds: set, with_gpus: bool, index) -> str:
        """One app of a list as JSON text: its definition serialized once per
        stored version (listing 1,000 apps is mostly serialization), the
        status fields fresh each time."""
        cached = self._texts.get(app["id"])
        if cached is None or cached[0] is not app:
            cached = (app, json.dumps(app_model.to_json(app), separators=(",", ":")))
            self._texts[app["id"]] = cached
        status = self._status_json(app, embeds, with_gpus, index)
        return cached[1][:-1] + "," + json.dumps(status, separators=(",", ":"))[1:]

    def show_app(self, r: Request, app_id: str) -> Response:
        with self.manager.lock:
            app = self.manager.get(app_id)
            embeds = r.embeds() | {"tasks", "lastTaskFailure"}
            return Response(200, {"app": self._app_json(app, embeds, r.flag("gpus"))})

    def _app_json(self, app: dict, embeds: set, with_gpus: bool = False, index=None) -> dict:
        out = app_model.to_json(app)
        out.update(self._status_json(app, embeds, with_gpus, index))
        return out

    def _status_json(self, app: dict, embeds: set, with_gpus: bool, index=None) -> dict:
        """Counts, deployments and (when embedded) tasks and the last failure."""
        plans, tasks = index or self.manager.by_app()
        app_tasks = tasks.get(app["id"], [])
        out = self.manager.counts(app["id"], app_tasks)
        out["deployments"] = [{"id": i} for i in plans.get(app["id"], [])]
        if embeds & {"tasks", "failures"}:
            out["tasks"] = [self._task_json(t, with_gpus) for t in app_tasks]
        if embeds & {"lastTaskFailure", "failures"}:
            failure = self.manager.last_failure.get(app["id"])
            if failure:
                out["lastTaskFailure"] = failure
        return out

    def versions(self, app_id: str, version: Optional[str]) -> Response:
        app = self.manager.get(app_id)
        if version is None:
            return Response(200, {"versions": [app["version"]]})
        if version != app["version"]:
            raise message(404, f"App '{app_id}' does not exist in version {version}")
        return Response(200, app_model.to_json(app))

    # -- tasks ----------------------------------------------------------------------------
    def _task_json(self, view: TaskView, with_gpus: bool) -> dict:
        app = self.manager.apps.get(view.app_id) or {}
        ports = [d["port"] for d in app.get("portDefinitions", ())]
        return view.to_json(ports, with_gpus)

    def app_tasks(self, r: Request, app_id: str) -> Response:
        with self.manager.lock:
            self.manager.get(app_id)
            tasks = self.manager.tasks_of(app_id)
            return Response(200, {"tasks": [self._task_json(t, r.flag("gpus")) for t in tasks]})

    def list_tasks(self, r: Request) -> Response:
        states = {s.strip().upper() for v in r.query.get("status", ()) for s in v.split(",") if s.strip()}
        with self.manager.lock:
            tasks = self.manager.all_tasks()
            if states:
                tasks = [t for t in tasks if t.state.removeprefix("TASK_") in
                         {s.removeprefix("TASK_") for s in states}]
            return Response(200, {"tasks": [self._task_json(t, r.flag("gpus")) for t in tasks]})

    def kill_task(self, r: Request, app_id: str, task_id: str) -> Response:
        self._scale_and_wipe(r)
        view, plan = self.manager.kill_task(app_id, task_id, r.flag("scale"), r.flag("force"))
        if plan is not None:
            return self._deployment(plan)
        with self.manager.lock:
            return Response(200, {"task": self._task_json(view, r.flag("gpus"))})

    def kill_tasks(self, r: Request, app_id: str) -> Response:
        self._scale_and_wipe(r)
        views, plan = self.manager.kill_tasks(app_id, r.text("host"), r.flag("scale"), r.flag("force"))
        if plan is not None:
            return self._deployment(plan)
        with self.manager.lock:
            return Response(200, {"tasks": [self._task_json(v, r.flag("gpus")) for v in views]})

    def delete_tasks(self, r: Request) -> Response:
        """POST /v2/tasks/delete {"ids": [...]}: kill these tasks (and scale down)."""
        self._scale_and_wipe(r)
        body = parse_body(r.body)
        if not isinstance(body, dict) or not isinstance(body.get("ids"), list) \
                or not all(isinstance(i, str) for i in body["ids"]):
            raise ApiError(422, {"message": "Invalid JSON",
                                 "details": [{"path": "/ids", "errors": ["error.expected.jsarray"]}]})
        plan = self.manager.kill_many(body["ids"], r.flag("scale"), r.flag("force"))
        if plan is not None:
            return self._deployment(plan)
        return Response(200, {})

    @staticmethod
    def _scale_and_wipe(r: Request) -> None:
        if r.flag("scale") and r.flag("wipe"):
            raise message(400, "You cannot use scale and wipe at the same time.")

    # -- deployments and queue ------------------------------------------------------------
    def _deployment(self, plan: dict) -> Response:
        return Response(200, deployments.result(plan), {"Marathon-Deployment-Id": plan["id"]})

    def cancel_deployment(self, r: Request, plan_id: str) -> Response:
        rollback = self.manager.cancel(plan_id, r.flag("force"))
        if rollback is None:
            return Response(202)
        return self._deployment(rollback)

    def queue(self) -> Response:
        items = []
        for app, count, backoff in self.manager.queued():
            left = max(0.0, backoff.until - self.manager.clock())
            summary = {"processedOffersCount": 0, "unusedOffersCount": 0}
            reason = self.manager.waiting_reason(app["id"])
            if reason:      # inside the summary: strict clients build objects from the item
                summary["waitingReason"] = reason
            items.append({"app": app_model.to_json(app), "count": count,
                          "delay": {"timeLeftSeconds": int(round(left)), "overdue": left <= 0},
                          "since": backoff.since, "processedOffersSummary": summary})
        return Response(200, {"queue": items})


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
