"""Marathon groups: a tree of apps by path id, and what a group body means.

A group record holds only what is the group's own (`id`, `dependencies`,
`version`); its members follow from the ids. A group body (Marathon's
GroupUpdate) is read in one pass, every violation reported with its path. What
each field of a body means, and how dependencies order a deployment:
ARCHITECTURE.md, "Groups".
"""
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from framework.marathon.state import app_model
from framework.marathon.state import path_ids as ids
from framework.http.json_reader import Reader, child, index
from framework.http.security import DockerPolicy
from framework.http.validation import Violations, message

ROOT = "/"
CYCLE = "Dependency graph has cyclic dependencies."
CONJUNCTION = "not allowed in conjunction with other properties."


def parent(path_id: str) -> str:
    return path_id.rsplit("/", 1)[0] or ROOT


def ancestors(path_id: str) -> List[str]:
    """The groups above `path_id`, from the root down (the root included)."""
    out, current = [], path_id
    while current != ROOT:
        current = parent(current)
        out.append(current)
    return out[::-1]


def is_below(path_id: str, group_id: str) -> bool:
    return group_id == ROOT or path_id.startswith(group_id + "/")


@dataclass(frozen=True)
class Group:
    """A group's own record (its apps and groups follow from their ids)."""
    id: str
    dependencies: Tuple[str, ...]     # what every app below it waits for, sorted
    version: str

    @classmethod
    def from_json(cls, value: dict) -> "Group":
        """From the store or the version history (the JSON `to_json` wrote)."""
        return cls(value["id"], tuple(value.get("dependencies") or ()), value["version"])

    def to_json(self) -> dict:
        return {"id": self.id, "dependencies": list(self.dependencies), "version": self.version}


def new_group(group_id: str, version: str, dependencies: Iterable[str] = ()) -> Group:
    return Group(group_id, tuple(sorted(set(dependencies))), version)


def group_not_found(group_id: str):
    return message(404, f"Group '{group_id}' does not exist")


# -- reading a group body --------------------------------------------------------------
class Update:
    """A group body, read: None fields were not given."""

    def __init__(self, group_id: str) -> None:
        self.id = group_id
        self.apps: Optional[List[dict]] = None
        self.groups: Optional[List["Update"]] = None
        self.dependencies: Optional[List[str]] = None
        self.scale_by: Optional[float] = None
        self.version: Optional[str] = None
        # A `version` next to apps/groups/dependencies: accepted only as the
        # version the client read (GET echoes it back), checked against the tree.
        self.read_version: Optional[str] = None
        self.path = "/"

    def touches_services(self) -> bool:
        return bool(self.apps is not None or self.scale_by is not None or self.version
                    or any(g.touches_services() for g in self.groups or ()))


def read_update(raw: Any, base: str, v: Violations, policy: DockerPolicy,
                path: str = "/", stored: Optional[Mapping[str, dict]] = None) -> Optional[Update]:
    """The body for the group at `base` (its `id`, if any, is relative to it);
    `stored`: the apps by id, whose docker credential secrets are kept when not sent."""
    r = Reader(v)
    body = r.obj(raw, path)
    if body is None:
        return None
    group_id = base
    raw_id = r.optional(body, "id", path, r.string)
    if raw_id is not None:
        problems = ids.errors(raw_id) if raw_id.strip("/") else []
        for problem in problems:
            v.rule(child(path, "id"), problem)
        if not problems:
            group_id = ids.canonical(raw_id, base)
    update = Update(group_id)
    update.path = path
    update.version = r.optional(body, "version", path, r.string)
    update.scale_by = r.optional(body, "scaleBy", path, lambda x, p: r.number(x, p, 0.0))
    structural = [k for k in ("apps", "groups", "dependencies") if body.get(k) is not None]
    if update.version is not None and update.scale_by is not None:
        v.rule(path, CONJUNCTION)
    elif update.scale_by is not None and structural:
        v.rule(path, CONJUNCTION)
    elif update.version is not None and structural:
        update.read_version, update.version = update.version, None
    if body.get("enforceRole") is True:
        v.rule(child(path, "enforceRole"), "enforceRole is not supported by this framework "
                                           "(its tasks run in the framework's role)")
    r.optional(body, "enforceRole", path, r.boolean)
    deps = r.optional(body, "dependencies", path, lambda x, p: r.array(x, p, r.string))
    if deps is not None:
        for i, dependency in enumerate(deps):
            for problem in ids.errors(dependency):
                v.rule(index(child(path, "dependencies"), i), problem)
        update.dependencies = [ids.canonical(d, group_id) for d in deps]
    apps = body.get("apps")
    if apps is not None:
        if not isinstance(apps, list):
            v.type_error(child(path, "apps"), "error.expected.jsarray")
        else:
            update.apps = []
            for i, raw_app in enumerate(apps):
                where = index(child(path, "apps"), i)
                app = _read_app(raw_app, group_id, where, v, policy, stored or {})
                if app is not None:
                    update.apps.append(app)
    groups = body.get("groups")
    if groups is not None:
        if not isinstance(groups, list):
            v.type_error(child(path, "groups"), "error.expected.jsarray")
        else:
            update.groups = []
            for i, raw_group in enumerate(groups):
                where = index(child(path, "groups"), i)
                if isinstance(raw_group, dict) and raw_group.get("id") is None:
                    v.type_error(child(where, "id"), "error.path.missing")
                    continue
                sub = read_update(raw_group, group_id, v, policy, where, stored)
                if sub is None:
                    continue
                if parent(sub.id) != group_id:
                    v.rule(child(where, "id"), f"Identifier is not child of '{group_id}'")
                update.groups.append(sub)
    _check_unique(update, path, v)
    return update


