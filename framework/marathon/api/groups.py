"""`/v2/groups`: trees of apps, created, changed, scaled, rolled back and
removed as one deployment each."""
from typing import List, Optional

from framework.marathon.state import app_model
from framework.marathon.core import deployments
from framework.marathon.state import groups
from framework.marathon.state import path_ids as ids
from framework.marathon.api.apps import deployment
from framework.marathon.api.context import ApiContext
from framework.marathon.api.app_view import compact
from framework.http.json_reader import Reader, parse_body
from framework.http.routing import Request, Response, Router
from framework.http.validation import ApiError, Violations

GROUP = r"(?P<group_id>/.+?)"
VERSION = r"(?P<version>[^/]+)"
GROUP_EMBEDS = {"group.groups", "group.apps", "group.pods"}
APP_EMBED_PREFIX = "group.apps."


def register(router: Router, api: ApiContext) -> None:
    g = GroupsResource(api)
    router.add(r"/v2/groups", GET=g.show, POST=g.create, PUT=g.update, DELETE=g.delete,
               PATCH=g.patch)
    router.add(rf"/v2/groups/versions/{VERSION}", GET=g.show_version)
    router.add(r"/v2/groups/versions", GET=g.versions)
    router.add(rf"/v2/groups{GROUP}/versions/{VERSION}", GET=g.show_version, PUT=g.roll_back_to)
    router.add(rf"/v2/groups{GROUP}/versions", GET=g.versions)
    router.add(rf"/v2/groups{GROUP}/apps", GET=g.apps)
    router.add(rf"/v2/groups{GROUP}", GET=g.show, POST=g.create, PUT=g.update, DELETE=g.delete,
               PATCH=g.patch)


