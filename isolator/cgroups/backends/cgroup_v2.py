"""The "v2" isolation backend: an eBPF device program on the cgroup2 tree
(isolator/cgroups/cgroups_v2.py)."""
import os
from typing import Callable, List, Optional, Sequence, Set, Tuple

from isolator.cgroups import cgroup_paths
from isolator.cgroups.backends import IsolationBackend, register
from isolator.cgroups.cgroups_v2 import (CgroupGone, allowed_gpu_minors, allowed_nodes, apply,
                                         create, enforces_exactly)
from isolator.discovery.devices import Rule


class CgroupV2(IsolationBackend):
    """An eBPF device program on a cgroup2 directory (`where`)."""
    name = "v2"

    def create(self, where: str, rules: Sequence[Rule]) -> None:
        create(where, rules)

    def enter(self, where: str, pid: int) -> None:
        if not os.path.isdir(where):
            raise CgroupGone(where)
        with open(os.path.join(where, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def apply(self, where: str, rules: Sequence[Rule]) -> None:
        apply(where, rules)

    def allowed(self, where: str, minors: Sequence[int]) -> Optional[Set[int]]:
        return allowed_gpu_minors(where, minors)

    def allowed_nodes(self, where: str, nodes: Sequence[Tuple[int, int]]
                      ) -> Optional[Set[Tuple[int, int]]]:
        return allowed_nodes(where, nodes)

    def drifted(self, where: str, rules: Sequence[Rule], minors: Sequence[int],
                nodes: Sequence[Tuple[int, int]] = ()) -> bool:
        return not enforces_exactly(where, rules, minors, nodes)

    def remove(self, where: str, ours: Optional[Callable[[int], bool]] = None,
               evict_to: Optional[str] = None) -> List[int]:
        return cgroup_paths.remove(where, ours=ours, evict_to=evict_to)


register(CgroupV2())
