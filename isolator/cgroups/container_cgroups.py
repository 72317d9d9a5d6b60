"""A MESOS container's device cgroups, in every hierarchy this daemon enforces with.

On a hybrid host the daemon may enforce in the v1 devices hierarchy, on the
cgroup2 tree, or both; the kernel then lets an open through only if every
hierarchy allows it. This class hides the difference from the isolator, recovery
and the orphan sweep: each hierarchy is an isolation backend (isolator/cgroups/backends/)
named like the hierarchy ("v1", "v2"), and every operation is the same call on
each: create (all or nothing), apply, read back, remove.
"""
import os
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from isolator.cgroups import backends, cgroup_paths
from isolator import crashpoints
from isolator.cgroups.cgroup_host import CgroupHost
from isolator.discovery.devices import Rule
from isolator.cgroups.backends import BackendGone


class CgroupVanished(Exception):
    """A cgroup the container should have is gone."""


class ContainerCgroups:
    def __init__(self, host: CgroupHost, versions: Sequence[str], root: str) -> None:
        self.host = host
        self.versions = list(versions)
        self.root = root
        self.backends = {v: backends.get(v) for v in self.versions}
        self.mounts = {"v1": host.devices_v1, "v2": host.unified}

    def _backend(self, version: str) -> backends.IsolationBackend:
        """The backend of a hierarchy (one a recorded container still uses counts too)."""
        return self.backends.get(version) or backends.get(version)

    def paths(self, container_id: str) -> Dict[str, str]:
        return cgroup_paths.container_paths(self.host, self.root, container_id, self.versions)

    def create(self, container_id: str, rules: Sequence[Rule], pid: int) -> Dict[str, str]:
        """The cgroups with the rules in force, then the process moved in.
        On any failure nothing is left behind."""
        paths = self.paths(container_id)
        made: List[str] = []
        try:
            for version, path in paths.items():
                made.append(path)
                self._backend(version).create(path, rules)
            crashpoints.reached("isolate:before_move", container_id)
            for version, path in paths.items():
                self._backend(version).enter(path, pid)
        except BaseException:
            for path in made:
                try:
                    cgroup_paths.remove(path, timeout=2.0)
                except OSError:
                    pass
            raise
        return paths

    def enter(self, paths: Dict[str, str], pid: int) -> None:
        """Move process `pid` into each of the cgroups (again: a move there is a no-op)."""
        for version, path in paths.items():
            try:
                self._backend(version).enter(path, pid)
            except BackendGone:
                raise CgroupVanished(path) from None

    def apply(self, paths: Dict[str, str], rules: Sequence[Rule]) -> None:
        """Make `rules` the container's rules in each of its hierarchies."""
        for version, path in paths.items():
            try:
                self._backend(version).apply(path, rules)
            except BackendGone:
                raise CgroupVanished(path) from None

    def allowed(self, paths: Dict[str, str], minors: Sequence[int]) -> Set[int]:
        """GPU minors every hierarchy lets the container open (read back from the kernel)."""
        return self._allowed_everywhere(paths, minors, lambda b, path: b.allowed(path, minors))

    def allowed_nodes(self, paths: Dict[str, str],
                      nodes: Sequence[Tuple[int, int]]) -> Set[Tuple[int, int]]:
        """The character devices (major, minor) of `nodes` (MIG capability nodes) every
        hierarchy lets the container open (read back from the kernel)."""
        return self._allowed_everywhere(paths, nodes,
                                        lambda b, path: b.allowed_nodes(path, nodes))

    def _allowed_everywhere(self, paths: Dict[str, str], asked: Sequence, read) -> Set:
        """Those of `asked` that every hierarchy allows, as `read(backend, path)` reads
        each back (None: nothing of ours enforced there, so it restricts nothing)."""
        allowed = set(asked)
        for version, path in paths.items():
            try:
                found = read(self._backend(version), path)
            except BackendGone:
                raise CgroupVanished(path) from None
            if found is not None:
                allowed &= found
        return allowed

    def drifted(self, paths: Dict[str, str], rules: Sequence[Rule],
                minors: Sequence[int], nodes: Sequence[Tuple[int, int]] = ()) -> List[str]:
        """The hierarchies whose device rules are no longer exactly `rules` (for the GPU
        `minors` and the MIG capability `nodes` above all)."""
        out = []
        for version, path in paths.items():
            try:
                if self._backend(version).drifted(path, rules, minors, nodes):
                    out.append(version)
            except BackendGone:
                raise CgroupVanished(path) from None
        return out

    def repair(self, paths: Dict[str, str], rules: Sequence[Rule],
               minors: Sequence[int], nodes: Sequence[Tuple[int, int]] = ()) -> List[str]:
        """Write `rules` again where they drifted; returns those hierarchies."""
        drifted = self.drifted(paths, rules, minors, nodes)
        self.apply({v: paths[v] for v in drifted}, rules)
        return drifted

    def procs(self, paths: Dict[str, str]) -> Optional[List[int]]:
        """Pids in any of the cgroups; None when none of them exists."""
        found = [cgroup_paths.procs(p) for p in paths.values()]
        if all(f is None for f in found):
            return None
        return sorted({pid for f in found if f for pid in f})

    def existing(self, paths: Dict[str, str]) -> Dict[str, str]:
        return {v: p for v, p in paths.items() if os.path.isdir(p)}

    def remove(self, paths: Dict[str, str],
               ours: Optional[Callable[[int], bool]] = None) -> List[int]:
        """Kill what is in the cgroups and remove them. With `ours`, only the processes
        it accepts are killed; others are moved to the hierarchy's root cgroup."""
        killed: Set[int] = set()
        for version, path in paths.items():
            killed.update(self._backend(version).remove(path, ours, self.mounts.get(version)))
        return sorted(killed)

    def children(self) -> Set[str]:
        """Container ids that have a cgroup under our root in some hierarchy."""
        roots = cgroup_paths.root_paths(self.host, self.root, self.versions)
        return {name for r in roots.values() for name in cgroup_paths.list_children(r)}