def _read_app(raw: Any, group_id: str, where: str, v: Violations,
              policy: DockerPolicy, stored: Mapping[str, dict]) -> Optional[dict]:
    """One app of a group body: its id is relative to the group and must be
    a direct child of it."""
    inner = Violations()
    app_id = None
    if isinstance(raw, dict) and isinstance(raw.get("id"), str) and raw["id"].strip("/"):
        if not ids.errors(raw["id"]):
            app_id = ids.canonical(raw["id"], group_id)
    app = app_model.read_app(raw, inner, policy, app_id, stored.get(app_id or ""))
    v.merge(inner, where)
    if app is not None and parent(app["id"]) != group_id:
        v.rule(child(where, "id"), f"Identifier is not child of '{group_id}'")
        return None
    return app


def _check_unique(update: Update, path: str, v: Violations) -> None:
    app_ids = [a["id"] for a in update.apps or ()]
    group_ids = [g.id for g in update.groups or ()]
    if len(set(app_ids)) != len(app_ids):
        v.rule(child(path, "apps"), "Apps must have unique ids")
    if len(set(group_ids)) != len(group_ids):
        v.rule(child(path, "groups"), "Groups must have unique ids")
    if set(app_ids) & set(group_ids):
        v.rule(path, "Groups and Applications may not have the same identifier.")


# -- applying a body to the tree ----------------------------------------------------------
Tree = Tuple[Dict[str, dict], Dict[str, Group]]       # (apps by id, groups by id)


def apply_update(tree: Tree, update: Update, version: str) -> Tree:
    """The tree with `update` applied to its group (created if missing)."""
    apps, groups = dict(tree[0]), dict(tree[1])
    _apply(apps, groups, update, version)
    for group_id in ancestors(update.id):
        groups.setdefault(group_id, new_group(group_id, version))
    return apps, groups


def stale_versions(tree: Tree, update: Update, v: Violations) -> None:
    """A `version` sent with a group's apps or groups must be the version it has."""
    current = tree[1].get(update.id)
    if update.read_version is not None and (current is None
                                            or current.version != update.read_version):
        now = f"it is at {current.version}" if current else "it does not exist"
        v.rule(child(update.path, "version"),
               f"{update.read_version} is not the version of {update.id} ({now}): read the "
               f"group again, or leave `version` out (with apps or groups it only names the "
               f"version the change was made from)")
    for sub in update.groups or ():
        stale_versions(tree, sub, v)


def _apply(apps: Dict[str, dict], groups: Dict[str, Group], update: Update, version: str) -> None:
    current = groups.get(update.id) or new_group(update.id, version)
    dependencies = current.dependencies if update.dependencies is None else update.dependencies
    groups[update.id] = new_group(update.id, version, dependencies)
    if update.apps is not None:
        for app_id in [i for i in apps if parent(i) == update.id]:
            del apps[app_id]
        for app in update.apps:
            apps[app["id"]] = app
    if update.groups is not None:
        wanted = {g.id for g in update.groups}
        for group_id in [g for g in groups if parent(g) == update.id and g not in wanted]:
            remove(apps, groups, group_id)
        for sub in update.groups:
            _apply(apps, groups, sub, version)


def remove(apps: Dict[str, dict], groups: Dict[str, "Group"], group_id: str) -> None:
    """Drop a group and everything below it (the root itself stays, emptied)."""
    for app_id in [i for i in apps if is_below(i, group_id)]:
        del apps[app_id]
    for other in [g for g in groups if is_below(g, group_id) and g != ROOT]:
        del groups[other]
    if group_id != ROOT:
        groups.pop(group_id, None)


def scale(apps: Dict[str, dict], group_id: str, factor: float) -> Dict[str, dict]:
    """Every app below the group with its instances multiplied (rounded up)."""
    return {i: (dict(a, instances=math.ceil(a["instances"] * factor)) if is_below(i, group_id)
                else a) for i, a in apps.items()}


