"""A container's device cgroups, in every hierarchy this daemon enforces with.

On a hybrid host the daemon may enforce in the v1 devices hierarchy, on the
cgroup2 tree, or both; the kernel then lets an open through only if every
hierarchy allows it. This class hides the difference from the service and
from recovery: create (all or nothing), apply, read back, remove.
"""
import os
from typing import Callable, Dict, List, Optional, Sequence, Set

from isolator import cgroup_paths, cgroups_v1, cgroups_v2, devices
from isolator.cgroup_host import CgroupHost
from isolator.devices import Rule


class CgroupVanished(Exception):
    """A cgroup the container should have is gone."""


class ContainerCgroups:
    def __init__(self, host: CgroupHost, versions: Sequence[str], root: str) -> None:
        self.host = host
        self.versions = list(versions)
        self.root = root

    def paths(self, container_id: str) -> Dict[str, str]:
        return cgroup_paths.container_paths(self.host, self.root, container_id, self.versions)

    def create(self, container_id: str, rules: Sequence[Rule], pid: int) -> Dict[str, str]:
        """The cgroups with the rules in force, then the process moved in.
        On any failure nothing is left behind."""
        paths = self.paths(container_id)
        made: List[str] = []
        try:
            for version, path in paths.items():
                if version == "v1":
                    cgroups_v1.create(path, rules)
                    made.append(path)
                else:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    os.mkdir(path)
                    made.append(path)
                    cgroups_v2.apply(path, rules)
            for path in paths.values():
                with open(os.path.join(path, "cgroup.procs"), "w") as f:
                    f.write(str(pid))
        except BaseException:
            for path in made:
                try:
                    cgroup_paths.remove(path, timeout=2.0)
                except OSError:
                    pass
            raise
        return paths

    def apply(self, paths: Dict[str, str], rules: Sequence[Rule], v2: bool = True) -> None:
        """Make `rules` the container's rules (v2=False: leave the eBPF programs be)."""
        for version, path in paths.items():
            if version == "v2" and not v2:
                continue
            try:
                if version == "v1":
                    cgroups_v1.apply(path, rules)
                else:
                    cgroups_v2.apply(path, rules)
            except (cgroups_v1.CgroupGone, cgroups_v2.CgroupGone):
                raise CgroupVanished(path) from None

    def allowed(self, paths: Dict[str, str], minors: Sequence[int]) -> Set[int]:
        """GPU minors every hierarchy lets the container open (read back from the kernel)."""
        allowed = set(minors)
        for version, path in paths.items():
            try:
                if version == "v1":
                    allowed &= set(devices.allowed_gpu_minors(cgroups_v1.read_rules(path), minors))
                else:
                    found = cgroups_v2.allowed_gpu_minors(path, minors)
                    if found is not None:
                        allowed &= found
            except (cgroups_v1.CgroupGone, cgroups_v2.CgroupGone):
                raise CgroupVanished(path) from None
        return allowed

    def drifted(self, paths: Dict[str, str], rules: Sequence[Rule],
                minors: Sequence[int]) -> List[str]:
        """The hierarchies whose device rules are no longer exactly `rules` (read back
        from the kernel): v1 by its whitelist, v2 by running the attached programs on
        every device the rules name, every GPU and a device no rule allows."""
        out = []
        for version, path in paths.items():
            try:
                if version == "v1":
                    have = {r.to_v1() for r in cgroups_v1.read_rules(path)}
                    if have != {r.to_v1() for r in rules}:
                        out.append(version)
                elif not cgroups_v2.enforces_exactly(path, rules, minors):
                    out.append(version)
            except (cgroups_v1.CgroupGone, cgroups_v2.CgroupGone):
                raise CgroupVanished(path) from None
        return out

    def single_program(self, paths: Dict[str, str]) -> bool:
        """True when each v2 cgroup has exactly one device program (no update was
        cut short between attaching the new program and detaching the old)."""
        return all(cgroups_v2.program_count(p) == 1 for v, p in paths.items() if v == "v2")

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
        mounts = {"v1": self.host.devices_v1, "v2": self.host.unified}
        killed: Set[int] = set()
        for version, path in paths.items():
            killed.update(cgroup_paths.remove(path, ours=ours, evict_to=mounts.get(version)))
        return sorted(killed)

    def children(self) -> Set[str]:
        """Container ids that have a cgroup under our root in some hierarchy."""
        roots = cgroup_paths.root_paths(self.host, self.root, self.versions)
        return {name for r in roots.values() for name in cgroup_paths.list_children(r)}