class GroupsResource:
    def __init__(self, api: ApiContext) -> None:
        self.api = api
        self.group_manager = api.group_manager
        self.changes = api.groups

    def _read(self, r: Request, base: str) -> groups.Update:
        v = Violations()
        update = groups.read_update(parse_body(r.body), base, v, self.api.policy,
                                    stored=self.group_manager.apps)
        v.raise_if_any()
        return update

    @staticmethod
    def _base(raw_id: Optional[str]) -> str:
        if raw_id is None:
            return groups.ROOT
        problems = ids.errors(raw_id) if raw_id.strip("/") else []
        if problems:
            raise ApiError(422, {"message": "Object is not valid",
                                 "details": [{"path": "/id", "errors": problems}]})
        return ids.canonical(raw_id)

    # -- changes ----------------------------------------------------------------------------
    def create(self, r: Request, group_id: Optional[str] = None) -> Response:
        update = self._read(r, self._base(group_id))
        if update.id == groups.ROOT:
            raise ApiError(409, {"message": "Group / is already created. "
                                            "Use PUT to change this group."})
        response = deployment(self.changes.create(update, r.flag("force")), 201)
        response.headers["Location"] = update.id
        return response

    def update(self, r: Request, group_id: Optional[str] = None) -> Response:
        update = self._read(r, self._base(group_id))
        if r.flag("dryRun"):
            plan = self.changes.update(update, r.flag("force"), dry_run=True)
            return Response(200, {"steps": deployments.to_json(plan)["steps"]})
        return deployment(self.changes.update(update, r.flag("force")))

    def roll_back_to(self, r: Request, group_id: str, version: str) -> Response:
        """PUT /v2/groups/{id}/versions/{version} (what marathon-python's rollback_group sends)."""
        update = groups.Update(self._base(group_id))
        update.version = version
        return deployment(self.changes.update(update, r.flag("force")))

    def delete(self, r: Request, group_id: Optional[str] = None) -> Response:
        return deployment(self.changes.delete(self._base(group_id), r.flag("force")))

    def patch(self, r: Request, group_id: Optional[str] = None) -> Response:
        """Only `enforceRole`, only on top-level groups (Marathon 1.10); this
        framework has one role, so only `false` is accepted."""
        target = self._base(group_id)
        body = parse_body(r.body)
        v = Violations()
        table = Reader(v).obj(body, "/")
        if table is not None:
            enforce = Reader(v).optional(table, "enforceRole", "/", Reader(v).boolean)
            if enforce:
                v.rule("/enforceRole", "enforceRole is not supported by this framework "
                                       "(its tasks run in the framework's role)")
        with self.group_manager.lock:
            self.group_manager.group(target)
        if groups.parent(target) != groups.ROOT or target == groups.ROOT:
            v.rule("/", "Path needs to be top-level")
        v.raise_if_any()
        return Response(200, {})

    # -- reads -------------------------------------------------------------------------------
    def _embeds(self, r: Request):
        """(group embeds, app embeds or None for bare definitions)"""
        given = set(r.query.get("embed", ()))
        if not given:
            return GROUP_EMBEDS, None
        app_embeds = {e[len(APP_EMBED_PREFIX):] for e in given if e.startswith(APP_EMBED_PREFIX)}
        return given & GROUP_EMBEDS, (app_embeds or None)

    def show(self, r: Request, group_id: Optional[str] = None) -> Response:
        target = self._base(group_id)
        group_embeds, app_embeds = self._embeds(r)
        key = ("groups", target, tuple(sorted(group_embeds)),
               tuple(sorted(app_embeds or ())), r.flag("gpus"))
        with self.group_manager.lock:
            self.group_manager.group(target)
            body = self.api.view.answer(key, lambda: self._group_text(
                target, self.group_manager.tree(), group_embeds, app_embeds, r.flag("gpus")),
                shows_status=bool(app_embeds))
        return Response(200, body, {"Content-Type": "application/json"})

    def _group_text(self, group_id: str, tree: groups.Tree, group_embeds: set,
                    app_embeds: Optional[set], with_gpus: bool) -> bytes:
        """GroupInfo as text, each app's definition from the view's cache."""
        apps, all_groups = tree
        index = self.group_manager.by_app() if app_embeds else None
        children: dict = {}
        for app_id in apps:
            children.setdefault(groups.parent(app_id), ([], []))[0].append(app_id)
        for child in all_groups:
            if child != groups.ROOT:
                children.setdefault(groups.parent(child), ([], []))[1].append(child)
        parts: List[bytes] = []
        view = self.api.view

        def add(gid: str) -> None:
            group = all_groups[gid]
            app_ids, group_ids = children.get(gid, ([], []))
            parts.append(b'{"id":' + compact(gid).encode())
            if "group.apps" in group_embeds:
                parts.append(b',"apps":[')
                for i, app_id in enumerate(sorted(app_ids)):
                    if i:
                        parts.append(b",")
                    if app_embeds:
                        parts.append(self._app_text(apps[app_id], app_embeds, with_gpus,
                                                    index).encode())
                    else:
                        view.definition_parts(apps[app_id], parts)
                parts.append(b"]")
            if "group.groups" in group_embeds:
                parts.append(b',"groups":[')
                for i, sub in enumerate(sorted(group_ids)):
                    if i:
                        parts.append(b",")
                    add(sub)
                parts.append(b"]")
            parts.append((',"pods":[],"dependencies":' + compact(list(group.dependencies))
                          + ',"version":' + compact(group.version) + "}").encode())

        add(group_id)
        return b"".join(parts)

    def _app_text(self, app: dict, embeds: Optional[set], with_gpus: bool, index) -> str:
        """An app in a group: its bare definition unless `group.apps.*` embeds ask for more
        (only what they name, unlike /v2/apps, which always shows counts)."""
        view = self.api.view
        if embeds is None:
            return view.app_text(app, None, with_gpus, index)
        status = view.status(app, embeds, with_gpus, index)
        wanted = {}
        if embeds & {"counts"}:
            wanted.update({k: status[k] for k in ("tasksStaged", "tasksRunning", "tasksHealthy",
                                                   "tasksUnhealthy")})
        if embeds & {"deployments", "tasks", "failures"}:
            wanted["deployments"] = status["deployments"]
        for key in ("tasks", "lastTaskFailure"):
            if key in status:
                wanted[key] = status[key]
        base = view.app_text(app, None, with_gpus, index)
        return base if not wanted else base[:-1] + "," + compact(wanted)[1:]

    def apps(self, r: Request, group_id: str) -> Response:
        target = self._base(group_id)
        with self.group_manager.lock:
            self.group_manager.group(target)
            apps = [a for i, a in sorted(self.group_manager.apps.items()) if groups.is_below(i, target)]
            index = self.group_manager.by_app()
            return Response(200, {"apps": [self.api.view.app_json(a, set(), index=index)
                                           for a in apps]})

    def versions(self, r: Request, group_id: Optional[str] = None) -> Response:
        return Response(200, self.changes.versions(self._base(group_id)))

    def show_version(self, r: Request, version: str, group_id: Optional[str] = None) -> Response:
        target = self._base(group_id)
        tree = self.changes.at_version(target, version)
        group_embeds, _ = self._embeds(r)
        return Response(200, groups.group_json(target, tree,
                                               app_model.to_json if "group.apps" in group_embeds
                                               else None, "group.groups" in group_embeds))
