"""The "docker" isolation backend: the v1 device cgroup the Docker engine made for a
DOCKER container (found with isolator.cgroups.docker_devices.v1_cgroup_of)."""
from typing import Callable, List, Optional, Sequence, Set, Tuple

from isolator.cgroups import cgroups_v1
from isolator.cgroups.backends import IsolationBackend, register
from isolator.discovery.devices import BASE_WHITELIST, Rule, allowed_gpu_minors, allowed_nodes
from isolator.discovery.gpu import NVIDIA_MAJOR


def _nvidia_diff(have: Set[str], rules: Sequence[Rule]) -> Tuple[Set[str], Set[str]]:
    """(lines missing, NVIDIA GPU lines too many) of a Docker whitelist against `rules`."""
    want = {r.to_v1() for r in rules if r not in BASE_WHITELIST}
    want_numbers = {line.split()[1] for line in want}
    extra = {line for line in have if line.startswith(f"c {NVIDIA_MAJOR}:")
             and line.split()[1] not in want_numbers}
    return want - have, extra


class DockerDeviceCgroup(IsolationBackend):
    """The v1 device cgroup the Docker engine made for a DOCKER container (`where`, found
    with `v1_cgroup_of`). The engine creates it from the --device options and removes
    it with the container; Docker's own whitelist stays as Docker made it, only the
    NVIDIA devices are read back against the grant and written again when they drift."""
    name = "docker"

    def create(self, where: str, rules: Sequence[Rule]) -> None:
        raise NotImplementedError("the Docker engine creates a container's device cgroup "
                                  "from its --device options (docker_options)")

    def enter(self, where: str, pid: int) -> None:
        raise NotImplementedError("the Docker engine places a container's processes")

    def apply(self, where: str, rules: Sequence[Rule]) -> None:
        have = {r.to_v1() for r in cgroups_v1.read_rules(where)}
        if "a *:* rwm" in have:                 # everything allowed: back to a whitelist
            cgroups_v1.write_rule(where, "devices.deny", "a")
            for rule in list(BASE_WHITELIST) + [r for r in rules if r not in BASE_WHITELIST]:
                cgroups_v1.write_rule(where, "devices.allow", rule.to_v1())
            return
        missing, extra = _nvidia_diff(have, rules)
        for line in sorted(extra):
            cgroups_v1.write_rule(where, "devices.deny", line)
        for line in sorted(missing):
            cgroups_v1.write_rule(where, "devices.allow", line)

    def allowed(self, where: str, minors: Sequence[int]) -> Optional[Set[int]]:
        return set(allowed_gpu_minors(cgroups_v1.read_rules(where), minors))

    def allowed_nodes(self, where: str, nodes: Sequence[Tuple[int, int]]
                      ) -> Optional[Set[Tuple[int, int]]]:
        return set(allowed_nodes(cgroups_v1.read_rules(where), nodes))

    def drifted(self, where: str, rules: Sequence[Rule], minors: Sequence[int],
                nodes: Sequence[Tuple[int, int]] = ()) -> bool:
        have = {r.to_v1() for r in cgroups_v1.read_rules(where)}
        return "a *:* rwm" in have or any(_nvidia_diff(have, rules))

    def remove(self, where: str, ours: Optional[Callable[[int], bool]] = None,
               evict_to: Optional[str] = None) -> List[int]:
        return []                                # the engine removes it with the container


register(DockerDeviceCgroup())
