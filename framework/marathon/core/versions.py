"""The versions of apps and groups the API keeps: `GET .../versions`, rollback.

Each app version is its whole definition, stored under kind
`app_version:<app id>` keyed by version; each group version lists the versions
of its apps and subgroups at that time (kind `group_version:<group id>`), so a
group is rebuilt as it was by following those references. At most
MAX_VERSIONS of each are kept (Marathon's `--zk_max_versions` default): every
app change also makes a new version of each group above it, so the versions a
kept group version refers to are kept too. Removing an app or a group moves
its versions aside (kind `removed_app_version:<id>`, ...): it lists no
versions any more, as in Marathon, but the group versions that name it can
still be rolled back to (Marathon keeps them for the same reason until its
store GC finds them unreferenced); at most MAX_VERSIONS are kept aside per id.

Writes join the caller's store transaction.
"""
from typing import Dict, List, Optional, Tuple

from framework.marathon.state.groups import Group

from framework.state.state_store import SchedulerStore

MAX_VERSIONS = 50
APP_PREFIX, GROUP_PREFIX = "app_version:", "group_version:"
REMOVED = "removed_"


class VersionHistory:
    def __init__(self, store: SchedulerStore, limit: int = MAX_VERSIONS) -> None:
        self.store = store
        self.limit = limit
        self._index: Dict[str, List[str]] = {}   # kind -> versions, oldest first (loaded lazily)

    def _versions(self, kind: str) -> List[str]:
        if kind not in self._index:
            self._index[kind] = sorted(self.store.items(kind))
        return self._index[kind]

    def _record(self, kind: str, version: str, value: dict) -> None:
        versions = self._versions(kind)
        self.store.put(kind, version, value)
        if version not in versions:
            versions.append(version)
            versions.sort()
        while len(versions) > self.limit:
            self.store.delete(kind, versions.pop(0))

    def _set_aside(self, kind: str) -> None:
        values = self.store.items(kind) if self._versions(kind) else {}
        for version in list(self._versions(kind)):
            self._record(REMOVED + kind, version, values[version])
            self.store.delete(kind, version)
        self._index[kind] = []

    def _get(self, kind: str, version: str, removed_too: bool) -> Optional[dict]:
        for where in (kind, REMOVED + kind) if removed_too else (kind,):
            if version in self._versions(where):
                return self.store.items(where).get(version)
        return None

    # -- apps ------------------------------------------------------------------------
    def record_app(self, app: dict) -> None:
        self._record(APP_PREFIX + app["id"], app["version"], app)

    def app_versions(self, app_id: str) -> List[str]:
        """Newest first, as Marathon lists them."""
        return self._versions(APP_PREFIX + app_id)[::-1]

    def app_at(self, app_id: str, version: str, removed_too: bool = False) -> Optional[dict]:
        return self._get(APP_PREFIX + app_id, version, removed_too)

    def forget_app(self, app_id: str) -> None:
        self._set_aside(APP_PREFIX + app_id)

    # -- groups ----------------------------------------------------------------------
    def record_group(self, group: dict, apps: Dict[str, str], groups: Dict[str, str]) -> None:
        """`group` as it is now: its own fields and the versions of its children."""
        self._record(GROUP_PREFIX + group["id"], group["version"],
                     dict(group, apps=apps, groups=groups))

    def group_versions(self, group_id: str) -> List[str]:
        return self._versions(GROUP_PREFIX + group_id)[::-1]

    def group_at(self, group_id: str,
                 version: str) -> Optional[Tuple[Dict[str, dict], Dict[str, Group]]]:
        """The subtree (apps, groups) of the group as it was at `version`;
        None when that version (or one it refers to) is not kept."""
        return self._group_at(group_id, version, removed_too=False)

    def _group_at(self, group_id: str, version: str,
                  removed_too: bool) -> Optional[Tuple[Dict[str, dict], Dict[str, Group]]]:
        snapshot = self._get(GROUP_PREFIX + group_id, version, removed_too)
        if snapshot is None:
            return None
        apps: Dict[str, dict] = {}
        groups = {group_id: Group.from_json(snapshot)}
        for app_id, app_version in snapshot["apps"].items():
            app = self.app_at(app_id, app_version, removed_too=True)
            if app is None:
                return None
            apps[app_id] = app
        for child_id, child_version in snapshot["groups"].items():
            below = self._group_at(child_id, child_version, removed_too=True)
            if below is None:
                return None
            apps.update(below[0])
            groups.update(below[1])
        return apps, groups

    def forget_group(self, group_id: str) -> None:
        self._set_aside(GROUP_PREFIX + group_id)

    def reset(self) -> None:
        """Forget the cached index (after a transaction that did not commit)."""
        self._index.clear()
