"""The "v1" isolation backend: the cgroup v1 devices controller (isolator/cgroups/cgroups_v1.py)."""
from typing import Callable, List, Optional, Sequence, Set, Tuple

from isolator.cgroups import cgroup_paths
from isolator.discovery import devices
from isolator.cgroups.backends import IsolationBackend, register
from isolator.cgroups.cgroups_v1 import apply, create, move, read_rules
from isolator.discovery.devices import Rule


class CgroupV1(IsolationBackend):
    """The v1 devices controller: `where` is the container's cgroup directory."""
    name = "v1"

    def create(self, where: str, rules: Sequence[Rule]) -> None:
        create(where, rules)

    def enter(self, where: str, pid: int) -> None:
        move(where, pid)

    def apply(self, where: str, rules: Sequence[Rule]) -> None:
        apply(where, rules)

    def allowed(self, where: str, minors: Sequence[int]) -> Optional[Set[int]]:
        return set(devices.allowed_gpu_minors(read_rules(where), minors))

    def allowed_nodes(self, where: str, nodes: Sequence[Tuple[int, int]]
                      ) -> Optional[Set[Tuple[int, int]]]:
        return set(devices.allowed_nodes(read_rules(where), nodes))

    def drifted(self, where: str, rules: Sequence[Rule], minors: Sequence[int],
                nodes: Sequence[Tuple[int, int]] = ()) -> bool:
        # the whole whitelist is compared: every device, not only `minors` and `nodes`
        return {r.to_v1() for r in read_rules(where)} != {r.to_v1() for r in rules}

    def remove(self, where: str, ours: Optional[Callable[[int], bool]] = None,
               evict_to: Optional[str] = None) -> List[int]:
        return cgroup_paths.remove(where, ours=ours, evict_to=evict_to)


register(CgroupV1())
