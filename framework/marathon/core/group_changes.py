"""The API's changes to groups (`/v2/groups`): a whole tree of apps deployed at once.

A group body is read (framework.marathon.state.groups), applied to the current
tree, and the apps whose definitions it changes (new, changed, removed,
scaled, rolled back) become one deployment whose steps follow their
dependencies. Apps a body lists unchanged are left alone (no new version, no
restart).
"""
from dataclasses import replace
from typing import Dict, List, Optional, Tuple

from framework.marathon.core import deployments
from framework.marathon.state import groups
from framework.marathon.core.app_changes import AppChanges
from framework.marathon.core.group_manager import GroupManager
from framework.http.validation import Violations, message


class GroupChanges:
    def __init__(self, group_manager: GroupManager, apps: AppChanges) -> None:
        self.group_manager = group_manager
        self.apps = apps

    def create(self, update: groups.Update, force: bool) -> dict:
        r = self.group_manager
        with r.lock:
            if update.id in r.groups:
                raise message(409, f"Group {update.id} is already created. "
                                   f"Use PUT to change this group.")
            if update.id in r.apps:
                raise message(409, f"An app with the path {update.id} already exists.")
            return self._update(update, force)

    def update(self, update: groups.Update, force: bool, dry_run: bool = False) -> dict:
        """PUT: change (or create) the group. `dry_run`: the plan, not deployed."""
        r = self.group_manager
        with r.lock:
            if dry_run:
                apps, _, now, target = self._target(update)
                return deployments.new_plan(now, {i: r.apps.get(i) for i in apps}, apps,
                                            groups.dependency_layers(target))
            return self._update(update, force)

    def delete(self, group_id: str, force: bool) -> dict:
        r = self.group_manager
        with r.lock:
            r.group(group_id)
            now = r.now()
            apps: Dict[str, Optional[dict]] = {i: None for i in r.apps
                                               if groups.is_below(i, group_id)}
            removed: Dict[str, Optional[dict]] = {
                g: None for g in r.groups if groups.is_below(g, group_id) and g != groups.ROOT}
            if group_id != groups.ROOT:
                removed[group_id] = None
            return r.change(apps, removed, now, force)

    def versions(self, group_id: str) -> List[str]:
        with self.group_manager.lock:
            self.group_manager.group(group_id)
            return self.group_manager.history.group_versions(group_id)

    def at_version(self, group_id: str, version: str) -> groups.Tree:
        with self.group_manager.lock:
            self.group_manager.group(group_id)
            tree = self.group_manager.history.group_at(group_id, version)
        if tree is None:
            raise group_not_in_version(group_id, version)
        return tree

    # -- applying a body --------------------------------------------------------------
    def _update(self, update: groups.Update, force: bool) -> dict:
        apps, changed_groups, now, _ = self._target(update)
        return self.group_manager.change(apps, changed_groups, now, force)

    def _target(self, update: groups.Update) -> Tuple[Dict[str, Optional[dict]],
                                                      Dict[str, Optional[dict]], str, groups.Tree]:
        """The apps and groups `update` changes (None: removed), the new
        version, and the whole tree after it."""
        r = self.group_manager
        now = r.now()
        current = r.tree()
        if update.version is not None:
            target = self._rolled_back(update, current)
        elif update.scale_by is not None:
            r.group(update.id)
            target = (groups.scale(current[0], update.id, update.scale_by), current[1])
        else:
            v = Violations()
            groups.stale_versions(current, update, v)
            v.raise_if_any()
            target = groups.apply_update(current, update, now)
        apps: Dict[str, Optional[dict]] = {}
        ports: set = set()            # service ports given to the apps of this change
        for app_id, app in target[0].items():
            old = current[0].get(app_id)
            if old is app:
                continue
            bare = {k: v for k, v in app.items() if k not in ("version", "versionInfo")}
            candidate = self.apps.versioned(bare, old, now, ports)
            if old is None or not deployments.same_definition(old, candidate):
                apps[app_id] = candidate
        for app_id in current[0]:
            if app_id not in target[0]:
                apps[app_id] = None
        changed_groups: Dict[str, Optional[groups.Group]] = {}
        for group_id, group in target[1].items():
            old = current[1].get(group_id)
            if old is None or old.dependencies != group.dependencies:
                changed_groups[group_id] = replace(group, version=now)
        for group_id in current[1]:
            if group_id not in target[1] and group_id != groups.ROOT:
                changed_groups[group_id] = None
        return apps, changed_groups, now, target

    def _rolled_back(self, update: groups.Update, current: groups.Tree) -> groups.Tree:
        r = self.group_manager
        r.group(update.id)
        old = r.history.group_at(update.id, update.version)
        if old is None:
            raise group_not_in_version(update.id, update.version)
        apps, tree_groups = dict(current[0]), dict(current[1])
        groups.remove(apps, tree_groups, update.id)
        apps.update(old[0])
        tree_groups.update(old[1])
        return apps, tree_groups


def group_not_in_version(group_id: str, version: str):
    return message(422, f"Group {group_id} not available in version {version}")