def conflicts(tree: Tree, paths: Iterable[str], v: Violations, cycles: bool = True) -> None:
    """Rules on the tree after a change to `paths` (app and group ids): no app
    where a group is, no dependency cycle (when `cycles`: the change may close one)."""
    apps, groups = tree
    if any(p in apps and p in groups for p in paths):
        v.rule(ROOT, "Groups and Applications may not have the same identifier.")
    if cycles and has_cycle(tree):
        v.rule(ROOT, CYCLE)


# -- dependencies -----------------------------------------------------------------------
def dependency_graph(tree: Tree) -> Dict[str, Set[str]]:
    """app id -> the app ids it waits for (its own dependencies, its groups'),
    for the apps that wait for anything (the others depend on nothing)."""
    apps, groups = tree
    with_deps = {g for g, group in groups.items() if group.dependencies}
    members: Dict[str, List[str]] = {}         # group -> apps below it (built on demand)

    def resolve(target: str) -> Iterable[str]:
        if target in apps:
            return (target,)
        if target not in members:
            members[target] = [a for a in apps if is_below(a, target)] if target in groups else []
        return members[target]

    graph: Dict[str, Set[str]] = {}
    for app_id, app in apps.items():
        dependencies = list(app.get("dependencies") or ())
        if with_deps:
            for group_id in ancestors(app_id):
                if group_id in with_deps:
                    dependencies.extend(groups[group_id].dependencies)
        if dependencies:
            edges = graph.setdefault(app_id, set())
            for dependency in dependencies:
                edges.update(resolve(dependency))
    return graph


def may_add_cycle(tree: Tree, app_ids: Iterable[str], group_ids: Iterable[str]) -> bool:
    """Whether changing these apps and groups can close a dependency cycle:
    only a new edge can, from an app or group with dependencies, or from an
    app placed below a group that has some."""
    apps, groups = tree
    for app_id in app_ids:
        app = apps.get(app_id)
        if app is not None and (app.get("dependencies") or any(
                g in groups and groups[g].dependencies for g in ancestors(app_id))):
            return True
    return any(g in groups and groups[g].dependencies for g in group_ids)


def has_cycle(tree: Tree) -> bool:
    graph = dependency_graph(tree)
    WHITE, GREY, BLACK = 0, 1, 2
    color = {node: WHITE for node in graph}
    for start in graph:
        if color[start] != WHITE:
            continue
        stack = [(start, iter(graph[start]))]
        color[start] = GREY
        while stack:
            node, edges = stack[-1]
            step = next(edges, None)
            if step is None:
                color[node] = BLACK
                stack.pop()
            elif color.get(step, BLACK) == GREY:
                return True
            elif color.get(step) == WHITE:
                color[step] = GREY
                stack.append((step, iter(graph[step])))
    return False


def dependency_layers(tree: Tree) -> Callable[[Iterable[str]], List[List[str]]]:
    """Orders app ids as Marathon does: by the length of the longest chain of
    dependencies below each (apps depending on nothing first); apps of one
    layer deploy together. The tree must have no cycle."""
    graph: Optional[Dict[str, Set[str]]] = None
    depth: Dict[str, int] = {}

    def longest(node: str) -> int:
        if node not in depth:
            depth[node] = 0          # (no cycle: never read before it is set below)
            depth[node] = 1 + max((longest(d) for d in graph.get(node, ())), default=0)
        return depth[node]

    def layers(app_ids: Iterable[str]) -> List[List[str]]:
        nonlocal graph
        app_ids = list(app_ids)
        if len(app_ids) <= 1:
            return [app_ids] if app_ids else []
        if graph is None:
            graph = dependency_graph(tree)
        by_depth: Dict[int, List[str]] = {}
        for app_id in app_ids:
            by_depth.setdefault(longest(app_id), []).append(app_id)
        return [by_depth[d] for d in sorted(by_depth)]

    return layers


# -- JSON out ---------------------------------------------------------------------------
def group_json(group_id: str, tree: Tree, app_json: Optional[Callable[[dict], Any]],
               with_groups: bool) -> dict:
    """Marathon's GroupInfo (only the keys marathon-python's MarathonGroup takes):
    `apps` when `app_json` is given, `groups` (recursively) when `with_groups`."""
    apps, groups = tree
    group = groups[group_id]
    out: Dict[str, Any] = {"id": group_id}
    children_apps = sorted(i for i in apps if parent(i) == group_id)
    children_groups = sorted(g for g in groups if g != ROOT and parent(g) == group_id)
    if app_json is not None:
        out["apps"] = [app_json(apps[i]) for i in children_apps]
    if with_groups:
        out["groups"] = [group_json(g, tree, app_json, with_groups) for g in children_groups]
    out["pods"] = []
    out["dependencies"] = list(group.dependencies)
    out["version"] = group.version
    return out
